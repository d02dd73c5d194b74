"""GEP assets and the audit log: genes (trigger -> actions templates), capsules (gene bundles with a
strategy), and events (every evolution, gene use, decay, forget and rollback)."""

from __future__ import annotations

from typing import Any

import orjson

from ..dna import assets
from ..errors import BadRequest
from ..store import Store
from ..store.events import list_events, record_event

MAX_EVENTS = 100_000


class DnaAssets:
    def __init__(self, store: Store):
        self.store = store

    async def install_builtins(self) -> None:
        await self.store.write(assets.ensure_builtins)

    async def select_gene(self, signals: list[dict]) -> dict:
        """The gene GEP scoring picks for these signals ({type, content} each)."""
        genes = await self.store.read(lambda conn: assets.list_genes(conn, enabled_only=True))
        gene, score = assets.select_gene(genes, [{"type": s["type"], "content": s.get("content", "")} for s in signals])
        return {"gene": gene.to_json() if gene else None, "score": score}

    # -- genes and capsules ---------------------------------------------------------------------
    async def list_genes(self) -> list[dict]:
        return [g.to_json() for g in await self.store.read(assets.list_genes)]

    async def get_gene(self, gene_id: str) -> dict:
        return (await self.store.read(lambda conn: assets.require_gene(conn, gene_id))).to_json()

    async def create_gene(self, body: Any, *, origin: str = "local") -> dict:
        gene = assets.gene_from_body(body)
        gene.origin = origin

        def write(conn):
            assets.save_gene(conn, gene, new=True)
            record_event(conn, None, "gene_create", gene_id=gene.id, name=gene.name, origin=origin)
        await self.store.write(write)
        return gene.to_json()

    async def edit_gene(self, gene_id: str, body: Any) -> dict:
        def write(conn):
            gene = assets.gene_from_body(body, base=assets.require_gene(conn, gene_id))
            if "id" in body and body["id"] != gene_id:
                raise BadRequest("a gene's id cannot change", field="id")
            assets.save_gene(conn, gene, new=False)
            record_event(conn, None, "gene_update", gene_id=gene_id, changed=sorted(body))
            return gene
        return (await self.store.write(write)).to_json()

    async def delete_gene(self, gene_id: str) -> dict:
        def write(conn):
            assets.delete_gene(conn, gene_id)
            record_event(conn, None, "gene_delete", gene_id=gene_id)
        await self.store.write(write)
        return {"deleted": gene_id}

    async def list_capsules(self) -> list[dict]:
        return [c.to_json() for c in await self.store.read(assets.list_capsules)]

    async def get_capsule(self, capsule_id: str) -> dict:
        return (await self.store.read(lambda conn: assets.require_capsule(conn, capsule_id))).to_json()

    async def create_capsule(self, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body)
            assets.save_capsule(conn, capsule, new=True)
            record_event(conn, None, "capsule_create", capsule_id=capsule.id, name=capsule.name)
            return capsule
        return (await self.store.write(write)).to_json()

    async def edit_capsule(self, capsule_id: str, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body, base=assets.require_capsule(conn, capsule_id))
            if isinstance(body, dict) and "id" in body and body["id"] != capsule_id:
                raise BadRequest("a capsule's id cannot change", field="id")
            assets.save_capsule(conn, capsule, new=False)
            record_event(conn, None, "capsule_update", capsule_id=capsule_id)
            return capsule
        return (await self.store.write(write)).to_json()

    async def delete_capsule(self, capsule_id: str) -> dict:
        def write(conn):
            assets.delete_capsule(conn, capsule_id)
            record_event(conn, None, "capsule_delete", capsule_id=capsule_id)
        await self.store.write(write)
        return {"deleted": capsule_id}

    # -- events ---------------------------------------------------------------------------------
    async def events(self, *, chat_id: str | None = None, kind: str | None = None, since: float | None = None,
                     limit: int = 100, oldest_first: bool = False) -> list[dict]:
        """Audit events (every gene use, signal, correction, decay, archive, repair loop, rollback…)."""
        return await self.store.read(lambda conn: list_events(
            conn, chat_id=chat_id, kind=kind, since=since, limit=min(limit, MAX_EVENTS), oldest_first=oldest_first))

    async def export_events(self, **filters) -> bytes:
        """Events as JSONL, oldest first."""
        rows = await self.events(limit=MAX_EVENTS, oldest_first=True, **filters)
        return b"".join(orjson.dumps(r) + b"\n" for r in rows)
