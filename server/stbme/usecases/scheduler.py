"""The DNA scheduler: decay and reflection on the configured intervals, per chat, only when something
changed. Started beside the other background tasks; `run_due(now)` is one tick."""

from __future__ import annotations

import asyncio
import logging

from .. import config
from ..dna import dynamics
from ..errors import StbmeError
from ..store import Store
from .dna import DnaMemory

log = logging.getLogger("stbme.dna")
TICK_S = 60.0


class DnaScheduler:
    def __init__(self, store: Store, settings: config.Settings, dna: DnaMemory, tick_s: float = TICK_S):
        self.store = store
        self.settings = settings
        self.service = dna
        self.tick_s = tick_s

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                await self.run_due(self.service.clock())
            except asyncio.CancelledError:
                raise
            except StbmeError as exc:
                log.warning("DNA scheduler: %s", exc.message)
            except Exception:
                log.exception("DNA scheduler tick failed")

    async def run_due(self, now: float) -> dict[str, list[str]]:
        """Run every pass that is due at `now`. Returns the chats decayed and reflected."""
        done: dict[str, list[str]] = {"decayed": [], "reflected": []}
        for row in await self.store.read(dynamics.schedule_rows):
            chat = row["chat_id"]
            setting = lambda name, chat=chat: self.settings.get(name, chat)  # noqa: E731
            if setting("dna.auto_decay"):
                interval = setting("dna.auto_decay_interval_hours") * 3600
                last = row["last_decay_at"]
                if last is None:
                    await self.service.start_decay_clock(chat, now)  # the first pass comes an interval later
                elif now - last >= interval and _changed_since(row, last):
                    await self.service.decay(chat, now=now)
                    done["decayed"].append(chat)
            if setting("dna.auto_reflect") and row["node_rev"] != row["reflect_rev"]:
                last = row["last_reflect_at"]
                interval = setting("dna.auto_reflect_interval_minutes") * 60
                if last is None or now - last >= interval or row["new_nodes"] >= setting("dna.reflect_trigger"):
                    await self.service.reflect(chat, now=now)
                    done["reflected"].append(chat)
        return done


def _changed_since(row: dict, at: float) -> bool:
    """The chat was written or read (recall) since `at`: an untouched chat does not decay while away."""
    return (row["updated_at"] or 0) > at or (row["last_access"] or 0) > at
