"""The DNA scheduler: decay and reflection on the configured intervals, per chat, only when something
changed. Started by the Sidecar beside its other housekeeping tasks; `run_due(now)` is one tick."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from ..errors import StbmeError

if TYPE_CHECKING:
    from .service import DnaService

log = logging.getLogger("stbme.dna")
TICK_S = 60.0


def _chat_rows(conn):
    return [dict(r) for r in conn.execute(
        "SELECT c.chat_id, c.updated_at, c.node_rev, s.last_decay_at, s.last_reflect_at, s.reflect_rev,"
        " (SELECT max(last_access) FROM nodes n WHERE n.chat_id = c.chat_id) AS last_access,"
        " (SELECT count(*) FROM nodes n WHERE n.chat_id = c.chat_id AND n.archived = 0 AND"
        "  n.created_at > coalesce(s.last_reflect_at, 0)) AS new_nodes"
        " FROM chats c LEFT JOIN dna_state s ON s.chat_id = c.chat_id ORDER BY c.chat_id")]


class DnaScheduler:
    def __init__(self, service: "DnaService", tick_s: float = TICK_S):
        self.service = service
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
        sc = self.service.sidecar
        done: dict[str, list[str]] = {"decayed": [], "reflected": []}
        for row in await sc.store.read(_chat_rows):
            chat = row["chat_id"]
            setting = sc.chat_setting(chat)
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
