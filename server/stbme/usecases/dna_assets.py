"""GEP assets and the audit log: genes (trigger -> actions templates), capsules (gene bundles with a
strategy), and events (every evolution, gene use, decay, forget and rollback); their export and import in
the plan's files (genes.json, capsules.json, events.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import orjson

from ..dna import assets, plan_files
from ..errors import BadRequest
from ..store import Store
from ..store.events import has_event, insert_event, list_events, record_event

MAX_EVENTS = 100_000
EVENT_PAGE = 5000


class DnaAssets:
    def __init__(self, store: Store):
        self.store = store

    async def install_builtins(self) -> None:
        await self.store.write(assets.ensure_builtins)

    async def select_gene(self, signals: list[dict]) -> dict:
        """The gene GEP scoring picks for these signals ({type, content} each)."""
        genes = await self.store.read(lambda conn: assets.list_genes(conn, enabled_only=True))
        gene, score = assets.select_gene(genes, [{"type": s["type"], "content": s.get("content", "")} for s in signals])
        return {"gene": gene.api_json() if gene else None, "score": score}

    # -- genes and capsules ---------------------------------------------------------------------
    async def list_genes(self) -> list[dict]:
        return [g.api_json() for g in await self.store.read(assets.list_genes)]

    async def get_gene(self, gene_id: str) -> dict:
        return (await self.store.read(lambda conn: assets.require_gene(conn, gene_id))).api_json()

    async def create_gene(self, body: Any, *, origin: str = "local") -> dict:
        gene = assets.gene_from_body(body)
        gene.origin = origin

        def write(conn):
            assets.save_gene(conn, gene, new=True)
            record_event(conn, None, "gene_create", gene_id=gene.id, name=gene.name, origin=origin)
        await self.store.write(write)
        return gene.api_json()

    async def edit_gene(self, gene_id: str, body: Any) -> dict:
        def write(conn):
            gene = assets.gene_from_body(body, base=assets.require_gene(conn, gene_id))
            if "id" in body and body["id"] != gene_id:
                raise BadRequest("a gene's id cannot change", field="id")
            assets.save_gene(conn, gene, new=False)
            record_event(conn, None, "gene_update", gene_id=gene_id, changed=sorted(body))
            return gene
        return (await self.store.write(write)).api_json()

    async def delete_gene(self, gene_id: str) -> dict:
        def write(conn):
            assets.delete_gene(conn, gene_id)
            record_event(conn, None, "gene_delete", gene_id=gene_id)
        await self.store.write(write)
        return {"deleted": gene_id}

    async def list_capsules(self) -> list[dict]:
        return [c.api_json() for c in await self.store.read(assets.list_capsules)]

    async def get_capsule(self, capsule_id: str) -> dict:
        return (await self.store.read(lambda conn: assets.require_capsule(conn, capsule_id))).api_json()

    async def create_capsule(self, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body)
            assets.save_capsule(conn, capsule, new=True)
            record_event(conn, None, "capsule_create", capsule_id=capsule.id, name=capsule.name)
            return capsule
        return (await self.store.write(write)).api_json()

    async def edit_capsule(self, capsule_id: str, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body, base=assets.require_capsule(conn, capsule_id))
            if isinstance(body, dict) and "id" in body and body["id"] != capsule_id:
                raise BadRequest("a capsule's id cannot change", field="id")
            assets.save_capsule(conn, capsule, new=False)
            record_event(conn, None, "capsule_update", capsule_id=capsule_id)
            return capsule
        return (await self.store.write(write)).api_json()

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

    async def event_lines(self, *, plan: bool = False, **filters) -> AsyncIterator[bytes]:
        """Every matching event as JSON lines, oldest first, a page at a time: ours ({id, at, chat_id, kind,
        data}) or the plan's ({timestamp, type, details})."""
        after = None
        while True:
            rows = await self.store.read(lambda conn: list_events(
                conn, limit=EVENT_PAGE, oldest_first=True, after_id=after, **filters))
            if not rows:
                return
            yield b"".join(orjson.dumps(plan_files.event_json(r) if plan else r) + b"\n" for r in rows)
            after = rows[-1]["id"]

    # -- the plan's files -----------------------------------------------------------------------
    async def plan_assets(self) -> dict:
        """genes.json and capsules.json's contents, in the plan's shapes."""
        def read(conn):
            return {"genes": [g.plan_json() for g in assets.list_genes(conn)],
                    "capsules": [c.plan_json() for c in assets.list_capsules(conn)]}
        return await self.store.read(read)

    async def export_plan_dir(self, directory: Path, *, chat_id: str | None = None) -> dict:
        """Write genes.json, capsules.json and events.jsonl (every event, or one chat's) into `directory`."""
        directory = Path(directory)
        data = await self.plan_assets()
        events = 0
        try:
            directory.mkdir(parents=True, exist_ok=True)
            plan_files.write_json(directory / plan_files.GENES_FILE, data["genes"])
            plan_files.write_json(directory / plan_files.CAPSULES_FILE, data["capsules"])
            with plan_files.AtomicFile(directory / plan_files.EVENTS_FILE) as f:
                async for page in self.event_lines(plan=True, chat_id=chat_id):
                    f.write(page)
                    events += page.count(b"\n")
        except OSError as exc:
            raise BadRequest(f"cannot write to {directory}: {exc.strerror or exc}", field="dir") from None
        return {"genes": len(data["genes"]), "capsules": len(data["capsules"]), "events": events,
                "dir": str(directory)}

    async def import_plan(self, bundle: plan_files.PlanBundle, *, replace: bool = False) -> dict:
        """Add the bundle's genes, capsules and events in one transaction (all or nothing). A gene or capsule
        whose id exists is kept, or with `replace` overwritten (a built-in one only takes `enabled`);
        an event already recorded is not added twice."""
        report = {"genes": {"added": 0, "replaced": 0, "kept": []}, "capsules": {"added": 0, "replaced": 0, "kept": []},
                  "events": {"added": 0, "skipped": 0}, "warnings": bundle.warnings}

        def save(conn, kind: str, item, existing) -> None:
            counts = report[kind + "s"]
            store = assets.save_gene if kind == "gene" else assets.save_capsule
            if existing is None:
                store(conn, item, new=True)
                counts["added"] += 1
            elif not replace or (existing.builtin and existing.enabled == item.enabled):
                counts["kept"].append(item.id)
            elif existing.builtin:   # a built-in's definition is the code's: only its switch travels
                existing.enabled = item.enabled
                store(conn, existing, new=False)
                counts["replaced"] += 1
            else:
                store(conn, item, new=False)
                counts["replaced"] += 1

        def write(conn):
            for gene in bundle.genes:
                save(conn, "gene", gene, assets.get_gene(conn, gene.id))
            for where, body in bundle.capsules:
                try:
                    capsule = assets.capsule_from_body(conn, body)
                except BadRequest as exc:
                    raise BadRequest(f"{where}: {exc.message}", field=f"{where}.{exc.field or 'capsule'}") from None
                save(conn, "capsule", capsule, assets.get_capsule(conn, capsule.id))
            for event in bundle.events:
                if has_event(conn, event.chat_id, event.at, event.kind, event.data):
                    report["events"]["skipped"] += 1
                else:
                    insert_event(conn, event.chat_id, event.at, event.kind, event.data)
                    report["events"]["added"] += 1
            record_event(conn, None, "import_assets", genes=report["genes"]["added"] + report["genes"]["replaced"],
                         capsules=report["capsules"]["added"] + report["capsules"]["replaced"],
                         events=report["events"]["added"])
        await self.store.write(write)
        return report

    async def import_plan_dir(self, directory: Path, *, replace: bool = False) -> dict:
        return await self.import_plan(plan_files.read_dir(directory), replace=replace)
