"""Trivium's caches: for one database file, an HNSW index per vector dimension and one BM25 index over
the item texts. Like the sidecar's own indexes they are rebuildable caches of SQLite: loaded from their
saved files and reconciled with the items' revisions on first use (rebuilt when missing or damaged),
kept in step after every committed write, saved in the background. BM25 indexing and searching run in
threads (a request of 1,500 long texts blocked the event loop for seconds, issue 20), one at a time on the
text index (`_text_lock`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import defaultdict
from pathlib import Path

import numpy as np

from ..index.hnsw import ChatIndex, IndexMismatch
from ..index.lexical import LEXICAL_SUFFIX, LexicalIndex, legacy_file
from ..store import Store
from . import trivium_store as ts

log = logging.getLogger("stbme.authority.trivium")
EMBEDDER = "authority-trivium:client-vectors"  # the vectors come from the client, whatever its model
BUILD_BATCH = 5000
MIN_DEAD_SLOTS = 1000
# Client vectors are often anisotropic (every text close to every other), where a small beam misses
# neighbours: a wide beam costs a fraction of a millisecond and keeps recall high (scripts/bench_authority.py).
EF_SEARCH = 400


class TriviumCaches:
    def __init__(self, store: Store, base: Path):
        self.store = store
        self.base = Path(base)
        self.hnsw: dict[int, ChatIndex] = {}
        self.lexical = LexicalIndex()
        self.loaded = False
        self._lock = asyncio.Lock()
        self._text_lock = threading.Lock()   # the BM25 index, used from worker threads
        self._dirty = False

    def _hnsw_base(self, dim: int) -> Path:
        return self.base.with_name(f"{self.base.name}.d{dim}")

    @property
    def _lexical_path(self) -> Path:
        return self.base.with_name(self.base.name + LEXICAL_SUFFIX)

    # -- load ----------------------------------------------------------------------------------
    async def ready(self) -> None:
        """Load (or build) the caches once; later calls return at once."""
        if self.loaded:
            return
        async with self._lock:
            if not self.loaded:
                await asyncio.to_thread(self._load)
                self.loaded = True

    def _load(self) -> None:
        revs: dict[int, dict[str, int]] = defaultdict(dict)
        all_revs: dict[str, int] = {}
        for item_id, dim, rev in self.store.read_sync(ts.id_revs):
            revs[dim][str(item_id)] = rev
            all_revs[str(item_id)] = rev
        self.hnsw = {dim: self._load_hnsw(dim, current) for dim, current in revs.items()}
        lexical = self._load_lexical(all_revs)
        with self._text_lock:
            self.lexical = lexical

    def _load_hnsw(self, dim: int, current: dict[str, int]) -> ChatIndex:
        try:
            index = ChatIndex.load(self._hnsw_base(dim), embedder_id=EMBEDDER, dim=dim, ef_search=EF_SEARCH)
        except IndexMismatch as exc:
            log.info("Trivium %s: building the %d-d index (%s)", self.base.name, dim, exc)
            return self._build_hnsw(dim, len(current))
        stale = [int(k) for k, rev in current.items() if index.rev_of.get(k) != rev]
        index.remove([k for k in index.rev_of if k not in current])
        for i in range(0, len(stale), BUILD_BATCH):
            rows = self.store.read_sync(lambda conn, ids=stale[i:i + BUILD_BATCH]: ts.rows_by_ids(
                conn, ids, "id, vector, rev"))
            self._add(index, rows)
        if stale or len(index) != len(current):
            self._dirty = True
        return index

    def _build_hnsw(self, dim: int, size: int) -> ChatIndex:
        index = ChatIndex(dim, EMBEDDER, capacity=size, ef_search=EF_SEARCH)
        after = 0
        while True:
            rows = self.store.read_sync(lambda conn, after=after: conn.execute(
                "SELECT id, vector, rev FROM items WHERE dim = ? AND id > ? ORDER BY id LIMIT ?",
                (dim, after, BUILD_BATCH)).fetchall())
            if not rows:
                break
            self._add(index, rows)
            after = rows[-1]["id"]
        self._dirty = True
        return index

    @staticmethod
    def _add(index: ChatIndex, rows) -> None:
        if rows:
            vectors = np.vstack([np.frombuffer(r["vector"], dtype=np.float32) for r in rows])
            index.upsert([str(r["id"]) for r in rows], vectors, [r["rev"] for r in rows])

    def _load_lexical(self, current: dict[str, int]) -> LexicalIndex:
        try:
            index = LexicalIndex.from_bytes(self._lexical_path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.info("Trivium %s: building the text index (%s)", self.base.name, exc)
            index = LexicalIndex()
        stale = [int(k) for k, rev in current.items() if index.rev_of.get(k) != rev]
        for key in [k for k in index.slot_of if k not in current]:
            index.remove(key)
        for i in range(0, len(stale), BUILD_BATCH):
            for row in self.store.read_sync(lambda conn, ids=stale[i:i + BUILD_BATCH]: ts.rows_by_ids(
                    conn, ids, "id, text, rev")):
                index.upsert(str(row["id"]), row["text"], row["rev"])
        if stale or len(index) != len(current):
            self._dirty = True
        return index

    # -- writes (after the SQLite commit) ------------------------------------------------------------
    async def upserted(self, written: list[tuple[int, int, int]], vectors: list[np.ndarray], texts: list[str]):
        """Bring the caches in line with items just written: (id, dim, rev), their vectors and texts."""
        async with self._lock:  # a load in progress read an older snapshot: apply after it
            if not self.loaded:
                return
            by_dim: dict[int, list[int]] = defaultdict(list)
            for pos, (item_id, dim, _) in enumerate(written):
                by_dim[dim].append(pos)
            for dim, positions in by_dim.items():
                keys = [str(written[p][0]) for p in positions]
                for other_dim, other in self.hnsw.items():  # an item whose dimension changed
                    if other_dim != dim:
                        other.remove([k for k in keys if k in other])
                index = self.hnsw.get(dim) or ChatIndex(dim, EMBEDDER, capacity=len(keys), ef_search=EF_SEARCH)
                await asyncio.to_thread(index.upsert, keys, np.vstack([vectors[p] for p in positions]),
                                        [written[p][2] for p in positions])
                self.hnsw[dim] = index
            await asyncio.to_thread(self._index_texts, [(str(item_id), text, rev)
                                                        for (item_id, _, rev), text in zip(written, texts)])
            self._dirty = True

    async def deleted(self, ids: list[int]) -> None:
        async with self._lock:
            if not self.loaded:
                return
            keys = [str(i) for i in ids]
            for dim, index in list(self.hnsw.items()):
                index.remove([k for k in keys if k in index])
                dead = index.next_label - len(index)
                if dead > max(MIN_DEAD_SLOTS, len(index)):  # removed slots still cost search time: rebuild
                    self.hnsw[dim] = await asyncio.to_thread(self._build_hnsw, dim, len(index))
            await asyncio.to_thread(self._index_texts, [], keys)
            self._dirty = True

    # -- reads ---------------------------------------------------------------------------------------
    def vector_hits(self, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        index = self.hnsw.get(len(vector))
        return [(int(key), sim) for key, sim in index.query(vector, k)] if index is not None else []

    def _index_texts(self, upserts: list[tuple[str, str, int]], removals: list[str] = ()) -> None:
        with self._text_lock:
            for key, text, rev in upserts:
                self.lexical.upsert(key, text, rev)
            for key in removals:
                self.lexical.remove(key)

    async def text_hits(self, text: str, k: int) -> list[tuple[int, float]]:
        """The BM25 hits of a query text (tokenised and scored in a thread)."""
        if not text.strip():
            return []

        def search():
            with self._text_lock:
                return [(int(key), score) for key, score in self.lexical.search(text, k)]

        return await asyncio.to_thread(search)

    def indexed_ids(self) -> set[int]:
        return {int(k) for index in self.hnsw.values() for k in index.rev_of}

    # -- persistence -----------------------------------------------------------------------------------
    async def save(self, force: bool = False) -> bool:
        """Write the caches if they changed (each file atomically). True if anything was written."""
        if not (self._dirty or force) or not self.loaded:
            return False
        async with self._lock:
            self._dirty = False
            try:
                await asyncio.to_thread(self._save)
            except BaseException:
                self._dirty = True  # try again at the next save
                raise
        return True

    def _save(self) -> None:
        self.base.parent.mkdir(parents=True, exist_ok=True)
        for dim, index in list(self.hnsw.items()):
            if len(index):
                index.save(self._hnsw_base(dim))
            else:
                ChatIndex.delete_files(self._hnsw_base(dim))
                del self.hnsw[dim]
        tmp = self._lexical_path.with_name(self._lexical_path.name + ".tmp")
        with self._text_lock:
            data = self.lexical.to_bytes()
        tmp.write_bytes(data)
        os.replace(tmp, self._lexical_path)
        legacy_file(self._lexical_path).unlink(missing_ok=True)

    async def rebuild(self) -> dict:
        """Throw the caches away and build them again from SQLite, then save them."""
        async with self._lock:
            for path in self.base.parent.glob(f"{self.base.name}.*"):
                path.unlink(missing_ok=True)
            self.loaded = False
            await asyncio.to_thread(self._load)
            self.loaded = True
            self._dirty = False
            await asyncio.to_thread(self._save)
        return {"dims": sorted(self.hnsw), "indexed": sum(len(i) for i in self.hnsw.values()),
                "texts": len(self.lexical)}
