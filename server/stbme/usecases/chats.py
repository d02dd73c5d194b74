"""The chats the sidecar knows: list, status, delete."""

from __future__ import annotations

from typing import Callable

from ..embed import EmbeddingService
from .. import config
from ..errors import Conflict, NotFound
from ..index import ChatIndexes
from ..store import Store
from ..store.jobs import JobKind, JobState, chat_jobs, enqueue_job, has_open_job
from ..store.queries import (count_active_nodes, count_unembedded, delete_chat_rows, list_chats, message_count,
                             require_chat)
from .progress import ProgressTracker


class Chats:
    def __init__(self, store: Store, settings: config.Settings, embeddings: EmbeddingService, indexes: ChatIndexes,
                 wake_worker: Callable[[], None], progress: ProgressTracker):
        self.store = store
        self.settings = settings
        self.progress = progress
        self.embeddings = embeddings
        self.indexes = indexes
        self.wake_worker = wake_worker
        self.on_delete: list[Callable[[str], None]] = []  # in-memory state to forget with a chat

    async def list(self) -> list[dict]:
        return await self.store.read(list_chats)

    async def status(self, chat_id: str) -> dict:
        embedder_id = self.embeddings.id

        def read(conn):
            chat = require_chat(conn, chat_id)
            return {
                "chat_id": chat_id,
                "messages": message_count(conn, chat_id),
                "nodes": count_active_nodes(conn, chat_id),
                "unembedded": count_unembedded(conn, chat_id, embedder_id),
                "processed_upto": chat["processed_upto"],
                "degraded_from": chat["degraded_from"],
                "jobs": chat_jobs(conn, chat_id),
            }

        status = await self.store.read(read)
        status["progress"] = await self.progress.chat(chat_id)
        index = self.indexes.vectors.loaded(chat_id)
        status["index"] = {"count": len(index) if index else None, "embedder": embedder_id,
                           "loaded": index is not None}
        return status

    async def delete(self, chat_id: str) -> dict:
        counts = await self.store.write(lambda conn: delete_chat_rows(conn, chat_id))
        if not counts["chats"]:
            raise NotFound(f"no chat {chat_id!r}", field="chat_id")
        self.indexes.drop(chat_id)
        for forget in self.on_delete:
            forget(chat_id)
        return {"deleted": {"messages": counts["messages"], "nodes": counts["nodes"], "edges": counts["edges"]}}

    async def process_now(self, chat_id: str) -> dict:
        """Queue the processing of every stored message not yet turned into memories (if any), the last ones
        too although no reply ends their batch yet, and say how far it is. The worker runs it; progress goes
        to the live channel and the chat status."""
        if not self.settings.get("extract.enabled", chat_id):
            raise Conflict("memory extraction is off for this chat (extract.enabled): turn it on first",
                           field="extract.enabled")

        def queue(conn):
            chat = require_chat(conn, chat_id)
            last = message_count(conn, chat_id) - 1
            conn.execute("UPDATE chats SET process_through = ? WHERE chat_id = ?", (last, chat_id))
            # A running job may be past its last look at the messages: queue one behind it.
            if chat["processed_upto"] >= last or has_open_job(conn, chat_id, states=(JobState.PENDING,)):
                return False
            enqueue_job(conn, chat_id, JobKind.PROCESS)
            return True

        queued = await self.store.write(queue)
        if queued:
            self.wake_worker()
        return {"queued": queued, "progress": await self.progress.chat(chat_id)}

    async def queue_reindex(self, chat_id: str) -> int:
        """Queue a rebuild of the chat's indexes; the worker runs it and reports progress."""
        def queue(conn):
            require_chat(conn, chat_id)
            return enqueue_job(conn, chat_id, JobKind.REINDEX)

        job_id = await self.store.write(queue)
        self.wake_worker()
        return job_id
