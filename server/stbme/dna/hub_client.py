"""The sidecar's side of the DNA hub (optional, off by default): heartbeat this sidecar's stats and
capabilities, publish and fetch genes and capsules. Chat content never leaves the machine: a heartbeat
carries numbers only, and only genes and capsules (templates) are shared. A dead hub never affects the chat:
every call has a timeout and the heartbeat loop only logs its failures. The hub server is api/hub.py.

Speaks the plan's protocol (seed 001, `MemoryNetwork`): `POST /heartbeat {node_id, stats, capabilities}`
-> `{tasks}`, `POST /genes {node_id, gene}`, `GET /genes/{id}?node_id=` whose body is the gene itself. A hub
that wraps it (`{"gene": {...}, "published_by"}`, this sidecar's hub before it spoke the plan) still works;
`stbme hub` says who published a gene in the `X-Published-By` header."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import quote, unquote

import aiohttp

from .. import __version__, config
from ..errors import BadRequest, Conflict, NotFound, StbmeError, Unavailable
from ..store import Store
from ..store.events import record_event
from . import assets

log = logging.getLogger("stbme.hub")
CAPABILITIES = ("remember", "recall", "reflect", "decay", "signals", "genes", "capsules")
HEARTBEAT_TIMEOUT_S = 5.0
ASSET_TIMEOUT_S = 10.0
SHARED_GENE_KEYS = ("id", "name", "description", "triggers", "actions", "created", "usage_count")  # the plan's gene
PUBLISHED_BY = "X-Published-By"
PUBLISHED_AT = "X-Published-At"


def shareable_gene(raw: Any) -> dict:
    """The parts of a gene a hub stores and serves: the plan's gene (seed 001 `create_gene`), usage count
    included; none of our local flags."""
    if not isinstance(raw, dict):
        raise BadRequest("a gene must be an object", field="gene")
    return {k: raw[k] for k in SHARED_GENE_KEYS if k in raw}


def gene_of_answer(data: Any) -> tuple[Any, Any]:
    """(the gene, who published it) from a hub's answer: the plan's bare gene, or a wrapped one."""
    if isinstance(data, dict) and isinstance(data.get("gene"), dict) and "triggers" not in data:
        return data["gene"], data.get("published_by")
    return data, None


class HubClient:
    def __init__(self, store: Store, settings: config.Settings, stats: Callable[[], Awaitable[dict]]):
        self.store = store
        self.settings = settings
        self.stats = stats   # this sidecar's numbers for the heartbeat (never chat content)
        self._session: aiohttp.ClientSession | None = None
        self.last_ok: float | None = None
        self.last_error: str | None = None
        self._failing = False

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

    async def _call(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
                    timeout: float = ASSET_TIMEOUT_S) -> tuple[Any, Mapping[str, str]]:
        """(the answer's JSON, its headers); 4xx/5xx and network failures raise."""
        if not self.enabled:
            raise Conflict("the hub is off: set network.enabled, network.hub_url and network.node_id",
                           field="network.enabled")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"Authorization": f"Bearer {self.settings['network.token']}"} if self.settings["network.token"] else {}
        url = self.settings["network.hub_url"].rstrip("/") + path
        try:
            async with self._session.request(method, url, json=json, params=params, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                try:
                    data = await resp.json(content_type=None)
                except ValueError:
                    data = {}
                error = data.get("error") if isinstance(data, dict) else None
                if resp.status == 404:
                    raise NotFound(f"hub: {error or 'not found'}", field="id")
                if resp.status >= 400:
                    raise Unavailable(f"hub answered {resp.status}: {error or resp.reason}")
                return data, resp.headers
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise Unavailable(f"hub {self.settings['network.hub_url']} unreachable: "
                              f"{type(exc).__name__}: {exc}".rstrip(": ")) from None

    async def heartbeat_once(self) -> dict:
        """Send this sidecar's stats (numbers only) and capabilities."""
        try:
            stats = await self.stats()
            data, _ = await self._call("POST", "/heartbeat", timeout=HEARTBEAT_TIMEOUT_S, json={
                "node_id": self.settings["network.node_id"], "stats": stats,
                "capabilities": list(CAPABILITIES), "version": __version__})
        except StbmeError as exc:
            self.last_error = exc.message
            raise
        self.last_ok, self.last_error = time.time(), None
        data = data if isinstance(data, dict) else {}
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
        store = self.store
        gene = await store.read(lambda conn: assets.require_gene(conn, gene_id))
        data, _ = await self._call("POST", "/genes", json={"node_id": self.settings["network.node_id"],
                                                           "gene": shareable_gene(gene.plan_json())})
        await store.write(lambda conn: record_event(conn, None, "hub_publish", asset="gene", id=gene_id))
        return data if isinstance(data, dict) else {}

    async def publish_capsule(self, capsule_id: str) -> dict:
        store = self.store

        def read(conn):
            capsule = assets.require_capsule(conn, capsule_id)
            return capsule, [assets.require_gene(conn, g) for g in capsule.gene_ids]

        capsule, genes = await store.read(read)
        data, _ = await self._call("POST", "/capsules", json={
            "node_id": self.settings["network.node_id"], "capsule": capsule.plan_json(),
            "genes": [shareable_gene(g.plan_json()) for g in genes]})
        await store.write(lambda conn: record_event(conn, None, "hub_publish", asset="capsule", id=capsule_id))
        return data if isinstance(data, dict) else {}

    async def fetch_gene(self, gene_id: str) -> dict:
        """Fetch a gene by id from the hub and install it (origin 'hub', with the usage count it carries; a
        fetched-again gene keeps its own); a local gene of that id is kept."""
        data, headers = await self._call("GET", f"/genes/{quote(gene_id, safe='')}", params=self._node_param())
        raw, published_by = gene_of_answer(data)
        if raw is None:
            raise NotFound(f"hub: no gene {gene_id!r}", field="id")   # the plan's hub may answer null
        if isinstance(raw, dict) and raw.setdefault("id", gene_id) != gene_id:
            raise Unavailable(f"hub answered gene {raw['id']!r} for {gene_id!r}")
        gene = self._install_genes([raw])[0]
        published_by = unquote(headers[PUBLISHED_BY]) if PUBLISHED_BY in headers else published_by

        def write(conn):
            _install(conn, gene)
            record_event(conn, None, "hub_fetch", asset="gene", id=gene.id, published_by=published_by)
        await self.store.write(write)
        return gene.api_json()

    async def fetch_capsule(self, capsule_id: str) -> dict:
        """Fetch a capsule and its genes from the hub and install them."""
        data, _ = await self._call("GET", f"/capsules/{quote(capsule_id, safe='')}", params=self._node_param())
        data = data if isinstance(data, dict) else {}
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
        return (await self.store.write(write)).api_json()

    def _node_param(self) -> dict:
        return {"node_id": self.settings["network.node_id"]}

    @staticmethod
    def _install_genes(raws: list) -> list[assets.Gene]:
        genes = []
        for raw in raws:
            gene = assets.gene_from_body(shareable_gene(raw))
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

