"""Background upkeep: save changed indexes, redo batches made without the LLM when it may answer again,
prune finished jobs, retry failed embeddings; and warm up the indexes of recent chats after a start."""

from __future__ import annotations

import asyncio
import logging

from .. import config
from ..errors import StbmeError
from ..index import ChatIndexes
from ..store import Store
from ..store.jobs import prune_done_jobs
from ..store.queries import recent_chats
from .embedding import Embedding
from .processing import ChatProcessor

log = logging.getLogger("stbme")
TICK_S = 5.0
WARM_CHATS = 3


class Housekeeping:
    def __init__(self, store: Store, settings: config.Settings, indexes: ChatIndexes, embedding: Embedding,
                 processor: ChatProcessor):
        self.store = store
        self.settings = settings
        self.indexes = indexes
        self.embedding = embedding
        self.processor = processor

    async def run(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(TICK_S)
            ticks += 1
            try:
                await self.indexes.save_dirty(older_than_s=self.settings["index.save_every_s"])
                await self.processor.wake_degraded()
                if ticks % 12 == 1:
                    await self.store.write(prune_done_jobs)
                    await self.embedding.backfill()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("housekeeping failed")

    async def warm_up(self, chats: int = WARM_CHATS) -> None:
        """Load the indexes of the most recently used chats now, so the first recall after a restart
        does not wait for them (a 100k-memory chat takes seconds). Keyword indexes and the model first:
        a recall answers from them while an HNSW index is still loading."""
        model = asyncio.ensure_future(self.embedding.embeddings.embedder.warm_up())  # on its own thread
        recent = await self.store.read(lambda conn: recent_chats(conn, chats))
        for chat_id in recent:
            try:
                await self.indexes.lexical.get(chat_id)
            except StbmeError as exc:
                log.warning("warming up chat %r failed: %s", chat_id, exc.message)
        try:
            await model
        except StbmeError as exc:
            log.warning("warming up the embedder failed: %s", exc.message)
        for chat_id in recent:
            try:
                await self.indexes.vectors.get(chat_id)
            except StbmeError as exc:
                log.warning("warming up chat %r failed: %s", chat_id, exc.message)
