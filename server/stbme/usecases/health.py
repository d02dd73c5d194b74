"""The sidecar's health: version, embedder, store, queue, live clients, LLM usage."""

from __future__ import annotations

import time

from .. import __version__
from ..live import LiveHub
from ..store import Store
from ..store.jobs import queue_depth
from ..store.migrations import schema_version
from ..store.queries import store_counts
from .embedding import Embedding
from .memory_llm import MemoryLLM
from .progress import ProgressTracker


class Health:
    def __init__(self, store: Store, embedding: Embedding, memory_llm: MemoryLLM, live: LiveHub,
                 progress: ProgressTracker):
        self.store = store
        self.progress = progress
        self.embedding = embedding
        self.memory_llm = memory_llm
        self.live = live
        self.started_at = time.time()

    async def report(self) -> dict:
        def read(conn):
            return store_counts(conn) | {"schema_version": schema_version(conn), "queue": queue_depth(conn)}

        info = await self.store.read(read)
        return {
            "version": __version__,
            "embedder": self.embedding.status(),
            "store": {"path": str(self.store.path), "chats": info["chats"], "nodes": info["nodes"],
                      "schema_version": info["schema_version"]},
            "queue": info["queue"],
            "progress": self.progress.working(),
            "live_clients": self.live.clients,
            "llm": self.memory_llm.status(),
            "uptime_s": round(time.time() - self.started_at, 1),
        }
