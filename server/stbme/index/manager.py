"""Keeps one ChatIndex per chat in step with the store: load and reconcile, apply changes, rebuild,
save in the background. The store is the truth; an index is a cache that can always be rebuilt."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ..hashing import chat_file_key
from ..store import Store
from ..store.queries import nodes_by_ids
from .hnsw import ChatIndex, IndexMismatch

log = logging.getLogger("stbme.index")
Progress = Callable[[int, int], None]
REBUILD_BATCH = 2000
MIN_DEAD_SLOTS = 1000  # deleted HNSW slots tolerated before a rebuild


def _indexable_rows(conn, chat_id: str, embedder_id: str, node_ids: list[str] | None = None,
                    with_vectors: bool = True):
    cols = "id, rev, embedding" if with_vectors else "id, rev"
    sql = (f"SELECT {cols} FROM nodes WHERE chat_id = ? AND archived = 0 AND embedding IS NOT NULL"
           " AND embedder = ?")
    if node_ids is None:
        return conn.execute(sql, (chat_id, embedder_id)).fetchall()
    return nodes_by_ids(conn, chat_id, node_ids, columns=cols,
                        where="AND archived = 0 AND embedding IS NOT NULL AND embedder = ?", params=(embedder_id,))


class IndexManager:
    def __init__(self, store: Store, directory: Path, embedder_id: str, dim: int, *,
                 m: int = 16, ef_construction: int = 128, ef_search: int = 64):
        self.store = store
        self.directory = Path(directory)
        self.embedder_id = embedder_id
        self.dim = dim
        self.params = dict(m=m, ef_construction=ef_construction, ef_search=ef_search)
        self._indexes: dict[str, ChatIndex] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._dirty: dict[str, float] = {}

    def path(self, chat_id: str) -> Path:
        return self.directory / chat_file_key(chat_id)

    def loaded(self, chat_id: str) -> ChatIndex | None:
        return self._indexes.get(chat_id)

    async def _learn_dim(self) -> int:
        """The vector size, when it was not known up front (an HTTP embedder before its first call):
        taken from a vector this embedder already stored."""
        if not self.dim:
            row = await self.store.read(lambda conn: conn.execute(
                "SELECT length(embedding) FROM nodes WHERE embedder = ? AND embedding IS NOT NULL LIMIT 1",
                (self.embedder_id,)).fetchone())
            self.dim = row[0] // 4 if row else 0
        return self.dim

    async def get(self, chat_id: str, progress: Progress | None = None) -> ChatIndex:
        """The chat's index, loaded and reconciled with the store (rebuilt if it cannot be trusted).
        While the vector size is unknown (nothing embedded yet by this embedder) it is an empty index
        that is not kept."""
        index = self._indexes.get(chat_id)
        if index is not None:
            return index
        if not await self._learn_dim():
            return ChatIndex(1, self.embedder_id, capacity=1)
        lock = self._loading.setdefault(chat_id, asyncio.Lock())
        async with lock:
            index = self._indexes.get(chat_id)
            if index is None:
                index = await self._load_or_rebuild(chat_id, progress)
                self._indexes[chat_id] = index
            return index

    async def _load_or_rebuild(self, chat_id: str, progress: Progress | None) -> ChatIndex:
        try:
            index, _ = await asyncio.to_thread(ChatIndex.load, self.path(chat_id), embedder_id=self.embedder_id,
                                               dim=self.dim, ef_search=self.params["ef_search"])
        except IndexMismatch as why:
            log.info("index for chat %r: %s; rebuilding from the store", chat_id, why)
            return await self.build(chat_id, progress)
        await self._reconcile(chat_id, index)
        return index

    async def _reconcile(self, chat_id: str, index: ChatIndex) -> None:
        """Bring a loaded index in line with the store: re-add nodes whose revision moved, drop the gone."""
        current = dict(await self.store.read(
            lambda conn: [(r["id"], r["rev"]) for r in _indexable_rows(conn, chat_id, self.embedder_id,
                                                                       with_vectors=False)]))
        stale = [n for n, rev in current.items() if index.rev_of.get(n) != rev]
        gone = [n for n in index.rev_of if n not in current]
        index.remove(gone)
        if stale:
            rows = await self.store.read(lambda conn: _indexable_rows(conn, chat_id, self.embedder_id, stale))
            await self._upsert_rows(index, rows)
        if stale or gone:
            self._dirty[chat_id] = time.monotonic()
            log.info("index for chat %r reconciled: %d re-added, %d removed", chat_id, len(stale), len(gone))

    async def _upsert_rows(self, index: ChatIndex, rows) -> None:
        if not rows:
            return
        ids = [r["id"] for r in rows]
        vectors = np.vstack([np.frombuffer(r["embedding"], dtype=np.float32) for r in rows])
        revs = [r["rev"] for r in rows]
        await asyncio.to_thread(index.upsert, ids, vectors, revs)

    async def build(self, chat_id: str, progress: Progress | None = None) -> ChatIndex:
        """Build a fresh index from the vectors in the store (no re-embedding) and swap it in."""
        if not await self._learn_dim():
            return ChatIndex(1, self.embedder_id, capacity=1)  # nothing embedded yet: nothing to index
        ids_revs = await self.store.read(
            lambda conn: [(r["id"], r["rev"]) for r in _indexable_rows(conn, chat_id, self.embedder_id,
                                                                       with_vectors=False)])
        index = ChatIndex(self.dim, self.embedder_id, capacity=len(ids_revs) + 16, **self.params)
        total = len(ids_revs)
        for start in range(0, total, REBUILD_BATCH):
            part = [n for n, _ in ids_revs[start:start + REBUILD_BATCH]]
            rows = await self.store.read(lambda conn: _indexable_rows(conn, chat_id, self.embedder_id, part))
            await self._upsert_rows(index, rows)
            if progress:
                progress(min(start + REBUILD_BATCH, total), total)
        if progress and total == 0:
            progress(0, 0)
        self._indexes[chat_id] = index
        self._dirty[chat_id] = time.monotonic()
        return index

    async def apply(self, chat_id: str, node_ids: set[str] | list[str]) -> None:
        """After a write: make the index hold exactly the store's indexable version of these nodes."""
        lock = self._loading.get(chat_id)
        if lock is not None and lock.locked():
            # A load or rebuild is reading an older snapshot: let it finish, then apply on top of it.
            async with lock:
                pass
        index = self._indexes.get(chat_id)
        if index is None or not node_ids:
            return  # not loaded: reconciled on first use
        node_ids = list(node_ids)
        rows = await self.store.read(lambda conn: _indexable_rows(conn, chat_id, self.embedder_id, node_ids))
        present = {r["id"] for r in rows}
        index.remove([n for n in node_ids if n not in present])
        await self._upsert_rows(index, [r for r in rows if index.rev_of.get(r["id"]) != r["rev"]])
        self._dirty[chat_id] = time.monotonic()
        if index.next_label - len(index) > max(MIN_DEAD_SLOTS, 2 * len(index)):
            # Mostly deleted slots (many rollbacks or archives): searches get slower and worse; rebuild.
            await self.build(chat_id)

    async def save_dirty(self, older_than_s: float = 0.0) -> int:
        """Save the indexes changed at least `older_than_s` seconds ago. Returns how many were saved."""
        now = time.monotonic()
        saved = 0
        for chat_id, since in list(self._dirty.items()):
            if now - since < older_than_s:
                continue
            index = self._indexes.get(chat_id)
            self._dirty.pop(chat_id, None)
            if index is None:
                continue
            watermark = await self.store.read(
                lambda conn: (conn.execute("SELECT node_rev FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
                              or [0])[0])
            await asyncio.to_thread(index.save, self.path(chat_id), watermark)
            saved += 1
        return saved

    def drop(self, chat_id: str) -> None:
        self._indexes.pop(chat_id, None)
        self._dirty.pop(chat_id, None)
        ChatIndex.delete_files(self.path(chat_id))

    def loaded_chats(self) -> list[str]:
        return list(self._indexes)

    def switch_embedder(self, embedder_id: str, dim: int, built: "IndexManager") -> None:
        """Adopt indexes another manager built for a new embedder (after a background re-embed);
        chats not built there are rebuilt from the store on first use."""
        self.embedder_id = embedder_id
        self.dim = dim
        self._indexes = dict(built._indexes)
        self._dirty = {c: 0.0 for c in self._indexes}
