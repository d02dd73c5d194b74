"""Per-chat caches of the store, behind one interface: the HNSW vector index (hnswlib) and the BM25
lexical index. The store is the truth; both are rebuilt from it whenever they cannot be trusted."""

from __future__ import annotations

from pathlib import Path

from ..store import Store
from .hnsw import ChatIndex
from .lexical import LexicalCache, LexicalIndex
from .vectors import VectorCache

__all__ = ["ChatIndex", "ChatIndexes", "LexicalCache", "LexicalIndex", "VectorCache"]


class ChatIndexes:
    """Both caches of every chat. Callers make one call per event: `apply` after a write, `save_dirty`
    on the housekeeping timer, `drop` when a chat's memories were replaced or deleted."""

    def __init__(self, store: Store, directory: Path | None, embedder_id: str, dim: int, *,
                 m: int = 16, ef_construction: int = 128, ef_search: int = 64):
        self.vectors = VectorCache(store, directory, embedder_id, dim, m=m, ef_construction=ef_construction,
                                   ef_search=ef_search)
        self.lexical = LexicalCache(store, directory)

    async def apply(self, chat_id: str, node_ids) -> None:
        """After a write: both caches hold exactly the store's version of these nodes (a text that did
        not change is not re-indexed, so this is cheap after an embedding-only change)."""
        node_ids = list(node_ids)
        await self.lexical.apply(chat_id, node_ids)
        await self.vectors.apply(chat_id, node_ids)

    async def load(self, chat_id: str) -> None:
        """Load (or build) both caches of the chat now, e.g. to warm up after a restart."""
        await self.lexical.get(chat_id)
        await self.vectors.get(chat_id)

    async def save_dirty(self, older_than_s: float = 0.0) -> int:
        return await self.vectors.save_dirty(older_than_s) + await self.lexical.save_dirty(older_than_s)

    def drop(self, chat_id: str) -> None:
        self.vectors.drop(chat_id)
        self.lexical.drop(chat_id)
