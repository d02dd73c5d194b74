"""DNA reinforcement of what a recall injects (each injection adds weight, capped at 1), off the read path.

Writing it at every recall woke the writer thread for a small transaction in the middle of the next
recall (11% of the read path's time, scripts/bench_recall.py). Injections are counted in memory instead
and written in one transaction when enough are waiting or a moment after the first one; close() writes
what is left. Not journaled: not message-derived. A crash loses at most the last FLUSH_AFTER_S of counts.
"""

from __future__ import annotations

import asyncio
import time

from ..policy import REINFORCE_STEP
from ..store import Store

FLUSH_AFTER_S = 2.0     # a counted injection is written within this long
FLUSH_AT = 512          # ... or as soon as this many memories wait


class Reinforcement:
    def __init__(self, store: Store):
        self.store = store
        self._pending: dict[str, tuple[int, float]] = {}   # node id -> (injections, last one)
        self._timer: asyncio.TimerHandle | None = None

    def injected(self, node_ids: list[str]) -> None:
        """Count one injection of each memory; written later."""
        now = time.time()
        for node_id in node_ids:
            count, _ = self._pending.get(node_id, (0, now))
            self._pending[node_id] = (count + 1, now)
        if len(self._pending) >= FLUSH_AT:
            self.flush()
        elif self._timer is None and self._pending:
            try:
                self._timer = asyncio.get_running_loop().call_later(FLUSH_AFTER_S, self.flush)
            except RuntimeError:   # no loop (a synchronous caller): write now
                self.flush()

    def flush(self) -> None:
        """Queue the counted injections as one write (nobody waits for it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        rows = [(count, last, count * REINFORCE_STEP, node_id) for node_id, (count, last) in self._pending.items()]
        self._pending = {}
        self.store.write_nowait(lambda conn: conn.executemany(
            "UPDATE nodes SET access_count = access_count + ?, last_access = max(coalesce(last_access, 0), ?),"
            " weight = min(1.0, weight + ?) WHERE id = ?", rows))

    def close(self) -> None:
        self.flush()
