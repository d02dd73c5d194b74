"""Fusion and the final order of a recall's candidates.

Weighted reciprocal-rank fusion of the candidate lists (keywords, vectors, the days asked about, the graph),
normalised so 1.0 is "first in every list"; a little importance and recency; the DNA weight (a memory left
unused fades in rank before it is ever forgotten). Then:
- for an input that asks, a message that only asks keeps a share of its score (tuning.ASKING_SHARE): its form
  matches the question, and what answers a question is a statement;
- the message before or after a strong hit rises to a share of its score (an answer follows its question);
- one memory per message: the chunks of a long message are one piece of evidence, its best chunk speaks for it;
- near-duplicates (cosine >= tuning.DUPLICATE_SIMILARITY) give way to the better one;
- ties break by node id, so a ranking never depends on insertion order.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np
import orjson

from ..graph.model import Node, node_from_row
from ..graph.schema import NAMED_TYPES
from . import tuning
from .candidates import Ranking
from .render import has_content
from .snippet import sentences

RRF_K = 60
NEIGHBOUR_SEEDS = 10


@dataclasses.dataclass
class Scored:
    node: Node
    score: float
    parts: dict[str, float]
    core: bool = False


def fuse(rankings: list[Ranking], k: int = RRF_K) -> dict[str, float]:
    """Weighted RRF, normalised: 1.0 for a memory first in every list."""
    fused: dict[str, float] = {}
    for r in rankings:
        for rank, node_id in enumerate(r.ids):
            fused[node_id] = fused.get(node_id, 0.0) + r.weight / (k + rank + 1)
    best = sum(r.weight for r in rankings) / (k + 1) or 1.0
    return {n: v / best for n, v in fused.items()}


def _has_content(row) -> bool:
    # Only name anchors (characters, entities, places) can lack content: parse just those.
    return row["type"] not in NAMED_TYPES or has_content(orjson.loads(row["fields"]))


def score_rows(fused: dict[str, float], rows: dict, rankings: list[Ranking], *, length: int,
               skip_from: float, skip_before: int, importance_weight: float | None = None,
               recency_weight: float | None = None) -> dict[str, tuple[float, dict]]:
    """The final score of each fused candidate that may be shown: (score, parts). Memories still in the prompt
    (the last messages, the greeting while the chat is short) and core memories (they have their own
    place in the block) are left out."""
    w_imp = tuning.IMPORTANCE_WEIGHT if importance_weight is None else importance_weight
    w_rec = tuning.RECENCY_WEIGHT if recency_weight is None else recency_weight

    def recency(seq_to) -> float:
        if seq_to is None or length == 0:
            return 0.5
        return 1.0 / (1.0 + max(0, length - 1 - seq_to) / 100.0)

    raw = {r.name: r.scores for r in rankings}
    # The lists by kind, picked out once (not per candidate): each candidate's best raw score in each kind.
    vector_lists = [raw[n] for n in raw if n.startswith("vec")]
    lexical_lists = [raw[n] for n in raw if n.startswith("lex")]
    extra_lists = [(name, raw[name]) for name in ("time", "graph", "latest", "subject") if name in raw]
    best_vector, best_lexical = _best_of(vector_lists), _best_of(lexical_lists)
    out = {}
    for node_id, fusion in fused.items():
        row = rows.get(node_id)
        if row is None or row["pinned"]:
            continue
        seq_from, seq_to = row["seq_from"], row["seq_to"]
        if seq_from is not None and (seq_from >= skip_from or seq_to < skip_before):
            continue
        if not _has_content(row):
            continue
        parts = {"fusion": fusion, "importance": row["importance"] / 10, "recency": recency(seq_to),
                 "vector": best_vector(node_id), "lexical": best_lexical(node_id)}
        for name, listed in extra_lists:
            if node_id in listed:
                parts[name] = listed[node_id]
        score = (fusion + w_imp * parts["importance"] + w_rec * parts["recency"]) * (0.5 + 0.5 * row["weight"])
        out[node_id] = (score, parts)
    return out


def _best_of(lists: list[dict[str, float]]):
    """node id -> its best score in these lists (0.0 where it is in none, or there are none)."""
    if not lists:
        return lambda node_id: 0.0
    if len(lists) == 1:   # the usual one-part question: one lookup, no list to build
        only = lists[0]
        return lambda node_id: only.get(node_id, 0.0)
    return lambda node_id: max([s.get(node_id, 0.0) for s in lists])


def found_by_search(rankings: list[Ranking], *, min_similarity: float | None = None,
                    vector_margin: float | None = None, min_bm25: float | None = None) -> set[str]:
    """The memories the question itself finds: one that shares no word with it and comes by vector alone
    must stand out from the vector candidates; one found by keywords alone needs more than a common word;
    a memory of the days asked about counts as found. Graph and neighbour candidates grow only from these,
    so a question about nothing in the story recalls nothing."""
    vector_sims = [v for r in rankings if r.name.startswith("vec") for v in r.scores.values()]
    floor = tuning.MIN_SIMILARITY if min_similarity is None else min_similarity
    margin = tuning.VECTOR_MARGIN if vector_margin is None else vector_margin
    min_bm25 = tuning.MIN_BM25 if min_bm25 is None else min_bm25
    if len(vector_sims) >= 5:
        floor = max(floor, _median(vector_sims) + margin)
    found: set[str] = set()
    for r in rankings:
        if r.name == "time":
            found.update(r.ids)
        elif r.name.startswith("vec"):
            found.update(n for n, v in r.scores.items() if v >= floor)
        elif r.name.startswith("lex"):
            found.update(n for n, v in r.scores.items() if v >= min_bm25)
    return found


def _median(values: list[float]) -> float:
    """numpy.median's value (the middle one, or the mean of the two middle ones), without an array for a
    hundred floats."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def relevant(scores: dict[str, tuple[float, dict]], found: set[str], min_similarity: float,
             neighbours=()) -> dict:
    """What may be shown: what the search found; the neighbours grown from it (lifted or not: one that scores
    above its share already is shown too); the memories the graph reached from it that touch the question's
    topic at all (a word in common, or a vector above the plain floor)."""
    neighbours = set(neighbours)

    def topical(parts) -> bool:
        return parts["lexical"] > 0 or parts["vector"] >= min_similarity

    return {node_id: value for node_id, value in scores.items()
            if node_id in found or node_id in neighbours or value[1].get("neighbour")
            or (value[1].get("graph") and topical(value[1]))}


