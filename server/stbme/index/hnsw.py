"""One chat's HNSW index: node ids mapped to monotonic integer labels (chroma's model).

Labels are never reused for another node. A removed node's slot is `mark_deleted` and still takes
capacity, so growth is sized by labels issued. A node that comes back (restore, rollback) gets its old
label un-deleted and its vector replaced.

A chat of up to EXACT_MAX labels is searched exactly: a scan of a copy of its vectors, kept beside the graph.
A roleplay chat's memories lie close together (cosines of .8 to .9 to any question), and there HNSW misses
some of the best: on the generated set, 28 of 279 real queries lost one of their exact first ten, which cost
2.7 points of R@10; and which it misses depends on the order the index was built in, so two ingests of one
chat answered differently (docs/evaluation.md). Below EXACT_MAX the scan is also the faster of the two.

The copy is saved beside the index (`<base>.<gen>.npy`, named and checksummed in the metadata) and read back
with numpy: rebuilding it from the graph goes through hnswlib's `get_items`, which hands out Python lists (a
load of 10,000 memories took 256 ms that way, 61 ms with the saved copy; scripts/bench_index_load.py, idle). A
save without it (older, or a damaged file) still loads: the copy is rebuilt from the graph as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path

import hnswlib
import numpy as np
import orjson

from .rwlock import ReadWriteLock

log = logging.getLogger("stbme.index")
META_VERSION = 2
MIN_CAPACITY = 1000
READ_BACK_MAX = 4096   # vectors kept read back (1.5 MiB at 384 dimensions float32 per 1,000)
GROWTH = 1.5
# Up to this many labels a chat is searched by a scan (15 MiB of vectors at 384 dimensions). For the 100
# candidates recall asks, a scan took 0.27 ms at 10k vectors where HNSW at ef 256 took 0.68 (0.075 against 0.21
# at 2k). Past it the copy is dropped and the graph answers; a loaded index rebuilds its copy from the graph.
EXACT_MAX = 10_000


class IndexMismatch(Exception):
    """A saved index does not fit what the caller expects (embedder, dimension, file)."""


class ChatIndex:
    def __init__(self, dim: int, embedder_id: str, *, m: int = 16, ef_construction: int = 128,
                 ef_search: int = 64, capacity: int = MIN_CAPACITY):
        self.dim = dim
        self.embedder_id = embedder_id
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self._index = hnswlib.Index(space="cosine", dim=dim)
        self._index.init_index(max_elements=max(capacity, MIN_CAPACITY), M=m, ef_construction=ef_construction,
                               allow_replace_deleted=False)
        self._index.set_ef(ef_search)
        self.label_of: dict[str, int] = {}
        self.id_of: dict[int, str] = {}
        self.rev_of: dict[str, int] = {}       # live nodes only: the node revision indexed
        self.next_label = 0
        self._init_locks()
        # Vectors read back for recall (near-duplicates, exact similarities), by node id: hnswlib hands them
        # out as Python lists of floats, about 18 us a vector, and the same memories come up recall after recall.
        self._read_back: dict[str, np.ndarray] = {}
        self._exact_init(max(capacity, MIN_CAPACITY))

    def _init_locks(self) -> None:
        # Queries and a save read the index together; an upsert or a removal has it alone (index/rwlock.py).
        self.lock = ReadWriteLock()
        self._searching = threading.Lock()   # set_ef, then the search with it: one graph search at a time
        self._reading_back = threading.Lock()   # the read-back cache, filled by readers
        self._saving = threading.Lock()   # one save at a time: two would write the same generation's files

    # -- reads ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rev_of)

    def __contains__(self, node_id: str) -> bool:
        return node_id in self.rev_of

    @property
    def exact(self) -> bool:
        """Is this chat searched by a scan (small enough), not through the graph?"""
        return self._exact is not None

    def query(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """Nearest live nodes as (node_id, cosine similarity), best first."""
        with self.lock.reading():
            k = min(k, len(self.rev_of))
            if k <= 0:
                return []
            if self._exact is not None:
                return self._scan(vector, k)
            query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
            with self._searching:
                labels, distances = self._graph_search(query, k)
        return self._best_first(labels[0], 1.0 - distances[0].astype(np.float64))

    def _graph_search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        while True:
            self._index.set_ef(max(self.ef_search, k))
            try:
                return self._index.knn_query(query, k=k)
            except RuntimeError:
                # After many mark_deleted updates hnswlib may reach fewer than k live items
                # ("Cannot return the results in a contiguous 2D array"): ask for fewer.
                if k <= 1:
                    return np.zeros((1, 0), dtype=np.uint64), np.zeros((1, 0), dtype=np.float32)
                k = max(1, k // 2)

    def _scan(self, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The exact k nearest: every live vector's cosine."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        query = query / (np.linalg.norm(query) or 1.0)
        n = self.next_label
        sims = (self._exact[:n] @ query) * self._inverse_norm[:n]
        sims[~self._live[:n]] = -np.inf
        top = np.argpartition(-sims, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-sims[top], kind="stable")]
        top = top[np.isfinite(sims[top])]
        return self._best_first(top, sims[top].astype(np.float64))

    def _best_first(self, labels: np.ndarray, similarity: np.ndarray) -> list[tuple[str, float]]:
        id_of = self.id_of
        # Equal similarity (to 6 places, rounded at once in numpy): by node id, not by label. tolist(): Python
        # ints and floats of the same values, without a numpy scalar per hit.
        rounded = -np.round(similarity, 6)
        node_ids = [id_of[lab] for lab in labels.tolist()]
        if np.all(rounded[1:] > rounded[:-1]):   # no ties, in order (hnswlib's usual answer): nothing to sort
            return list(zip(node_ids, similarity.tolist()))
        ranked = sorted(zip(rounded.tolist(), node_ids, similarity.tolist()))
        return [(node_id, sim) for _, node_id, sim in ranked]

    def vectors(self, node_ids: list[str]) -> np.ndarray:
        with self.lock.reading():
            if self._exact is not None:
                rows = [self.label_of[n] for n in node_ids]
                if not self._live[rows].all():
                    raise RuntimeError("a vector asked for was removed from the index")
                return self._exact[rows].reshape(len(node_ids), self.dim)
            with self._reading_back:
                return self._read_back_vectors(node_ids)

    def _read_back_vectors(self, node_ids: list[str]) -> np.ndarray:
        missing = [n for n in dict.fromkeys(node_ids) if n not in self._read_back]
        if missing:
            if len(self._read_back) + len(missing) > READ_BACK_MAX:
                self._read_back.clear()
            got = np.asarray(self._index.get_items([self.label_of[n] for n in missing]), dtype=np.float32)
            self._read_back.update(zip(missing, got))
        if not node_ids:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._read_back[n] for n in node_ids])

    # -- the scanned copy -------------------------------------------------------------------------
    def _exact_init(self, labels: int) -> None:
        """A scanned copy with room for `labels` labels, or none for a chat past EXACT_MAX."""
        self._exact = np.zeros((0, self.dim), dtype=np.float32)   # the vectors as hnswlib hands them back
        self._inverse_norm = np.zeros(0, dtype=np.float32)
        self._live = np.zeros(0, dtype=bool)
        self._exact_reserve(max(labels, MIN_CAPACITY))

    def _set_exact(self, labels: np.ndarray, vectors: np.ndarray) -> None:
        norms = np.linalg.norm(vectors, axis=1)
        inverse = np.zeros_like(norms)
        np.divide(1.0, norms, out=inverse, where=norms > 0)   # a zero vector matches nothing
        self._exact[labels] = vectors
        self._inverse_norm[labels] = inverse
        self._live[labels] = True

    def _exact_reserve(self, labels_needed: int) -> None:
        """Room for this many labels in the scanned copy; past EXACT_MAX the copy goes, for good."""
        if self._exact is None or labels_needed <= len(self._exact):
            return
        if labels_needed > EXACT_MAX:
            self._exact = self._inverse_norm = self._live = None
            return
        rows = min(EXACT_MAX, max(labels_needed, int(len(self._exact) * GROWTH)))
        self._exact, self._inverse_norm, self._live = (
            np.concatenate([a, np.zeros((rows - len(a),) + a.shape[1:], dtype=a.dtype)])
            for a in (self._exact, self._inverse_norm, self._live))

    # -- writes ---------------------------------------------------------------------------------
    def _ensure_capacity(self, extra: int) -> None:
        needed = self.next_label + extra
        capacity = self._index.get_max_elements()
        if needed > capacity:
            self._index.resize_index(max(int(capacity * GROWTH), needed, MIN_CAPACITY))
        self._exact_reserve(needed)

    def upsert(self, node_ids: list[str], vectors: np.ndarray, revs: list[int]) -> None:
        """Add or replace vectors. Index first, bookkeeping after the add succeeded."""
        if not node_ids:
            return
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(node_ids), self.dim)
        with self.lock.writing():
            new_ids = [n for n in dict.fromkeys(node_ids) if n not in self.label_of]
            self._ensure_capacity(len(new_ids))
            labels = {}
            next_label = self.next_label
            for n in new_ids:
                labels[n] = next_label
                next_label += 1
            for n in node_ids:
                if n in self.label_of:
                    labels[n] = self.label_of[n]
                    if n not in self.rev_of:  # was removed: bring the slot back
                        self._index.unmark_deleted(labels[n])
            for n in node_ids:
                self._read_back.pop(n, None)
            label_array = np.asarray([labels[n] for n in node_ids], dtype=np.int64)
            self._index.add_items(vectors, label_array)
            if self._exact is not None:
                # As hnswlib hands them back (it keeps a unit vector and its norm): the copy a loaded index
                # rebuilds from the graph is then the same to the last bit, and so are its answers.
                self._set_exact(label_array, np.asarray(self._index.get_items(label_array.tolist()), np.float32))
            self.next_label = next_label
            for n, rev in zip(node_ids, revs):
                self.label_of[n] = labels[n]
                self.id_of[labels[n]] = n
                self.rev_of[n] = rev

    def remove(self, node_ids: list[str]) -> None:
        with self.lock.writing():
            for n in node_ids:
                self._read_back.pop(n, None)
                if n in self.rev_of:
                    self._index.mark_deleted(self.label_of[n])
                    if self._exact is not None:
                        self._live[self.label_of[n]] = False
                    del self.rev_of[n]

    # -- persistence ----------------------------------------------------------------------------
    def save(self, base: Path) -> None:
        """Write `<base>.<gen>.bin` then the metadata `<base>.json` naming it, each atomically, so a
        crash at any point leaves a metadata file that names a complete index. Queries go on meanwhile
        (the save only reads the index); an upsert waits until the index file is written."""
        with self._saving:
            self._save(Path(base))

    def _save(self, base: Path) -> None:
        base.parent.mkdir(parents=True, exist_ok=True)
        old_meta = _read_meta(base)
        gen = (old_meta or {}).get("gen", 0) + 1
        bin_path = base.with_name(f"{base.name}.{gen}.bin")
        copy_path = base.with_name(f"{base.name}.{gen}.npy")
        tmp = bin_path.with_suffix(".tmp")
        with self.lock.reading():
            self._index.save_index(str(tmp))
            meta = {
                "version": META_VERSION, "gen": gen, "file": bin_path.name, "dim": self.dim,
                "embedder": self.embedder_id, "space": "cosine", "m": self.m,
                "ef_construction": self.ef_construction, "next_label": self.next_label,
                # Copies taken while no writer runs: an upsert may run as soon as the lock is released, and
                # the metadata must describe the index file just written, not one label more.
                "labels": dict(self.label_of), "revs": dict(self.rev_of),
            }
            copy = self._exact[:self.next_label].copy() if self._exact is not None else None
        meta["digest"] = _file_digest(tmp)   # the file is this save's own: read back without the lock
        os.replace(tmp, bin_path)
        if copy is not None:
            tmp = copy_path.with_suffix(".tmp")
            with open(tmp, "wb") as fh:
                np.save(fh, copy, allow_pickle=False)
            meta["exact"] = {"file": copy_path.name, "digest": _file_digest(tmp)}
            os.replace(tmp, copy_path)
        tmp_meta = base.with_name(base.name + ".json.tmp")
        with open(tmp_meta, "wb") as fh:
            fh.write(orjson.dumps(meta))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_meta, base.with_name(base.name + ".json"))
        kept = {bin_path, copy_path} if "exact" in meta else {bin_path}
        for stale in [*base.parent.glob(f"{base.name}.*.bin"), *base.parent.glob(f"{base.name}.*.npy")]:
            if stale not in kept:
                stale.unlink(missing_ok=True)

    @classmethod
    def load(cls, base: Path, *, embedder_id: str, dim: int, ef_search: int = 64) -> "ChatIndex":
        """Load a saved index; raise IndexMismatch if it is missing, broken or built by another model.
        The caller reconciles it with the store by node revision."""
        base = Path(base)
        meta = _read_meta(base)
        if meta is None:
            raise IndexMismatch("no saved index")
        if meta.get("version") != META_VERSION:
            raise IndexMismatch(f"index metadata version {meta.get('version')}")
        if meta.get("embedder") != embedder_id or meta.get("dim") != dim:
            raise IndexMismatch(f"index built by {meta.get('embedder')} ({meta.get('dim')}-d)")
        bin_path = base.with_name(meta["file"])
        if not bin_path.exists():
            raise IndexMismatch("index file missing")
        # hnswlib trusts its file blindly (a damaged one can crash the process): check it first.
        if _file_digest(bin_path) != meta.get("digest"):
            raise IndexMismatch("index file damaged (checksum differs)")
        labels = {k: int(v) for k, v in meta["labels"].items()}
        if (any(not 0 <= label < meta["next_label"] for label in labels.values())
                or not meta["revs"].keys() <= labels.keys()):
            # Saved by an older revision while an upsert ran: it names labels its index file does not hold.
            raise IndexMismatch("index metadata names labels its file does not hold")
        self = cls.__new__(cls)
        self.dim, self.embedder_id, self.m = dim, embedder_id, meta["m"]
        self.ef_construction, self.ef_search = meta["ef_construction"], ef_search
        self._init_locks()
        self._read_back = {}
        self._index = hnswlib.Index(space="cosine", dim=dim)
        try:
            self._index.load_index(str(bin_path), max_elements=max(meta["next_label"], MIN_CAPACITY))
        except (RuntimeError, OSError) as exc:
            raise IndexMismatch(f"index file unreadable: {exc}") from None
        self._index.set_ef(ef_search)
        self.label_of = labels
        self.id_of = {v: k for k, v in labels.items()}
        self.rev_of = {k: int(v) for k, v in meta["revs"].items()}
        self.next_label = meta["next_label"]
        if self._index.get_current_count() != self.next_label:
            raise IndexMismatch("index file does not match its metadata")
        self._exact_init(self.next_label)
        if self._exact is not None and self.rev_of:
            live = np.asarray([labels[n] for n in self.rev_of], dtype=np.int64)
            saved = _read_copy(base, meta, self.next_label, dim)
            self._set_exact(live, saved[live] if saved is not None
                            else np.asarray(self._index.get_items(live.tolist()), dtype=np.float32))
        return self

    @staticmethod
    def delete_files(base: Path) -> None:
        base = Path(base)
        for path in base.parent.glob(f"{base.name}.*"):
            path.unlink(missing_ok=True)


def _file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_copy(base: Path, meta: dict, labels: int, dim: int) -> np.ndarray | None:
    """The scanned copy as saved, or None when the save has none that fits (then it is rebuilt)."""
    entry = meta.get("exact")
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        return None
    path = base.with_name(Path(entry["file"]).name)
    try:
        if _file_digest(path) != entry.get("digest"):
            raise ValueError("checksum differs")
        copy = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        log.info("scanned copy %s not used (%s); rebuilding it from the index", path.name, exc)
        return None
    if copy.dtype != np.float32 or copy.shape != (labels, dim):
        log.info("scanned copy %s has shape %s, not (%d, %d); rebuilding it", path.name, copy.shape, labels, dim)
        return None
    return copy


def _read_meta(base: Path) -> dict | None:
    path = base.with_name(base.name + ".json")
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
