"""The embedding service: the active embedder, the text-hash cache in SQLite, a query LRU."""

from __future__ import annotations

import collections

import numpy as np

from ..hashing import text_hash
from ..store import Store
from .base import Embedder


class EmbeddingService:
    def __init__(self, store: Store, embedder: Embedder, query_cache_size: int = 512):
        self.store = store
        self.embedder = embedder
        self._queries: collections.OrderedDict[tuple[str, str], np.ndarray] = collections.OrderedDict()
        self._query_cache_size = query_cache_size

    @property
    def id(self) -> str:
        return self.embedder.id

    async def embed_texts(self, texts: list[str], embedder: Embedder | None = None) -> np.ndarray:
        """Vectors for memory texts, from the cache where possible; new ones are cached."""
        embedder = embedder or self.embedder
        if not texts:
            return np.zeros((0, embedder.dim or 1), np.float32)
        hashes = [text_hash(t) for t in texts]
        unique = list(dict.fromkeys(hashes))

        def lookup(conn):
            found = {}
            for i in range(0, len(unique), 500):
                part = unique[i:i + 500]
                rows = conn.execute(
                    f"SELECT text_hash, vec FROM embed_cache WHERE embedder = ? AND text_hash IN "
                    f"({','.join('?' * len(part))})", [embedder.id, *part]).fetchall()
                found.update({r[0]: np.frombuffer(r[1], dtype=np.float32) for r in rows})
            return found

        found = await self.store.read(lookup)
        missing = [h for h in unique if h not in found]
        if missing:
            first_text = {}
            for h, t in zip(hashes, texts):
                first_text.setdefault(h, t)
            vectors = await embedder.embed_passages([first_text[h] for h in missing])
            new = {h: vectors[i].astype(np.float32) for i, h in enumerate(missing)}
            found.update(new)

            def save(conn):
                conn.executemany("INSERT OR REPLACE INTO embed_cache (embedder, text_hash, vec) VALUES (?,?,?)",
                                 [(embedder.id, h, v.tobytes()) for h, v in new.items()])

            await self.store.write(save)
        return np.vstack([found[h] for h in hashes])

    async def embed_query(self, text: str) -> np.ndarray:
        key = (self.embedder.id, text)
        vec = self._queries.get(key)
        if vec is not None:
            self._queries.move_to_end(key)
            return vec
        vec = await self.embedder.embed_query(text)
        self._queries[key] = vec
        if len(self._queries) > self._query_cache_size:
            self._queries.popitem(last=False)
        return vec
