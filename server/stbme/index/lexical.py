"""BM25 over memory texts, CJK-aware: Latin words, CJK bigrams (Chinese has no spaces).

One in-memory inverted index per chat (LexicalCache), saved beside the HNSW index, reconciled with the
store on load and updated in place after every write. Scoring is vectorised with numpy over the posting
lists of the query terms.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import math
import os
import re
import struct
import sys
import threading
from array import array
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import snowballstemmer

from ..graph.model import node_text
from ..store import Store
from ..store.queries import nodes_by_ids
from .cache import PerChatCache

log = logging.getLogger("stbme.lexical")
K1 = 1.2
B = 0.75
# A term in at least this share of a chat's memories says how its memories are written, not what one is about:
# above all the speakers' names ("Elise: ..." starts half the memories of a two-person chat). BM25's length
# normalisation turned such a term into a preference for short memories: for a question naming Elise, her
# "Hello Kate! Any date updates?" outranked her long messages. So it is scored without length normalisation
# (BM25F's b = 0, as for a speaker field); rarer terms keep B. Public sets' tuned-on half, R@10 EN all / ZH all:
# .514 / .247 at 0 (off), .522 / .252 at 0.05, .526 / .253 at 0.1, .525 / .247 at 0.2 and 0.3 (docs/evaluation.md,
# "Common terms scored without length normalisation"). recall/tuning.py overrides it for the evaluation.
COMMON_TERM_SHARE = 0.1

_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
# A CJK run or a Latin/digit word, told apart by which group matched: one findall, no second regex per token
# (tokenize runs on every input, recent turn and written memory).
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)", re.UNICODE)
_WORD = re.compile(rf"[^\W_{_CJK}]+", re.UNICODE)   # _TOKEN's Latin/digit words alone
_CJK_RUN = re.compile(rf"^[{_CJK}]+$")
_CJK_STOP = frozenset("的了是在我你他她它们这那有和就不也都而及与着或一个上下")
STOPWORDS = frozenset("""
a an the and or but if then else of to in on at by for with from as is are was were be been being am do does did
i me my mine you your yours he him his she her hers it its we us our they them their this that these those there
here what which who whom whose when where why how not no nor so too very can could would should will shall may
might must just than into onto over under about up down out off again once all any both each few more most other
some such only own same s t don now o re ve ll d m let lets oh ah yes yeah ok okay
""".split())


_STEMMERS = threading.local()   # a Snowball stemmer keeps its word in the object: one per thread


@functools.lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A Latin word's search term: its English (Snowball) stem, so "buying" finds "buy" and "exploring" finds
    "explore". Stemmed once: a stem stemmed again can shorten ("agreed" -> "agre" -> "agr") and join words the
    first pass kept apart ("early" and "ear", "Elise" and "Eli"), so a term is never searched as text again:
    what an input borrows is searched as the words it came from (words_of_terms), a subject as its terms."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = snowballstemmer.stemmer("english")
    return stemmer.stemWord(word)


def _idf(n: int, df: float) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def tokenize(text: str) -> list[str]:
    """Search terms of a text: lowercased Latin/digit words minus stopwords, stemmed; CJK bigrams."""
    terms: list[str] = []
    for cjk, word in _TOKEN.findall(text.lower()):
        if cjk:
            if len(cjk) == 1:
                if cjk not in _CJK_STOP:
                    terms.append(cjk)
            else:
                terms.extend([cjk[i:i + 2] for i in range(len(cjk) - 1)])
        elif word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            terms.append(_stem(word))
    return terms


@functools.lru_cache(maxsize=4096)
def odd_stems(text: str) -> frozenset[str]:
    """The text's search terms that are not a part of it ("jori" of "Jory", "happi" of "happy"): a term is one of
    tokenize(text) only if it is a part of text.lower() or one of these. Every other term is: a CJK term is a
    part of its run, and a Latin term that is a part of its word a part of the text. So a test of many texts'
    terms (the block's snippets) reads their parts, and tokenizes none (a sentence's terms cost ~10 us)."""
    # The words tokenize searches: its test, written again here (a call per word made tokenize 6% slower).
    stems = [(word, _stem(word)) for word in set(_WORD.findall(text.lower()))
             if word not in STOPWORDS and (len(word) > 1 or word.isdigit())]
    return frozenset(stem for word, stem in stems if stem not in word)


def words_of_terms(terms: list[str], texts: list[str]) -> dict[str, str]:
    """The word each of these search terms came from in the texts (its first): a term to search again is
    searched as its word, which gives the term back; the term itself would be stemmed a second time. A CJK
    term is its own word; a Latin term none of the texts holds is left out."""
    found = {t: t for t in terms if _CJK_RUN.match(t)}
    wanted = set(terms) - set(found)
    for text in texts:
        for _, word in _TOKEN.findall(text.lower()):
            if not wanted:
                return found
            if word and word not in STOPWORDS and (stem := _stem(word)) in wanted:
                found[stem] = word
                wanted.discard(stem)
    return found


# Posting lists are C arrays (4 bytes a slot, 4 a term count), not lists of Python ints: a list loaded from JSON
# held a 28-byte int object per posting, and a fresh process reopening a 100k-memory chat peaked at 634 MB
# (443 MB with arrays; scripts/bench_recall.py, "peak of a fresh process reopening it").
DOCS, TFS = "i", "I"
WEIGHTS_KEPT = 1024        # texts whose term weights are remembered (LexicalIndex.term_weights)
WEIGHTS_TEXT_CHARS = 4000  # ... each at most this long: a chat turn, not a 200,000-character input
MAGIC = b"STBMELEX"


def _posting_array(code: str, values=b"") -> array:
    out = array(code)
    out.frombytes(values)
    return out


class LexicalIndex:
    """BM25 index over node texts; doc slots are append-only, removed docs are masked out."""

    def __init__(self):
        self.slot_of: dict[str, int] = {}
        self.node_of: list[str | None] = []
        self.lengths: list[int] = []
        self.active: list[bool] = []
        self.postings: dict[str, tuple[array, array]] = {}   # term -> (doc slots, term counts)
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._np_lengths: np.ndarray | None = None
        self._np_active: np.ndarray | None = None
        # Derived from the live slots, kept until the index changes: a recall weighs the terms of its input
        # and of the recent turns (hundreds of lookups), and at idle the chat does not change between recalls.
        self._df: dict[str, float] = {}
        self._norm: np.ndarray | None = None
        self._weights: dict[str, dict[str, float]] = {}   # text -> term_weights(text); the same recent turns
        self.live = 0
        self.total_length = 0
        self.rev_of: dict[str, int] = {}   # node revision indexed, to reconcile a saved index with the store
        self.text_key: dict[str, int] = {}  # hash of the indexed text (this process): unchanged text is not re-added

    def __len__(self) -> int:
        return self.live

    def upsert(self, node_id: str, text: str, rev: int = 0) -> None:
        """Index a node's text. The same text again only records the new revision (no dead slot)."""
        key = hash(text)
        if self.text_key.get(node_id) == key:
            self.rev_of[node_id] = rev
            return
        self.remove(node_id)
        self.rev_of[node_id] = rev
        self.text_key[node_id] = key
        counts = Counter(tokenize(text))
        slot = len(self.node_of)
        self.node_of.append(node_id)
        self.slot_of[node_id] = slot
        length = sum(counts.values())
        self.lengths.append(length)
        self.active.append(True)
        self.live += 1
        self.total_length += length
        for term, tf in counts.items():
            posting = self.postings.get(term)
            if posting is None:
                posting = self.postings[term] = (array(DOCS), array(TFS))
            docs, tfs = posting
            docs.append(slot)
            tfs.append(tf)
            self._arrays.pop(term, None)
        self._np_lengths = None
        self._changed()

    def remove(self, node_id: str) -> None:
        slot = self.slot_of.pop(node_id, None)
        self.rev_of.pop(node_id, None)
        self.text_key.pop(node_id, None)
        if slot is None:
            return
        self.active[slot] = False
        self.node_of[slot] = None
        self.live -= 1
        self.total_length -= self.lengths[slot]
        self._changed()
        if len(self.node_of) > 1024 and self.live < len(self.node_of) // 2:
            self._compact()

    def _compact(self) -> None:
        # Rebuild postings without removed slots; keeps memory and df honest after many removals.
        keep = [i for i, a in enumerate(self.active) if a]
        remap = np.full(len(self.node_of), -1, dtype=np.int32)
        remap[keep] = np.arange(len(keep), dtype=np.int32)
        postings = {}
        for term, (docs, tfs) in self.postings.items():
            new = remap[np.frombuffer(docs, dtype=np.int32)]
            alive = new >= 0
            if alive.any():
                postings[term] = (_posting_array(DOCS, new[alive].tobytes()),
                                  _posting_array(TFS, np.frombuffer(tfs, dtype=np.uint32)[alive].tobytes()))
        self.postings = postings
        self.node_of = [self.node_of[i] for i in keep]
        self.lengths = [self.lengths[i] for i in keep]
        self.active = [True] * len(keep)
        self.slot_of = {n: i for i, n in enumerate(self.node_of)}
        self._arrays.clear()
        self._np_lengths = None
        self._changed()

    def _changed(self) -> None:
        self._np_active, self._norm = None, None
        self._df.clear()
        self._weights.clear()

    def to_bytes(self) -> bytes:
        """The index for saving beside the HNSW index: a JSON header, then every posting list's slots and
        counts as raw 4-byte integers. Read-only (no compaction): a search may run meanwhile; callers hold
        the writers off (LexicalCache._save_lock)."""
        terms = list(self.postings)
        header = orjson.dumps({
            "version": SAVE_VERSION, "byteorder": sys.byteorder, "node_of": self.node_of, "lengths": self.lengths,
            "revs": [self.rev_of.get(n, 0) if n is not None else 0 for n in self.node_of],
            "terms": terms, "counts": [len(self.postings[t][0]) for t in terms]})
        docs = b"".join(self.postings[t][0].tobytes() for t in terms)
        tfs = b"".join(self.postings[t][1].tobytes() for t in terms)
        return b"".join((MAGIC, struct.pack("<Q", len(header)), header, docs, tfs))

    @classmethod
    def from_bytes(cls, data: bytes) -> "LexicalIndex":
        if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
            raise ValueError("not a lexical index file of this version")
        start = len(MAGIC) + 8
        (size,) = struct.unpack_from("<Q", data, len(MAGIC))
        raw = orjson.loads(data[start:start + size])
        if raw.get("version") != SAVE_VERSION or raw.get("byteorder") != sys.byteorder:
            raise ValueError(f"lexical index format {raw.get('version')} ({raw.get('byteorder')}-endian)")
        terms, counts = raw["terms"], raw["counts"]
        total = sum(counts)
        body = memoryview(data)[start + size:]
        if len(terms) != len(counts) or len(body) != 8 * total:
            raise ValueError("lexical index file is truncated")
        index = cls()
        index.node_of = list(raw["node_of"])
        index.lengths = list(raw["lengths"])
        index.active = [n is not None for n in index.node_of]  # removed documents are None
        index.slot_of = {n: i for i, n in enumerate(index.node_of) if n is not None}
        index.rev_of = {n: r for n, r in zip(index.node_of, raw["revs"]) if n is not None}
        at = 0
        for term, n in zip(terms, counts):
            index.postings[term] = (_posting_array(DOCS, body[4 * at:4 * (at + n)]),
                                    _posting_array(TFS, body[4 * (total + at):4 * (total + at + n)]))
            at += n
        index.live = len(index.slot_of)
        index.total_length = sum(length for length, a in zip(index.lengths, index.active) if a)
        if len(index.lengths) != len(index.node_of) or index.live != sum(index.active):
            raise ValueError("lexical index file is inconsistent")
        slots = np.frombuffer(body[:4 * total], dtype=np.int32)
        if total and (slots.min() < 0 or slots.max() >= len(index.node_of)):
            raise ValueError("lexical index file names a slot it does not have")
        return index

    def _term_arrays(self, term: str):
        arrays = self._arrays.get(term)
        if arrays is None:
            docs, tfs = self.postings[term]
            arrays = (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
            self._arrays[term] = arrays
        return arrays

    def term_weights(self, query: str) -> dict[str, float]:
        """The query's terms and their weight in this chat (BM25's idf: a name in every message weighs
        little); a term no memory has is left out. Remembered per text until the index changes: every
        request of a conversation weighs the same recent turns again."""
        weights = self._weights.get(query)
        if weights is None:
            weights = {}
            for term in dict.fromkeys(tokenize(query)):
                if term in self.postings:
                    df = self._live_df(term)
                    if df:
                        weights[term] = _idf(self.live, df)
            if len(query) <= WEIGHTS_TEXT_CHARS:
                if len(self._weights) >= WEIGHTS_KEPT:
                    self._weights.clear()
                self._weights[query] = weights
        return dict(weights)

    def _scores(self, query: str) -> np.ndarray | None:
        """BM25 of every slot for the query (dead slots 0), or None when no query term is indexed."""
        return self._scores_of_terms(tokenize(query))

    def _scores_of_terms(self, query_terms: list[str], *, common: bool = True) -> np.ndarray | None:
        """_scores for search terms already made; without the common terms' (see search) when `common` is False."""
        terms = [t for t in dict.fromkeys(query_terms) if t in self.postings]
        if not terms or self.live == 0:
            return None
        active = self._active_array()
        norm = self._length_norm()
        scores = np.zeros(len(self.node_of), dtype=np.float32)
        n = self.live
        common_df = self._common_df()
        for term in terms:
            df = self._live_df(term)
            if df == 0 or (df >= common_df and not common):
                continue
            docs, tfs = self._term_arrays(term)
            idf = _idf(n, df)
            scores[docs] += idf * tfs * (K1 + 1) / (tfs + (K1 if df >= common_df else norm[docs]))
        scores *= active
        return scores

    def _common_df(self) -> float:
        """The document frequency from which a term is common (COMMON_TERM_SHARE of the live memories)."""
        return COMMON_TERM_SHARE * self.live if COMMON_TERM_SHARE > 0 else math.inf

    def _live_df(self, term: str) -> float:
        df = self._df.get(term)
        if df is None:
            # Count live documents only: a re-indexed memory leaves a dead slot in the postings, and
            # counting it would lower the term's weight (scores must not depend on edit history).
            docs, _ = self._term_arrays(term)
            df = self._df[term] = float(self._active_array()[docs].sum())
        return df

    def _length_norm(self) -> np.ndarray:
        if self._norm is None:
            if self._np_lengths is None:
                self._np_lengths = np.asarray(self.lengths, dtype=np.float32)
            avg = max(self.total_length / max(self.live, 1), 1.0)
            self._norm = K1 * (1 - B + B * self._np_lengths / avg)
        return self._norm

    def _active_array(self) -> np.ndarray:
        if self._np_active is None:
            self._np_active = np.asarray(self.active, dtype=np.float32)
        return self._np_active

    def search(self, query: str, k: int, *, common: bool = True) -> list[tuple[str, float]]:
        """Top k (node_id, BM25 score) for the query, best first; only docs matching a term. With `common`
        False the terms of at least COMMON_TERM_SHARE of the memories are left out: the cheaper search of a
        long text (the recent turns' echo), where a term that common tells nothing and costs the most."""
        scores = self._scores_of_terms(tokenize(query), common=common)
        if scores is None:
            return []
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        node_of = self.node_of
        if hits.size > k:
            # Equal scores are ordered by node id, never by slot (slots depend on edit history), so of the
            # documents tied with the k-th score the smallest ids are kept. A speaker's name scores all her
            # messages alike (COMMON_TERM_SHARE): thousands can tie, and only the few needed are ordered.
            hit_scores = scores[hits]
            kth = -np.partition(-hit_scores, k - 1)[k - 1]
            above, tied = hits[hit_scores > kth], hits[hit_scores == kth]
            if above.size + tied.size > k:
                tied = np.asarray(heapq.nsmallest(k - above.size, tied.tolist(), key=node_of.__getitem__),
                                  dtype=hits.dtype)
            hits = np.concatenate([above, tied])
        # The scores as Python floats once (the same values), not a numpy scalar per comparison.
        ranked = sorted(zip(scores[hits].tolist(), hits.tolist()), key=lambda h: (-h[0], node_of[h[1]]))[:k]
        return [(node_of[i], score) for score, i in ranked]

    def score_docs(self, query: str, node_ids) -> dict[str, float]:
        """BM25 of these memories for the query (0 for one that matches no term or is not indexed)."""
        return self._scores_of(self._scores(query), node_ids)

    def score_terms(self, terms: list[str], node_ids) -> dict[str, float]:
        """score_docs for search terms already made (tokenize's), which are not stemmed again."""
        return self._scores_of(self._scores_of_terms(terms), node_ids)

    def _scores_of(self, scores: np.ndarray | None, node_ids) -> dict[str, float]:
        return {n: (float(scores[self.slot_of[n]]) if scores is not None and n in self.slot_of else 0.0)
                for n in node_ids}


_LEXICAL_COLUMNS = "id, fields, tags, archived, rev"
LEXICAL_SUFFIX = ".lex.bin"
LEGACY_SUFFIX = ".lex.json"   # format 2 and before: not read (rebuilt from the store), removed at the next save


def legacy_file(path: Path) -> Path:
    """Where an older version saved the index at `path` (a .lex.bin file)."""
    return path.with_name(path.name.removesuffix(LEXICAL_SUFFIX) + LEGACY_SUFFIX)


# 2: memories of messages are indexed as "Speaker: text" (migration m012); 3: binary postings; 4: a name paired
# with another across a comma is kept (m016); 5: Chinese vocatives are left out (m019); 6: the chat's names a
# message addresses are left out (m020); 7: English words are stemmed (Snowball); 8: ... once, not to a fixed point
SAVE_VERSION = 8


def _doc_text(row) -> str:
    fields = orjson.loads(row["fields"])
    tags = orjson.loads(row["tags"]) if row["tags"] else []
    return node_text(fields) + (" " + " ".join(tags) if tags else "")


class LexicalCache(PerChatCache[LexicalIndex]):
    """One LexicalIndex per chat: loaded from its saved file and reconciled with the store (or built from
    the store) on first use, kept in step by apply(), saved in the background like the HNSW index."""

    def __init__(self, store: Store, directory: Path | None = None):
        super().__init__(store, directory)
        # Saving serialises in a thread while apply() may run on the loop: they take turns.
        self._save_lock = threading.Lock()

    def path(self, chat_id: str) -> Path | None:
        base = self.file_base(chat_id)
        return base.with_name(base.name + LEXICAL_SUFFIX) if base is not None else None

    async def _load_or_build(self, chat_id: str) -> LexicalIndex:
        index = await self._load(chat_id)
        if index is None:
            # Built on the reader thread straight from the cursor: 100k rows are never all in memory.
            index = await self.store.read(lambda conn: self._build(conn.execute(
                f"SELECT {_LEXICAL_COLUMNS} FROM nodes WHERE chat_id = ? AND archived = 0", (chat_id,))))
            self.mark_dirty(chat_id)
        return index

    async def _load(self, chat_id: str) -> LexicalIndex | None:
        """The saved index brought in line with the store, or None (missing, damaged, old format)."""
        path = self.path(chat_id)
        if path is None or not path.exists():
            return None
        try:
            index = await asyncio.to_thread(lambda: LexicalIndex.from_bytes(path.read_bytes()))
        except (OSError, ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
            log.info("lexical index of chat %r not usable (%s); rebuilding", chat_id, exc)
            return None
        current = dict(await self.store.read(lambda conn: conn.execute(
            "SELECT id, rev FROM nodes WHERE chat_id = ? AND archived = 0", (chat_id,)).fetchall()))
        stale = [n for n, rev in current.items() if index.rev_of.get(n) != rev]
        for node_id in [n for n in index.slot_of if n not in current]:
            index.remove(node_id)
        if stale:
            for row in await self.store.read(
                    lambda conn: nodes_by_ids(conn, chat_id, stale, columns=_LEXICAL_COLUMNS)):
                index.upsert(row["id"], _doc_text(row), row["rev"])
        if stale or len(index) != len(current):
            self.mark_dirty(chat_id)
        return index

    @staticmethod
    def _build(rows) -> LexicalIndex:
        index = LexicalIndex()
        for row in rows:
            index.upsert(row["id"], _doc_text(row), row["rev"])
        return index

    async def _apply(self, chat_id: str, index: LexicalIndex, node_ids: list[str]) -> None:
        rows = {r["id"]: r for r in await self.store.read(
            lambda conn: nodes_by_ids(conn, chat_id, node_ids, columns=_LEXICAL_COLUMNS))}
        with self._save_lock:
            for node_id in node_ids:
                row = rows.get(node_id)
                if row is None or row["archived"]:
                    index.remove(node_id)
                else:
                    index.upsert(node_id, _doc_text(row), row["rev"])

    def _save(self, chat_id: str, index: LexicalIndex) -> None:
        """Atomically: temp file, then rename."""
        path = self.path(chat_id)
        with self._save_lock:
            data = index.to_bytes()
        tmp = path.with_name(path.name + ".tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
        legacy_file(path).unlink(missing_ok=True)

    def _delete_files(self, chat_id: str) -> None:
        self.path(chat_id).unlink(missing_ok=True)
        legacy_file(self.path(chat_id)).unlink(missing_ok=True)
