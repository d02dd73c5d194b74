"""The DNA layer's use cases for the HTTP handlers and the CLI: decay, reflect, stats, genes, capsules,
events, repair loops and the hub. Owned by the Sidecar (`sidecar.dna`)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable

import orjson

from ..errors import BadRequest, NotFound
from ..graph.changes import ChangeSet
from ..graph.schema import RELATIONS
from ..store.events import record_event
from . import assets, dynamics, repair
from .scheduler import DnaScheduler
from .signals import SIGNAL_TYPES, best_per_unit, extract_signals
from .stage import apply_ops
from .strategy import STRATEGIES, Strategy

if TYPE_CHECKING:
    from ..sidecar import Sidecar

MAX_EVENTS = 100_000


class DnaService:
    def __init__(self, sidecar: "Sidecar", clock: Callable[[], float] = time.time):
        self.sidecar = sidecar
        self.clock = clock
        self.scheduler = DnaScheduler(self)
        from .hub import HubClient  # imported here: the hub module imports aiohttp's client machinery
        self.hub = HubClient(self)

    async def start(self) -> list[asyncio.Task]:
        """Install the built-in genes and capsules; start the scheduler and the hub heartbeat."""
        await self.sidecar.store.write(assets.ensure_builtins)
        return [asyncio.create_task(self.scheduler.run(), name="stbme-dna-scheduler"),
                asyncio.create_task(self.hub.run(), name="stbme-dna-heartbeat")]

    async def close(self) -> None:
        await self.hub.close()

    def _setting(self, chat_id: str):
        return self.sidecar.chat_setting(chat_id)

    async def _strategy(self, chat_id: str) -> str:
        setting = self._setting(chat_id)
        capsule_id = setting("dna.capsule")
        if capsule_id:
            capsule = await self.sidecar.store.read(lambda conn: assets.get_capsule(conn, capsule_id))
            if capsule is not None and capsule.enabled:
                return capsule.strategy
        return setting("dna.evolution_strategy")

    async def _require_chat(self, chat_id: str) -> None:
        exists = await self.sidecar.store.read(lambda conn: conn.execute(
            "SELECT 1 FROM chats WHERE chat_id = ?", (chat_id,)).fetchone())
        if not exists:
            raise NotFound(f"no chat {chat_id!r} in the sidecar yet (sync it first)", field="chat_id")

    # -- dynamics -------------------------------------------------------------------------------
    async def start_decay_clock(self, chat_id: str, now: float) -> None:
        def write(conn):
            state = dynamics.load_state(conn, chat_id)
            if state.last_decay_at is None:
                state.last_decay_at = now
                dynamics.save_state(conn, state)
        await self.sidecar.store.write(write)

    async def decay(self, chat_id: str, *, now: float | None = None) -> dict:
        """One decay pass over the chat (archives what falls under dna.forget_threshold)."""
        await self._require_chat(chat_id)
        now = self.clock() if now is None else now
        setting = self._setting(chat_id)
        strategy = await self._strategy(chat_id)
        report = await self.sidecar.store.write(lambda conn: dynamics.decay_chat(
            conn, chat_id, now=now, strategy=strategy, decay_days=setting("dna.decay_days"),
            decay_rate=setting("dna.decay_rate"), forget_threshold=setting("dna.forget_threshold"),
            max_step_days=max(setting("dna.auto_decay_interval_hours") / 24, 1 / 24)))
        if report.touched:
            await self.sidecar.index_changes(chat_id, report.touched)
        return report.to_json()

    async def reflect(self, chat_id: str, *, now: float | None = None) -> dict:
        """Consolidate the memory layers and look for repair loops among stored corrections/errors."""
        await self._require_chat(chat_id)
        now = self.clock() if now is None else now
        setting = self._setting(chat_id)
        strategy = await self._strategy(chat_id)
        embedder_id = self.sidecar.embeddings.id
        detect = setting("dna.repair_loop_detection")
        gep = setting("dna.gep_enabled")

        def write(conn):
            report = dynamics.consolidate(conn, chat_id, now=now, strategy=strategy,
                                          max_short_term=setting("dna.max_short_term"),
                                          max_long_term=setting("dna.max_long_term"),
                                          decay_days=setting("dna.decay_days"))
            if detect:
                cs = ChangeSet(conn, chat_id, reason="reflect")
                escalation = None
                for first, second, sim, gap in repair.scan_loops(conn, chat_id, embedder_id, now=now):
                    loop_type = conn.execute("SELECT type FROM nodes WHERE id = ?", (second,)).fetchone()[0]
                    loop_id = repair.record_loop(cs, first, second, loop_type, sim, gap)
                    if escalation is None:
                        genes = assets.list_genes(conn, enabled_only=True) if gep else list(assets.BUILTIN_GENES)
                        escalation = assets.select_gene(genes, [{"type": "repair_loop", "content": ""}])[0]
                    if escalation is not None:
                        for node_id in (first, second):
                            apply_ops(cs, node_id, escalation.ops("directive"))
                    report.loops.append({"id": loop_id, "first_id": first, "second_id": second,
                                         "similarity": round(sim, 4)})
                report.touched |= cs.touched_nodes
            record_event(conn, chat_id, "reflect", **{k: v for k, v in report.to_json().items() if k != "chat_id"})
            return report

        report = await self.sidecar.store.write(write)
        if report.touched:
            await self.sidecar.index_changes(chat_id, report.touched)
        return report.to_json()

    # -- stats ----------------------------------------------------------------------------------
    async def chat_stats(self, chat_id: str) -> dict:
        await self._require_chat(chat_id)
        strategy = await self._strategy(chat_id)

        def read(conn):
            directives = dict(conn.execute(
                f"SELECT type, count(*) FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
                f" ({','.join('?' * len(SIGNAL_TYPES))}) GROUP BY type", (chat_id, *SIGNAL_TYPES)).fetchall())
            weights = conn.execute(
                "SELECT count(*), avg(weight), min(weight), sum(weight < 0.5), sum(pinned), sum(locked)"
                " FROM nodes WHERE chat_id = ? AND archived = 0", (chat_id,)).fetchone()
            state = dynamics.load_state(conn, chat_id)
            return {
                "chat_id": chat_id,
                "layers": dynamics.layer_counts(conn, chat_id),
                "archived": conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 1",
                                         (chat_id,)).fetchone()[0],
                "directives": {t: directives.get(t, 0) for t in SIGNAL_TYPES},
                "weight": {"memories": weights[0], "average": round(weights[1] or 0, 4),
                           "min": round(weights[2] or 0, 4), "below_half": weights[3] or 0},
                "pinned": weights[4] or 0, "locked": weights[5] or 0,
                "open_repair_loops": repair.list_loops(conn, chat_id, "open"),
                "last_decay_at": state.last_decay_at, "last_reflect_at": state.last_reflect_at,
                "events": conn.execute("SELECT count(*) FROM events WHERE chat_id = ?", (chat_id,)).fetchone()[0],
            }

        stats = await self.sidecar.store.read(read)
        weights = STRATEGIES[strategy]
        stats["strategy"] = {"name": strategy, "remember_threshold": Strategy(strategy).remember_threshold,
                             "new_memory_weight": weights.new_memory_weight,
                             "reinforce_weight": weights.reinforce_weight, "decay_weight": weights.decay_weight}
        stats["capsule"] = self._setting(chat_id)("dna.capsule") or None
        return stats

    async def global_stats(self) -> dict:
        """Numbers only (what a heartbeat may carry): never chat content."""
        def read(conn):
            return {
                "chats": conn.execute("SELECT count(*) FROM chats").fetchone()[0],
                "memories": conn.execute("SELECT count(*) FROM nodes WHERE archived = 0").fetchone()[0],
                "archived": conn.execute("SELECT count(*) FROM nodes WHERE archived = 1").fetchone()[0],
                "directives": conn.execute(
                    f"SELECT count(*) FROM nodes WHERE archived = 0 AND type IN ({','.join('?' * len(SIGNAL_TYPES))})",
                    SIGNAL_TYPES).fetchone()[0],
                "genes": conn.execute("SELECT count(*) FROM genes").fetchone()[0],
                "capsules": conn.execute("SELECT count(*) FROM capsules").fetchone()[0],
                "open_repair_loops": len(repair.list_loops(conn, None, "open")),
                "events": conn.execute("SELECT count(*) FROM events").fetchone()[0],
            }
        return await self.sidecar.store.read(read)

    # -- repair loops ---------------------------------------------------------------------------
    async def list_loops(self, chat_id: str | None, status: str | None = "open") -> list[dict]:
        if status not in (None, "open", "resolved"):
            raise BadRequest("'status' must be open, resolved or all", field="status")
        return await self.sidecar.store.read(lambda conn: repair.list_loops(conn, chat_id, status))

    async def resolve_loop(self, chat_id: str, loop_id: str) -> dict:
        def write(conn):
            row = conn.execute("SELECT status FROM repair_loops WHERE id = ? AND chat_id = ?",
                               (loop_id, chat_id)).fetchone()
            if row is None:
                raise NotFound(f"no repair loop {loop_id!r} in chat {chat_id!r}", field="loop_id")
            conn.execute("UPDATE repair_loops SET status = 'resolved', resolved_at = ? WHERE id = ?",
                         (time.time(), loop_id))
            record_event(conn, chat_id, "repair_loop_resolved", loop_id=loop_id)
        await self.sidecar.store.write(write)
        loops = await self.list_loops(chat_id, None)
        return next((loop for loop in loops if loop["id"] == loop_id), {"id": loop_id, "status": "resolved"})

    # -- signals --------------------------------------------------------------------------------
    def preview_signals(self, text: Any, chat_id: str | None = None) -> dict:
        """What the signal stage would see in a user message, and which gene each signal would use."""
        if not isinstance(text, str) or not text.strip():
            raise BadRequest("'text' must be a non-empty string", field="text")
        if len(text) > self.sidecar.settings["server.max_message_chars"]:
            raise BadRequest("'text' is too long", field="text")
        setting = self.sidecar.chat_setting(chat_id)
        signals = best_per_unit(extract_signals(text, min_confidence=setting("dna.signal_confidence_threshold"),
                                                ooc_only=setting("dna.signal_scope") == "ooc"))
        strategy = Strategy(setting("dna.evolution_strategy"))
        return {"signals": [s.to_json() | {"remember": strategy.should_remember(s.confidence)} for s in signals],
                "strategy": strategy.name, "remember_threshold": strategy.remember_threshold}

    async def select_gene(self, signals: Any) -> dict:
        if not isinstance(signals, list) or not signals or not all(
                isinstance(s, dict) and s.get("type") in assets.TRIGGER_TYPES and isinstance(s.get("content", ""), str)
                for s in signals):
            raise BadRequest("'signals' must be a non-empty list of {type, content}", field="signals")
        genes = await self.sidecar.store.read(lambda conn: assets.list_genes(conn, enabled_only=True))
        gene, score = assets.select_gene(genes, [{"type": s["type"], "content": s.get("content", "")} for s in signals])
        return {"gene": gene.to_json() if gene else None, "score": score}

    # -- genes and capsules ---------------------------------------------------------------------
    async def list_genes(self) -> list[dict]:
        return [g.to_json() for g in await self.sidecar.store.read(assets.list_genes)]

    async def get_gene(self, gene_id: str) -> dict:
        return (await self.sidecar.store.read(lambda conn: assets.require_gene(conn, gene_id))).to_json()

    async def create_gene(self, body: Any, *, origin: str = "local") -> dict:
        gene = assets.gene_from_body(body)
        gene.origin = origin

        def write(conn):
            assets.save_gene(conn, gene, new=True)
            record_event(conn, None, "gene_create", gene_id=gene.id, name=gene.name, origin=origin)
        await self.sidecar.store.write(write)
        return gene.to_json()

    async def edit_gene(self, gene_id: str, body: Any) -> dict:
        def write(conn):
            gene = assets.gene_from_body(body, base=assets.require_gene(conn, gene_id))
            if "id" in body and body["id"] != gene_id:
                raise BadRequest("a gene's id cannot change", field="id")
            assets.save_gene(conn, gene, new=False)
            record_event(conn, None, "gene_update", gene_id=gene_id, changed=sorted(body))
            return gene
        return (await self.sidecar.store.write(write)).to_json()

    async def delete_gene(self, gene_id: str) -> dict:
        def write(conn):
            assets.delete_gene(conn, gene_id)
            record_event(conn, None, "gene_delete", gene_id=gene_id)
        await self.sidecar.store.write(write)
        return {"deleted": gene_id}

    async def list_capsules(self) -> list[dict]:
        return [c.to_json() for c in await self.sidecar.store.read(assets.list_capsules)]

    async def get_capsule(self, capsule_id: str) -> dict:
        return (await self.sidecar.store.read(lambda conn: assets.require_capsule(conn, capsule_id))).to_json()

    async def create_capsule(self, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body)
            assets.save_capsule(conn, capsule, new=True)
            record_event(conn, None, "capsule_create", capsule_id=capsule.id, name=capsule.name)
            return capsule
        return (await self.sidecar.store.write(write)).to_json()

    async def edit_capsule(self, capsule_id: str, body: Any) -> dict:
        def write(conn):
            capsule = assets.capsule_from_body(conn, body, base=assets.require_capsule(conn, capsule_id))
            if isinstance(body, dict) and "id" in body and body["id"] != capsule_id:
                raise BadRequest("a capsule's id cannot change", field="id")
            assets.save_capsule(conn, capsule, new=False)
            record_event(conn, None, "capsule_update", capsule_id=capsule_id)
            return capsule
        return (await self.sidecar.store.write(write)).to_json()

    async def delete_capsule(self, capsule_id: str) -> dict:
        def write(conn):
            assets.delete_capsule(conn, capsule_id)
            record_event(conn, None, "capsule_delete", capsule_id=capsule_id)
        await self.sidecar.store.write(write)
        return {"deleted": capsule_id}

    # -- events ---------------------------------------------------------------------------------
    async def events(self, *, chat_id: str | None = None, kind: str | None = None, since: float | None = None,
                     limit: int = 100, oldest_first: bool = False) -> list[dict]:
        """Audit events (every gene use, signal, correction, decay, archive, repair loop, rollback…)."""
        order = "ASC" if oldest_first else "DESC"

        def read(conn):
            rows = conn.execute(
                "SELECT id, chat_id, at, kind, data FROM events WHERE (? IS NULL OR chat_id = ?) AND"
                f" (? IS NULL OR kind = ?) AND (? IS NULL OR at >= ?) ORDER BY id {order} LIMIT ?",
                (chat_id, chat_id, kind, kind, since, since, min(limit, MAX_EVENTS))).fetchall()
            return [{"id": r["id"], "at": r["at"], "chat_id": r["chat_id"], "kind": r["kind"],
                     "data": orjson.loads(r["data"])} for r in rows]
        return await self.sidecar.store.read(read)

    async def export_events(self, **filters) -> bytes:
        """Events as JSONL, oldest first."""
        rows = await self.events(limit=MAX_EVENTS, oldest_first=True, **filters)
        return b"".join(orjson.dumps(r) + b"\n" for r in rows)

    # -- graph edits for the CLI ----------------------------------------------------------------
    async def link(self, chat_id: str, from_id: str, to_id: str, relation: str = "related",
                   strength: float = 0.8) -> dict:
        """A manual edge between two memories (not undone by chat rollbacks)."""
        if relation not in RELATIONS:
            raise BadRequest(f"'relation' must be one of {', '.join(sorted(RELATIONS))}", field="relation")
        if not 0 <= strength <= 1:
            raise BadRequest("'strength' must be from 0 to 1", field="strength")

        def write(conn):
            for node_id in (from_id, to_id):
                if conn.execute("SELECT 1 FROM nodes WHERE id = ? AND chat_id = ?", (node_id, chat_id)).fetchone() is None:
                    raise NotFound(f"no memory {node_id!r} in chat {chat_id!r}", field="id")
            cs = ChangeSet(conn, chat_id, reason="link")
            edge = cs.add_edge(from_id, to_id, relation, strength)
            if edge is None:
                raise BadRequest("a memory cannot be linked to itself", field="id")
            record_event(conn, chat_id, "link", edge_id=edge.id, from_id=from_id, to_id=to_id, relation=relation)
            return edge.to_json()
        return await self.sidecar.store.write(write)
