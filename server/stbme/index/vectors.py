"""The per-chat HNSW caches: each chat's ChatIndex loaded and reconciled with the store by node revision,
rebuilt when it cannot be trusted (missing, damaged, another embedder, mostly deleted slots)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Callable

import numpy as np

from ..store import Store
from ..store.queries import nodes_by_ids
from .cache import PerChatCache
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


class VectorCache(PerChatCache[ChatIndex]):
    def __init__(self, store: Store, directory: Path | None, embedder_id: str, dim: int, *,
                 m: int = 16, ef_construction: int = 128, ef_search: int = 64):
        super().__init__(store, directory)
        self.embedder_id = embedder_id
        self.dim = dim
        self.params = dict(m=m, ef_construction=ef_construction, ef_search=ef_search)

    async def _learn_dim(self) -> int:
        """The vector size, when it was not known up front (an HTTP embedder before its first call):
        taken from a vector this embedder already stored."""
        if not self.dim:
            row = await self.store.read(lambda conn: conn.execute(
                "SELECT length(embedding) FROM nodes WHERE embedder = ? AND embedding IS NOT NULL LIMIT 1",
                (self.embedder_id,)).fetchone())
            self.dim = row[0] // 4 if row else 0
        return self.dim

    async def get(self, chat_id: str) -> ChatIndex:
        """The chat's index. While the vector size is unknown (nothing embedded yet by this embedder)
        it is an empty index that is not kept."""
        if chat_id not in self._items and not await self._learn_dim():
            return ChatIndex(1, self.embedder_id, capacity=1)
        return await super().get(chat_id)

    async def _load_or_build(self, chat_id: str) -> ChatIndex:
        base = self.file_base(chat_id)
        try:
            if base is None:
                raise IndexMismatch("no index directory")
            index = await asyncio.to_thread(ChatIndex.load, base, embedder_id=self.embedder_id, dim=self.dim,
                                            ef_search=self.params["ef_search"])
        except IndexMismatch as why:
            log.info("index for chat %r: %s; rebuilding from the store", chat_id, why)
            return await self._build(chat_id)
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
            await _upsert_rows(index, rows)
        if stale or gone:
            self.mark_dirty(chat_id)
            log.info("index for chat %r reconciled: %d re-added, %d removed", chat_id, len(stale), len(gone))

    async def _build(self, chat_id: str, progress: Progress | None = None) -> ChatIndex:
        ids_revs = await self.store.read(
            lambda conn: [(r["id"], r["rev"]) for r in _indexable_rows(conn, chat_id, self.embedder_id,
                                                                       with_vectors=False)])
        index = ChatIndex(self.dim, self.embedder_id, capacity=len(ids_revs) + 16, **self.params)
        total = len(ids_revs)
        for start in range(0, total, REBUILD_BATCH):
            part = [n for n, _ in ids_revs[start:start + REBUILD_BATCH]]
            rows = await self.store.read(lambda conn: _indexable_rows(conn, chat_id, self.embedder_id, part))
            await _upsert_rows(index, rows)
            if progress:
                progress(min(start + REBUILD_BATCH, total), total)
        if progress and total == 0:
            progress(0, 0)
        self.mark_dirty(chat_id)
        return index

    async def rebuild(self, chat_id: str, progress: Progress | None = None) -> ChatIndex:
        """Build a fresh index from the vectors in the store (no re-embedding) and swap it in."""
        if not await self._learn_dim():
            return ChatIndex(1, self.embedder_id, capacity=1)  # nothing embedded yet: nothing to index
        index = await self._build(chat_id, progress)
        self._put(chat_id, index)
        return index

    async def _apply(self, chat_id: str, index: ChatIndex, node_ids: list[str]) -> None:
        rows = await self.store.read(lambda conn: _indexable_rows(conn, chat_id, self.embedder_id, node_ids))
        present = {r["id"] for r in rows}
        index.remove([n for n in node_ids if n not in present])
        await _upsert_rows(index, [r for r in rows if index.rev_of.get(r["id"]) != r["rev"]])
        if index.next_label - len(index) > max(MIN_DEAD_SLOTS, 2 * len(index)):
            # Mostly deleted slots (many rollbacks or archives): searches get slower and worse; rebuild.
            await self.rebuild(chat_id)

    def _save(self, chat_id: str, index: ChatIndex) -> None:
        index.save(self.file_base(chat_id))

    def _delete_files(self, chat_id: str) -> None:
        ChatIndex.delete_files(self.file_base(chat_id))

    def switch_embedder(self, embedder_id: str, dim: int, built: "VectorCache") -> None:
        """Adopt indexes another cache built for a new embedder (after a background re-embed); chats
        not built there are rebuilt from the store on first use."""
        self.embedder_id = embedder_id
        self.dim = dim
        self._items = dict(built._items)
        self._dirty = {c: 0.0 for c in self._items}


async def _upsert_rows(index: ChatIndex, rows) -> None:
    if not rows:
        return
    ids = [r["id"] for r in rows]
    vectors = np.vstack([np.frombuffer(r["embedding"], dtype=np.float32) for r in rows])
    revs = [r["rev"] for r in rows]
    await asyncio.to_thread(index.upsert, ids, vectors, revs)
