"""The DNA hub (optional, off by default): sidecars heartbeat their stats and capabilities and share genes
and capsules. Chat content never leaves the machine: a heartbeat carries numbers only, and only genes and
capsules (templates) are published. A dead hub never affects the chat: every hub call has a timeout and
the heartbeat loop only logs its failures.

`create_hub_app(data_dir, token)` is the hub server (`stbme hub`); `HubClient` is the sidecar's side.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp import web

from .. import __version__
from ..errors import BadRequest, Conflict, NotFound, StbmeError, Unauthorized, Unavailable
from ..store.events import record_event
from . import assets

if TYPE_CHECKING:
    from .service import DnaService

log = logging.getLogger("stbme.hub")
DEFAULT_HUB_PORT = 8770
CAPABILITIES = ("remember", "recall", "reflect", "decay", "signals", "genes", "capsules")
HEARTBEAT_TIMEOUT_S = 5.0
ASSET_TIMEOUT_S = 10.0
MAX_HUB_BODY = 1024 * 1024


# -- the hub server -------------------------------------------------------------------------------------
class HubStore:
    """The hub's own small SQLite file: nodes seen and assets published."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.conn.row_factory = sqlite3.Row
        self.lock = threading.Lock()
        with self.lock:
            self.conn.execute("PRAGMA journal_mode = WAL")
            self.conn.execute("CREATE TABLE IF NOT EXISTS hub_nodes (node_id TEXT PRIMARY KEY, first_seen REAL NOT NULL,"
                              " last_seen REAL NOT NULL, heartbeats INTEGER NOT NULL, stats TEXT NOT NULL,"
                              " capabilities TEXT NOT NULL, version TEXT)")
            self.conn.execute("CREATE TABLE IF NOT EXISTS hub_assets (kind TEXT NOT NULL, id TEXT NOT NULL,"
                              " node_id TEXT NOT NULL, data TEXT NOT NULL, published_at REAL NOT NULL,"
                              " PRIMARY KEY (kind, id))")

    def run(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self.lock:
            return self.conn.execute(sql, args).fetchall()

    def close(self) -> None:
        with self.lock:
            self.conn.close()


hub_store_key = web.AppKey("hub_store", HubStore)
hub_token_key = web.AppKey("hub_token", str)


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


async def _body(request: web.Request) -> dict:
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise BadRequest("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def _hub_json(data: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps({"ok": status < 400, **data}), status=status,
                        content_type="application/json")


@web.middleware
async def _hub_errors(request: web.Request, handler):
    try:
        token = request.app[hub_token_key]
        if token and request.path != "/health":
            scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token.encode()):
                raise Unauthorized("missing or wrong hub token (Authorization: Bearer <token>)")
        return await handler(request)
    except StbmeError as exc:
        return _hub_json({"error": exc.message, "status": exc.status, "field": exc.field}, exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _hub_json({"error": exc.reason, "status": exc.status, "field": None}, exc.status)


async def _heartbeat(request):
    body = await _body(request)
    node_id = _node_id(body)
    caps = [str(c)[:32] for c in body.get("capabilities", []) if isinstance(c, str)][:32]
    now = time.time()
    request.app[hub_store_key].run(
        "INSERT INTO hub_nodes (node_id, first_seen, last_seen, heartbeats, stats, capabilities, version)"
        " VALUES (?,?,?,1,?,?,?) ON CONFLICT (node_id) DO UPDATE SET last_seen = excluded.last_seen,"
        " heartbeats = heartbeats + 1, stats = excluded.stats, capabilities = excluded.capabilities,"
        " version = excluded.version",
        (node_id, now, now, orjson.dumps(_numbers_only(body.get("stats"))).decode(), orjson.dumps(caps).decode(),
         str(body.get("version", ""))[:32]))
    count = request.app[hub_store_key].run("SELECT count(*) FROM hub_nodes")[0][0]
    return _hub_json({"tasks": [], "nodes": count, "at": now})


async def _nodes(request):
    rows = request.app[hub_store_key].run("SELECT * FROM hub_nodes ORDER BY node_id")
    return _hub_json({"nodes": [{**dict(r), "stats": orjson.loads(r["stats"]),
                                 "capabilities": orjson.loads(r["capabilities"])} for r in rows]})


def _publish(kind: str):
    async def handler(request):
        body = await _body(request)
        node_id = _node_id(body)
        store = request.app[hub_store_key]
        if kind == "gene":
            gene = assets.gene_from_body(_strip(body.get("gene")))
            data = {k: v for k, v in gene.to_json().items() if k in ("id", "name", "description", "triggers", "actions")}
        else:
            raw = body.get("capsule")
            genes = body.get("genes", [])
            if not isinstance(raw, dict) or not isinstance(genes, list):
                raise BadRequest("send {\"node_id\", \"capsule\": {...}, \"genes\": [...]}", field="capsule")
            gene_data = [{k: v for k, v in assets.gene_from_body(_strip(g)).to_json().items()
                          if k in ("id", "name", "description", "triggers", "actions")} for g in genes]
            ids = [g["id"] for g in gene_data]
            gene_ids = raw.get("gene_ids", [])
            if not isinstance(gene_ids, list) or set(gene_ids) - set(ids):
                raise BadRequest("every gene of the capsule must be sent in 'genes'", field="genes")
            strategy = raw.get("strategy", "balanced")
            if strategy not in ("balanced", "aggressive", "conservative", "cleanup"):
                raise BadRequest("unknown strategy", field="capsule.strategy")
            if not isinstance(raw.get("id"), str) or not isinstance(raw.get("name"), str):
                raise BadRequest("the capsule needs 'id' and 'name'", field="capsule")
            data = {"id": raw["id"][:80], "name": raw["name"][:120], "description": str(raw.get("description", ""))[:2000],
                    "gene_ids": gene_ids, "strategy": strategy, "genes": gene_data}
        store.run("INSERT OR REPLACE INTO hub_assets (kind, id, node_id, data, published_at) VALUES (?,?,?,?,?)",
                  (kind, data["id"], node_id, orjson.dumps(data).decode(), time.time()))
        return _hub_json({kind: data, "published_by": node_id})
    return handler


def _strip(raw: Any) -> dict:
    if not isinstance(raw, dict):
        raise BadRequest("a gene must be an object", field="gene")
    return {k: raw[k] for k in ("id", "name", "description", "triggers", "actions") if k in raw}


def _fetch(kind: str):
    async def handler(request):
        asset_id = request.match_info["asset_id"]
        rows = request.app[hub_store_key].run("SELECT node_id, data, published_at FROM hub_assets WHERE kind = ? AND id = ?",
                                              (kind, asset_id))
        if not rows:
            raise NotFound(f"no {kind} {asset_id!r} on this hub", field="id")
        return _hub_json({kind: orjson.loads(rows[0]["data"]), "published_by": rows[0]["node_id"],
                          "published_at": rows[0]["published_at"]})
    return handler


def _list(kind: str):
    async def handler(request):
        rows = request.app[hub_store_key].run(
            "SELECT id, node_id, data, published_at FROM hub_assets WHERE kind = ? ORDER BY published_at DESC LIMIT 500",
            (kind,))
        return _hub_json({kind + "s": [{"id": r["id"], "name": orjson.loads(r["data"]).get("name"),
                                        "published_by": r["node_id"], "published_at": r["published_at"]}
                                       for r in rows]})
    return handler


async def _health(request):
    return _hub_json({"hub": True, "version": __version__})


def create_hub_app(data_dir: Path | str, *, token: str = "") -> web.Application:
    """The hub: heartbeats, published genes and capsules, in `<data_dir>/hub.sqlite3`."""
    app = web.Application(middlewares=[_hub_errors], client_max_size=MAX_HUB_BODY)
    app[hub_store_key] = HubStore(Path(data_dir).expanduser() / "hub.sqlite3")
    app[hub_token_key] = token or ""
    r = app.router
    r.add_get("/health", _health)
    r.add_post("/heartbeat", _heartbeat)
    r.add_get("/nodes", _nodes)
    r.add_post("/genes", _publish("gene"))
    r.add_get("/genes", _list("gene"))
    r.add_get("/genes/{asset_id}", _fetch("gene"))
    r.add_post("/capsules", _publish("capsule"))
    r.add_get("/capsules", _list("capsule"))
    r.add_get("/capsules/{asset_id}", _fetch("capsule"))

    async def close(app):
        app[hub_store_key].close()

    app.on_cleanup.append(close)
    return app


# -- the sidecar's client -------------------------------------------------------------------------------
class HubClient:
    def __init__(self, service: "DnaService"):
        self.service = service
        self._session: aiohttp.ClientSession | None = None
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self._failing = False

    @property
    def settings(self):
        return self.service.sidecar.settings

    @property
    def enabled(self) -> bool:
        return bool(self.settings["network.enabled"] and self.settings["network.hub_url"]
                    and self.settings["network.node_id"])

    def status(self) -> dict:
        return {"enabled": self.enabled, "hub_url": self.settings["network.hub_url"] or None,
                "node_id": self.settings["network.node_id"] or None, "last_ok": self.last_ok,
                "last_error": self.last_error}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _call(self, method: str, path: str, *, json: Any = None, timeout: float = ASSET_TIMEOUT_S) -> dict:
        if not self.enabled:
            raise Conflict("the hub is off: set network.enabled, network.hub_url and network.node_id",
                           field="network.enabled")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {self.settings['network.token']}"} if self.settings["network.token"] else {}
        url = self.settings["network.hub_url"].rstrip("/") + path
        try:
            async with self._session.request(method, url, json=json, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {}
                if resp.status == 404:
                    raise NotFound(f"hub: {data.get('error') or 'not found'}", field="id")
                if resp.status >= 400:
                    raise Unavailable(f"hub answered {resp.status}: {data.get('error') or resp.reason}")
                return data
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(f"hub {self.settings['network.hub_url']} unreachable: "
                              f"{type(exc).__name__}: {exc}".rstrip(": ")) from None

    async def heartbeat_once(self) -> dict:
        """Send this sidecar's stats (numbers only) and capabilities."""
        try:
            stats = await self.service.global_stats()
            data = await self._call("POST", "/heartbeat", timeout=HEARTBEAT_TIMEOUT_S, json={
                "node_id": self.settings["network.node_id"], "stats": stats,
                "capabilities": list(CAPABILITIES), "version": __version__})
        except StbmeError as exc:
            self.last_error = exc.message
            raise
        self.last_ok, self.last_error = time.time(), None
        if data.get("tasks"):
            log.info("hub sent %d tasks; this sidecar runs none (sharing only)", len(data["tasks"]))
        return data

    async def run(self) -> None:
        """The heartbeat loop: failures are logged once per outage and never reach the chat."""
        while True:
            if self.enabled:
                try:
                    await self.heartbeat_once()
                    if self._failing:
                        log.info("hub reachable again")
                    self._failing = False
                except asyncio.CancelledError:
                    raise
                except StbmeError as exc:
                    if not self._failing:
                        log.warning("hub heartbeat failed (will keep trying): %s", exc.message)
                    self._failing = True
                except Exception:
                    log.exception("hub heartbeat failed")
            await asyncio.sleep(max(60.0, self.settings["network.heartbeat_interval_minutes"] * 60))

    async def publish_gene(self, gene_id: str) -> dict:
        store = self.service.sidecar.store
        gene = await store.read(lambda conn: assets.require_gene(conn, gene_id))
        data = await self._call("POST", "/genes", json={"node_id": self.settings["network.node_id"],
                                                        "gene": _strip(gene.to_json())})
        await store.write(lambda conn: record_event(conn, None, "hub_publish", asset="gene", id=gene_id))
        return data

    async def publish_capsule(self, capsule_id: str) -> dict:
        store = self.service.sidecar.store

        def read(conn):
            capsule = assets.require_capsule(conn, capsule_id)
            return capsule, [assets.require_gene(conn, g) for g in capsule.gene_ids]

        capsule, genes = await store.read(read)
        data = await self._call("POST", "/capsules", json={
            "node_id": self.settings["network.node_id"], "capsule": capsule.to_json(),
            "genes": [_strip(g.to_json()) for g in genes]})
        await store.write(lambda conn: record_event(conn, None, "hub_publish", asset="capsule", id=capsule_id))
        return data

    async def fetch_gene(self, gene_id: str) -> dict:
        """Fetch a gene by id from the hub and install it (origin 'hub'); a local gene of that id is kept."""
        data = await self._call("GET", f"/genes/{gene_id}")
        gene = self._install_genes([data.get("gene")])[0]

        def write(conn):
            _install(conn, gene)
            record_event(conn, None, "hub_fetch", asset="gene", id=gene.id, published_by=data.get("published_by"))
        await self.service.sidecar.store.write(write)
        return gene.to_json()

    async def fetch_capsule(self, capsule_id: str) -> dict:
        """Fetch a capsule and its genes from the hub and install them."""
        data = await self._call("GET", f"/capsules/{capsule_id}")
        raw = data.get("capsule") or {}
        genes = self._install_genes(raw.get("genes") or [])

        def write(conn):
            for gene in genes:
                _install(conn, gene, keep_local=True)
            capsule = assets.capsule_from_body(conn, {k: raw[k] for k in ("id", "name", "description", "gene_ids",
                                                                            "strategy") if k in raw})
            capsule.origin = "hub"
            existing = assets.get_capsule(conn, capsule.id)
            if existing is not None and existing.origin != "hub":
                raise Conflict(f"a local capsule {capsule.id!r} exists already", field="id")
            assets.save_capsule(conn, capsule, new=existing is None)
            record_event(conn, None, "hub_fetch", asset="capsule", id=capsule.id, published_by=data.get("published_by"))
            return capsule
        return (await self.service.sidecar.store.write(write)).to_json()

    @staticmethod
    def _install_genes(raws: list) -> list[assets.Gene]:
        genes = []
        for raw in raws:
            gene = assets.gene_from_body(_strip(raw))
            gene.origin = "hub"
            genes.append(gene)
        return genes


def _install(conn: sqlite3.Connection, gene: assets.Gene, *, keep_local: bool = False) -> None:
    """Install a gene from the hub. A built-in or local gene of that id is never overwritten: a conflict,
    or (`keep_local`, for a capsule's genes) the local one is kept."""
    existing = assets.get_gene(conn, gene.id)
    if existing is not None and existing.origin != "hub":
        if keep_local:
            return
        raise Conflict(f"a {existing.origin} gene {gene.id!r} exists already", field="id")
    if existing is not None:
        gene.usage_count, gene.enabled, gene.created_at = existing.usage_count, existing.enabled, existing.created_at
    assets.save_gene(conn, gene, new=existing is None)

