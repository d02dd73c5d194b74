"""The DNA Memory layer's use cases: decay and reflection passes, repair loops, stats, and a preview of the
signals a user message carries. (Genes, capsules and the audit log: usecases/dna_assets.py.)"""

from __future__ import annotations

import time
from typing import Callable

from .. import config
from ..dna import assets, dynamics, repair
from ..dna import stats as dna_stats
from ..dna.signals import best_per_unit, extract_signals
from ..dna.reflection import reflect_chat
from ..dna.strategy import Strategy
from ..embed import EmbeddingService
from ..errors import BadRequest
from ..policy import STRATEGIES
from ..store import Store
from ..store.queries import require_chat

IndexChanges = Callable[[str, set[str]], object]


class DnaMemory:
    def __init__(self, store: Store, settings: config.Settings, embeddings: EmbeddingService,
                 index_changes: IndexChanges, clock: Callable[[], float] = time.time):
        self.store = store
        self.settings = settings
        self.embeddings = embeddings
        self.index_changes = index_changes   # after a write: update the caches, embed what lacks a vector
        self.clock = clock

    def _setting(self, chat_id: str | None):
        return lambda name: self.settings.get(name, chat_id)

    async def _strategy(self, chat_id: str) -> str:
        setting = self._setting(chat_id)
        capsule_id = setting("dna.capsule")
        if capsule_id:
            capsule = await self.store.read(lambda conn: assets.get_capsule(conn, capsule_id))
            if capsule is not None and capsule.enabled:
                return capsule.strategy
        return setting("dna.evolution_strategy")

    # -- dynamics -------------------------------------------------------------------------------
    async def start_decay_clock(self, chat_id: str, now: float) -> None:
        def write(conn):
            state = dynamics.load_state(conn, chat_id)
            if state.last_decay_at is None:
                state.last_decay_at = now
                dynamics.save_state(conn, state)
        await self.store.write(write)

    async def decay(self, chat_id: str, *, now: float | None = None) -> dict:
        """One decay pass over the chat (archives what falls under dna.forget_threshold)."""
        await self.store.read(lambda conn: require_chat(conn, chat_id))
        now = self.clock() if now is None else now
        setting = self._setting(chat_id)
        strategy = await self._strategy(chat_id)
        report = await self.store.write(lambda conn: dynamics.decay_chat(
            conn, chat_id, now=now, strategy=strategy, decay_days=setting("dna.decay_days"),
            decay_rate=setting("dna.decay_rate"), forget_threshold=setting("dna.forget_threshold"),
            max_step_days=max(setting("dna.auto_decay_interval_hours") / 24, 1 / 24)))
        if report.touched:
            await self.index_changes(chat_id, report.touched)
        return report.to_json()

    async def reflect(self, chat_id: str, *, now: float | None = None) -> dict:
        """Consolidate the memory layers and look for repair loops among stored corrections/errors."""
        await self.store.read(lambda conn: require_chat(conn, chat_id))
        now = self.clock() if now is None else now
        setting = self._setting(chat_id)
        strategy = await self._strategy(chat_id)
        embedder_id = self.embeddings.id
        report = await self.store.write(lambda conn: reflect_chat(
            conn, chat_id, now=now, strategy=strategy, max_short_term=setting("dna.max_short_term"),
            max_long_term=setting("dna.max_long_term"), decay_days=setting("dna.decay_days"),
            embedder_id=embedder_id, detect_loops=setting("dna.repair_loop_detection"),
            gep=setting("dna.gep_enabled")))
        if report.touched:
            await self.index_changes(chat_id, report.touched)
        return report.to_json()

    # -- stats ----------------------------------------------------------------------------------
    async def chat_stats(self, chat_id: str) -> dict:
        await self.store.read(lambda conn: require_chat(conn, chat_id))
        strategy = await self._strategy(chat_id)

        stats = await self.store.read(lambda conn: dna_stats.chat_stats(conn, chat_id))
        weights = STRATEGIES[strategy]
        stats["strategy"] = {"name": strategy, "remember_threshold": Strategy(strategy).remember_threshold,
                             "new_memory_weight": weights.new_memory_weight,
                             "reinforce_weight": weights.reinforce_weight, "decay_weight": weights.decay_weight}
        stats["capsule"] = self._setting(chat_id)("dna.capsule") or None
        return stats

    async def global_stats(self) -> dict:
        """Numbers only (what a heartbeat may carry): never chat content."""
        return await self.store.read(dna_stats.global_stats)

    # -- repair loops ---------------------------------------------------------------------------
    async def list_loops(self, chat_id: str | None, status: str | None = "open") -> list[dict]:
        if status not in (None, "open", "resolved"):
            raise BadRequest("'status' must be open, resolved or all", field="status")
        return await self.store.read(lambda conn: repair.list_loops(conn, chat_id, status))

    async def resolve_loop(self, chat_id: str, loop_id: str) -> dict:
        await self.store.write(lambda conn: repair.resolve_loop(conn, chat_id, loop_id))
        loops = await self.list_loops(chat_id, None)
        return next((loop for loop in loops if loop["id"] == loop_id), {"id": loop_id, "status": "resolved"})

    # -- signals --------------------------------------------------------------------------------
    def preview_signals(self, text: str, chat_id: str | None = None) -> dict:
        """What the signal stage would see in a user message, and which gene each signal would use."""
        setting = lambda name: self.settings.get(name, chat_id)  # noqa: E731
        signals = best_per_unit(extract_signals(text, min_confidence=setting("dna.signal_confidence_threshold"),
                                                scope=setting("dna.signal_scope")))
        strategy = Strategy(setting("dna.evolution_strategy"))
        return {"signals": [s.to_json() | {"remember": strategy.should_remember(s.confidence)} for s in signals],
                "strategy": strategy.name, "remember_threshold": strategy.remember_threshold}