def may_show(candidates, found: set[str], neighbour_of: dict[str, str], graph_members, rankings: list[Ranking],
             min_similarity: float) -> list[str]:
    """The candidates `relevant` could keep, known from the rankings before any row is read (only their rows
    are fetched): what the search found, the neighbours, and the graph members that touch the topic."""
    lexical = [r.scores for r in rankings if r.name.startswith("lex")]
    vector = [r.scores for r in rankings if r.name.startswith("vec")]
    members = set(graph_members)

    def topical(node_id: str) -> bool:
        return (any(s.get(node_id, 0.0) > 0 for s in lexical)
                or any(s.get(node_id, 0.0) >= min_similarity for s in vector))

    return [n for n in dict.fromkeys([*candidates, *members, *neighbour_of])
            if n in found or n in neighbour_of or (n in members and topical(n))]


_CLOSERS = "\"'”’」』)）*"


def _is_question(sentence: str) -> bool:
    return sentence.rstrip(_CLOSERS).endswith(("?", "？"))   # closing quotes aside


def asks(text: str) -> bool:
    """The text ends by asking: its last sentence is a question."""
    said = sentences(text)
    return bool(said) and _is_question(said[-1])


def only_asks(text: str) -> bool:
    """Every sentence of the text is a question: it tells nothing."""
    said = sentences(text)
    return bool(said) and all(map(_is_question, said))


def of_one_message(row) -> bool:
    """The memory is a message's own (the heuristic per-message event), not an extraction from several."""
    return row["type"] == "event" and row["source"] == "heuristic" and row["seq_from"] is not None


def _lower_in_window(scores: dict[str, tuple[float, dict]], rows: dict, pick, share: float, *, window: int,
                     part: str) -> dict[str, tuple[float, object]]:
    """The memories `pick(ids)` -> {id: what it read} picks keep `share` of their score (noted as `part`). Only
    the messages' own memories that reach the first `window` are asked about: lowering one lets a lower one rise
    into the window, and it is asked about in turn, until the window holds none unasked. Returns the lowered
    ones' unlowered score and what `pick` read."""
    checked: set[str] = set()
    lowered: dict[str, tuple[float, object]] = {}
    while True:
        first = heapq.nsmallest(window, scores, key=lambda n: (-scores[n][0], n))
        unchecked = [n for n in first if n not in checked and of_one_message(rows[n])]
        if not unchecked:
            return lowered
        checked.update(unchecked)
        for node_id, read in pick(unchecked).items():
            score, parts = scores[node_id]
            scores[node_id] = (score * share, {**parts, part: share})
            lowered[node_id] = (score, read)


