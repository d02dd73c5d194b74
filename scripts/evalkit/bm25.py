"""Plain Okapi BM25 over raw chat messages: the keyword baseline of the recall evaluation.

Written here on purpose (not the product's index): lowercased Latin/digit words minus a short stopword
list, no stemming; Chinese (and other CJK) runs become overlapping character bigrams, a run of one
character stays a unigram. Lucene's idf, k1 = 1.2, b = 0.75.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

K1 = 1.2
B = 0.75
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKENS = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")
STOPWORDS = frozenset("""
a an the and or but if of to in on at by for with from as is are was were be been am do does did i me my you your
he him his she her it its we us our they them their this that these those what which who whom when where why how
not no so than too very can could would should will just s t d ll m re ve
""".split())


def terms(text: str) -> list[str]:
    """Index terms of a text."""
    out: list[str] = []
    for match in _TOKENS.finditer(text.lower()):
        tok = match.group(0)
        if _IS_CJK.match(tok):
            out.extend([tok] if len(tok) == 1 else [tok[i:i + 2] for i in range(len(tok) - 1)])
        elif tok not in STOPWORDS:
            out.append(tok)
    return out


class BM25:
    """An index over a fixed list of documents; `scores(query)` gives one score per document."""

    def __init__(self, documents: list[str]):
        self.n = len(documents)
        self.lengths = np.zeros(self.n, dtype=np.float64)
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for doc_id, text in enumerate(documents):
            counts = Counter(terms(text))
            self.lengths[doc_id] = sum(counts.values())
            for term, tf in counts.items():
                self.postings.setdefault(term, []).append((doc_id, tf))
        self.avg_length = float(self.lengths.mean()) if self.n else 0.0

    def idf(self, term: str) -> float:
        df = len(self.postings.get(term, ()))
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n, dtype=np.float64)
        if not self.n:
            return out
        norm = K1 * (1 - B + B * self.lengths / (self.avg_length or 1.0))
        for term, qtf in Counter(terms(query)).items():
            posting = self.postings.get(term)
            if not posting:
                continue
            ids = np.fromiter((d for d, _ in posting), dtype=np.int64, count=len(posting))
            tfs = np.fromiter((tf for _, tf in posting), dtype=np.float64, count=len(posting))
            out[ids] += qtf * self.idf(term) * tfs * (K1 + 1) / (tfs + norm[ids])
        return out


def ranking(scores: np.ndarray, limit: int | None = None) -> list[int]:
    """Document ids by descending score, ties by id; documents scoring 0 are left out."""
    order = np.lexsort((np.arange(len(scores)), -scores))
    order = [int(i) for i in order if scores[i] > 0]
    return order[:limit] if limit else order


def rrf(rankings: list[tuple[float, list[int]]], k: int = 60) -> list[int]:
    """Reciprocal-rank fusion of (weight, ranking) pairs; ties by id."""
    fused: dict[int, float] = {}
    for weight, ranked in rankings:
        for rank, doc in enumerate(ranked):
            fused[doc] = fused.get(doc, 0.0) + weight / (k + rank + 1)
    return sorted(fused, key=lambda d: (-fused[d], d))
