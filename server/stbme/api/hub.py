"""The DNA hub server (`stbme hub`, optional): sidecars heartbeat their stats (numbers only) and capabilities,
and publish and fetch genes and capsules (templates, never chat content). Same middlewares, error shape and
token rule as the sidecar's API; its own SQLite database (`hub.sqlite3`) with its own migrations.

It answers the plan's client (seed 001, `MemoryNetwork`) as that client expects: a heartbeat gets
`{"tasks": [...]}`, sharing a gene gets a 200, and `GET /genes/{id}` answers with the gene itself (the
client returns the body as the gene), in the plan's shape; who published it and when travel in the
`X-Published-By` (percent-encoded) / `X-Published-At` headers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from .. import __version__
from ..dna import assets
from ..dna.hub_client import PUBLISHED_AT, PUBLISHED_BY, shareable_gene
from ..errors import BadRequest, NotFound
from ..policy import STRATEGIES
from ..store import Store
from ..store.migrations import HUB_MIGRATIONS
from .middleware import auth_middleware, browser_middleware, error_middleware, host_middleware, protocol_log
from .requests import json_response, read_object

DEFAULT_HUB_PORT = 8770
MAX_HUB_BODY = 1024 * 1024
HUB_DATABASE = "hub.sqlite3"
hub_store_key = web.AppKey("hub_store", Store)


def _numbers_only(stats: Any) -> dict:
    if not isinstance(stats, dict):
        return {}
    return {str(k)[:64]: v for k, v in list(stats.items())[:64]
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _node_id(body: dict) -> str:
    node_id = body.get("node_id")
    if not isinstance(node_id, str) or not node_id.strip() or len(node_id) > 128:
        raise BadRequest("'node_id' must be a non-empty string of at most 128 characters", field="node_id")
    return node_id


def _gene_data(raw: Any) -> dict:
    """A published gene, validated like a local one (the plan's actions mapped or kept as templates), kept
    in the plan's shape with only the shareable keys."""
    gene = assets.gene_from_body(shareable_gene(raw))
    return shareable_gene(gene.plan_json())


def _capsule_data(body: dict) -> dict:
    raw, genes = body.get("capsule"), body.get("genes", [])
    if not isinstance(raw, dict) or not isinstance(genes, list):
        raise BadRequest("send {\"node_id\", \"capsule\": {...}, \"genes\": [...]}", field="capsule")
    gene_data = [_gene_data(g) for g in genes]
    gene_ids = raw.get("gene_ids", [])
    if not isinstance(gene_ids, list) or set(gene_ids) - {g["id"] for g in gene_data}:
        raise BadRequest("every gene of the capsule must be sent in 'genes'", field="genes")
    strategy = raw.get("strategy", "balanced")
    if strategy not in STRATEGIES:
        raise BadRequest(f"'strategy' must be one of {', '.join(STRATEGIES)}", field="capsule.strategy")
    if not isinstance(raw.get("id"), str) or not isinstance(raw.get("name"), str):
        raise BadRequest("the capsule needs 'id' and 'name'", field="capsule")
    return {"id": raw["id"][:80], "name": raw["name"][:120], "description": str(raw.get("description", ""))[:2000],
            "gene_ids": gene_ids, "strategy": strategy, "genes": gene_data}


async def _heartbeat(request):
    body = await read_object(request, "{node_id, stats, capabilities, version}")
    node_id = _node_id(body)
    caps = [str(c)[:32] for c in body.get("capabilities", []) if isinstance(c, str)][:32]
    stats = orjson.dumps(_numbers_only(body.get("stats"))).decode()
    version = str(body.get("version", ""))[:32]
    now = time.time()

    def write(conn):
        conn.execute(
            "INSERT INTO hub_nodes (node_id, first_seen, last_seen, heartbeats, stats, capabilities, version)"
            " VALUES (?,?,?,1,?,?,?) ON CONFLICT (node_id) DO UPDATE SET last_seen = excluded.last_seen,"
            " heartbeats = heartbeats + 1, stats = excluded.stats, capabilities = excluded.capabilities,"
            " version = excluded.version", (node_id, now, now, stats, orjson.dumps(caps).decode(), version))
        return conn.execute("SELECT count(*) FROM hub_nodes").fetchone()[0]

    count = await request.app[hub_store_key].write(write)
    return json_response({"tasks": [], "nodes": count, "at": now})


async def _nodes(request):
    rows = await request.app[hub_store_key].read(
        lambda conn: conn.execute("SELECT * FROM hub_nodes ORDER BY node_id").fetchall())
    return json_response({"nodes": [{**dict(r), "stats": orjson.loads(r["stats"]),
                                     "capabilities": orjson.loads(r["capabilities"])} for r in rows]})


def _publish(kind: str):
    async def handler(request):
        body = await read_object(request, f"{{node_id, {kind}}}")
        node_id = _node_id(body)
        data = _gene_data(body.get("gene")) if kind == "gene" else _capsule_data(body)
        await request.app[hub_store_key].write(lambda conn: conn.execute(
            "INSERT OR REPLACE INTO hub_assets (kind, id, node_id, data, published_at) VALUES (?,?,?,?,?)",
            (kind, data["id"], node_id, orjson.dumps(data).decode(), time.time())))
        return json_response({kind: data, "published_by": node_id})
    return handler


async def _published(request, kind: str):
    asset_id = request.match_info["asset_id"]
    row = await request.app[hub_store_key].read(lambda conn: conn.execute(
        "SELECT node_id, data, published_at FROM hub_assets WHERE kind = ? AND id = ?", (kind, asset_id)).fetchone())
    if row is None:
        raise NotFound(f"no {kind} {asset_id!r} on this hub", field="id")
    return row


async def _fetch_gene(request):
    """The body is the gene (the plan's client returns it as is), as it was published (`created` and
    `usage_count` filled in when the publisher sent none)."""
    row = await _published(request, "gene")
    gene = {"created": row["published_at"], "usage_count": 0, **orjson.loads(row["data"])}
    return web.Response(body=orjson.dumps(gene), content_type="application/json", headers={
        PUBLISHED_BY: quote(row["node_id"], safe=""), PUBLISHED_AT: repr(row["published_at"])})


async def _fetch_capsule(request):
    row = await _published(request, "capsule")
    return json_response({"capsule": orjson.loads(row["data"]), "published_by": row["node_id"],
                          "published_at": row["published_at"]})


def _list(kind: str):
    async def handler(request):
        rows = await request.app[hub_store_key].read(lambda conn: conn.execute(
            "SELECT id, node_id, data, published_at FROM hub_assets WHERE kind = ? ORDER BY published_at DESC"
            " LIMIT 500", (kind,)).fetchall())
        return json_response({kind + "s": [{"id": r["id"], "name": orjson.loads(r["data"]).get("name"),
                                            "published_by": r["node_id"], "published_at": r["published_at"]}
                                           for r in rows]})
    return handler


async def _health(request):
    return json_response({"hub": True, "version": __version__})


def create_hub_app(data_dir: Path | str, *, token: str = "") -> web.Application:
    """The hub: heartbeats, published genes and capsules, in `<data_dir>/hub.sqlite3`. Sidecars call it,
    browsers never: any request from a web page is refused, and without a token only loopback Host names
    are answered (DNS rebinding)."""
    guards = [host_middleware(lambda: [])] if not token else []
    app = web.Application(middlewares=[*guards, browser_middleware(lambda: [], allow_any_origin=False),
                                       error_middleware, auth_middleware(token or "")],
                          client_max_size=MAX_HUB_BODY, handler_args={"logger": protocol_log})
    app[hub_store_key] = Store.open(Path(data_dir).expanduser() / HUB_DATABASE, migrations=HUB_MIGRATIONS)
    r = app.router
    r.add_get("/health", _health)
    r.add_post("/heartbeat", _heartbeat)
    r.add_get("/nodes", _nodes)
    r.add_post("/genes", _publish("gene"))
    r.add_get("/genes", _list("gene"))
    r.add_get("/genes/{asset_id}", _fetch_gene)
    r.add_post("/capsules", _publish("capsule"))
    r.add_get("/capsules", _list("capsule"))
    r.add_get("/capsules/{asset_id}", _fetch_capsule)

    async def close(app):
        app[hub_store_key].close()

    app.on_cleanup.append(close)
    return app
