"""Sync a chat from SillyTavern: prove the stored prefix equal, roll back what an edit invalidated, store
the new messages and queue their processing. Answers at once; the job worker does the rest."""

from __future__ import annotations

from typing import Callable

from .. import config
from ..index import ChatIndexes
from ..live import LiveHub
from ..pipeline.sync import SyncRequest, apply_sync
from ..store import Store


class ChatSync:
    def __init__(self, store: Store, settings: config.Settings, indexes: ChatIndexes, live: LiveHub,
                 wake_worker: Callable[[], None]):
        self.store = store
        self.settings = settings
        self.indexes = indexes
        self.live = live
        self.wake_worker = wake_worker

    async def sync(self, chat_id: str, req: SyncRequest) -> dict:
        extract = self.settings.get("extract.enabled", chat_id)
        result = await self.store.write(lambda conn: apply_sync(conn, chat_id, req, extract_enabled=extract))
        if result.touched_nodes:
            await self.indexes.apply(chat_id, result.touched_nodes)
            # Routine (an edit, a swipe, a deletion): said as what happens, not as an alarm.
            self.live.notice("info", f"message {result.diverged_at} changed: updating the memories from there on",
                             chat_id)
        if result.queued:
            self.wake_worker()
        return result.to_json()