def lower_askers(scores: dict[str, tuple[float, dict]], rows: dict, only_asking, share: float, *,
                 window: int, names_topic=None) -> dict[str, float]:
    """The memories of messages that only ask keep `share` of their score, those in the first `window`
    (`only_asking(ids)` -> {id: message text} of those of them whose message only asks, a read; see
    _lower_in_window: in a Chinese chat with forty "知道他是哪年出生的吗？", a fixed first 30 let the next ones
    take their place). Returns the unlowered scores of the lowered questions that `names_topic(text)`: the
    reply to a question about what the input asks about answers this one too, so its neighbours rise from
    that score (lift_neighbours' `lift_from`)."""
    if share >= 1.0:
        return {}
    lowered = _lower_in_window(scores, rows, only_asking, share, window=window, part="asking")
    if names_topic is None:
        return {}
    return {node_id: score for node_id, (score, text) in lowered.items() if names_topic(text)}


def lower_other_speakers(scores: dict[str, tuple[float, dict]], rows: dict, said_by_others, share: float, *,
                         window: int) -> None:
    """For an input about one speaker: the memories of the other speakers' messages keep `share` of their
    score, those in the first `window` (`said_by_others(ids)` -> {id: anything} of those of them said by
    another speaker, a read; see _lower_in_window)."""
    if share < 1.0:
        _lower_in_window(scores, rows, said_by_others, share, window=window, part="speaker")


def lift_neighbours(scores: dict[str, tuple[float, dict]], neighbour_of: dict[str, str], share: float,
                    lift_from: dict[str, float] | None = None) -> None:
    """A neighbour of a strong hit rises to `share` of that hit's score (if it is not higher already);
    `lift_from` gives some hits another score to lift from (lower_askers)."""
    if share <= 0:
        return
    lift_from = lift_from or {}
    for neighbour, seed in neighbour_of.items():
        if neighbour in scores and seed in scores:
            lifted = share * lift_from.get(seed, scores[seed][0])
            score, parts = scores[neighbour]
            if lifted > score:
                scores[neighbour] = (lifted, {**parts, "neighbour": round(lifted - score, 4)})


def order(scores: dict[str, tuple[float, dict]], rows: dict, *, limit: int, vectors=None,
          duplicate_similarity: float = 1.0, node_rows=None) -> list[Scored]:
    """Best first, one memory per message (the per-message memories), a near-duplicate of one already
    chosen (cosine >= duplicate_similarity) left out; stops at `limit`. Vectors (`vectors(ids)` -> {id:
    vector}) are read only for what may be shown, a few at a time, and a memory becomes a Node only once
    it is chosen: from `node_rows(ids)` -> {id: row} when `rows` hold only what ranks them (a chosen
    memory it no longer finds is left out), else from `rows`."""
    ids = sorted(scores, key=lambda n: (-scores[n][0], n))
    dedupe = vectors is not None and duplicate_similarity < 1.0
    chosen: list[str] = []
    kept: list[np.ndarray] = []
    known: dict[str, np.ndarray] = {}
    asked: set[str] = set()
    messages_taken: set[int] = set()
    for i, node_id in enumerate(ids):
        row = rows[node_id]
        if of_one_message(row):
            if row["seq_from"] in messages_taken:
                continue
            messages_taken.add(row["seq_from"])
        if dedupe:
            if node_id not in asked:
                batch = [n for n in ids[i:i + limit + 4] if n not in asked]
                asked.update(batch)
                known.update(vectors(batch) or {})
            vec = known.get(node_id)
            if vec is not None:
                if kept and float(np.max(np.asarray(kept) @ vec)) >= duplicate_similarity:
                    continue
                kept.append(vec)
        chosen.append(node_id)
        if len(chosen) >= limit:
            break
    full = rows if node_rows is None else node_rows(chosen)
    return [Scored(node_from_row(full[n]), *scores[n]) for n in chosen if n in full]
