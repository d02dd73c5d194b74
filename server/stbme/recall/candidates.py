"""The candidates of a recall: ranked lists of memories, before fusion (recall/ranking.py).

- Keywords (BM25) and vectors (HNSW) for each part of the question, without thresholds: a weak signal in one
  list may still be the answer, and fusion weighs the lists.
- The days the question names: the memories of those days (said then, or naming that day), ranked by the
  topic words. A question about "the day before the big storm" finds the storm's day first (the day whose
  memories match the phrase best), then the day before.
- The graph around the first hits: the memories of the people and things they name (less known names only:
  the main characters are in everything), ranked by the topic; multi-hop evidence is found this way.
- The subject of the recent turns, for an input that names none ("导演是谁呢？" after turns about
  《模仿游戏》, "and who directed it?"): what was said while that subject was talked about before, ranked by
  the input's own words. A talk names its subject once, then speaks of its director, its year, its cast.
  Recent turns that name no subject point at the passage their words echo, which serves the same way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Callable

import numpy as np
import orjson

from ..graph.attribution import addressed_names, without_vocatives
from ..graph.schema import NAMED_TYPES
from ..index import ChatIndex, LexicalIndex
from ..pipeline.heuristic import candidate_names, mentions_name, speakers_before
from ..store import Store
from ..store.queries import count_events, nodes_by_ids, nodes_on_days
from ..tokens import is_common_word
from . import tuning
from .query import QueryPlan
from ..pipeline.timeline import DateSpan

ANCHOR_HITS = 30            # keyword hits read to find the day an anchor phrase names
EXPAND_SEEDS = 8            # first hits whose names are followed
HUB_DEGREE = 60             # a name in more memories than this is a main character: not followed,
HUB_SHARE = 0.1             # nor one in more than this share of a short chat's events (at least HUB_FLOOR)
HUB_FLOOR = 8
EXPANDED_PER_NAME = 40
SUBJECT_NAMES = 2           # the recent turns' subjects followed (a turn's longest names first)
_NAMED_MARKS = ",".join("?" * len(NAMED_TYPES))


@dataclasses.dataclass
class Ranking:
    """One ranked list: memory ids best first, with the raw score that ranked them (BM25 or cosine)."""
    name: str
    weight: float
    ids: list[str]
    scores: dict[str, float]


def ranked(name: str, weight: float, scores: dict[str, float], limit: int | None = None) -> Ranking:
    """A list from raw scores (ties by id), leaving out memories that score nothing."""
    order = sorted((n for n, v in scores.items() if v > 0), key=lambda n: (-scores[n], n))
    return Ranking(name, weight, order[:limit] if limit else order, scores)


def similarities(index: ChatIndex | None, qvec: np.ndarray | None, ids) -> dict[str, float]:
    """Exact cosine of these memories to the query vector (those in the index)."""
    if index is None or qvec is None:
        return {}
    known = [n for n in ids if n in index]
    if not known:
        return {}
    return dict(zip(known, (index.vectors(known) @ qvec).tolist()))


def by_topic(name: str, weight: float, ids, *, lexical: LexicalIndex, index: ChatIndex | None,
             qvec: np.ndarray | None, topic: str, rrf_k: int) -> Ranking:
    """Rank a given set of memories by the topic: their keyword and vector rankings fused."""
    ids = list(ids)
    return _fuse_topic(name, weight, lexical.score_docs(topic, ids) if topic.strip() else None,
                       similarities(index, qvec, ids), rrf_k)


def _fuse_topic(name: str, weight: float, bm25: dict[str, float] | None, cosine: dict[str, float],
                rrf_k: int) -> Ranking:
    lex = ranked("lex", 2.0, bm25) if bm25 is not None else None
    vec = ranked("vec", 1.0, cosine)
    fused: dict[str, float] = {}
    for part in (lex, vec):
        for r, node_id in enumerate(part.ids if part else ()):
            fused[node_id] = fused.get(node_id, 0.0) + part.weight / (rrf_k + r + 1)
    return ranked(name, weight, fused)


async def anchor_day(store: Store, chat_id: str, lexical: LexicalIndex, phrase: str) -> dt.date | None:
    """The day an event phrase names ("the big storm"): the day whose memories match it best, summed over
    them (an event is talked about most on its own day, and mentioned in passing on others)."""
    hits = dict(lexical.search(phrase, ANCHOR_HITS))
    if not hits:
        return None
    rows = await store.read(lambda conn: nodes_by_ids(conn, chat_id, list(hits), columns="id, story_time"))
    per_day: dict[str, float] = {}
    for row in rows:
        day = (orjson.loads(row["story_time"]) or {}).get("date") if row["story_time"] else None
        if isinstance(day, str):
            per_day[day] = per_day.get(day, 0.0) + hits[row["id"]]
    if not per_day:
        return None
    best = max(per_day, key=lambda d: (per_day[d], d))
    return dt.date.fromisoformat(best)


async def memories_of_days(store: Store, chat_id: str, spans: list[DateSpan]) -> dict[str, float]:
    """Memories of these days: 1 for the day a memory was said on, less for a day its text names (a mention
    spread over a week counts a seventh); the first span counts most, alternatives less."""
    weights: dict[str, float] = {}
    for rank, span in enumerate(spans):
        rows = await store.read(lambda conn, s=span: nodes_on_days(conn, chat_id, s.start.isoformat(),
                                                                   s.end.isoformat()))
        for node_id, _day, mentioned in rows:
            value = (0.5 if mentioned else 1.0) / (rank + 1)
            weights[node_id] = max(weights.get(node_id, 0.0), value)
    return weights


async def told_after(store: Store, chat_id: str, span: DateSpan, days: int) -> set[str]:
    """The memories said in the `days` days after the span."""
    if days <= 0:
        return set()
    first, last = span.end + dt.timedelta(days=1), span.end + dt.timedelta(days=days)
    rows = await store.read(lambda conn: nodes_on_days(conn, chat_id, first.isoformat(), last.isoformat()))
    return {node_id for node_id, _day, mentioned in rows if not mentioned}


async def time_ranking(plan: QueryPlan, *, store: Store, chat_id: str, lexical: LexicalIndex,
                       index: ChatIndex | None, qvec: np.ndarray | None, weight: float, rrf_k: int) -> Ranking | None:
    """The memories of the days the question names, ranked by its topic; None when it names no day."""
    when = plan.time
    if when is None or weight <= 0 or when.span is None:
        return None
    days = await memories_of_days(store, chat_id, [when.span, *when.alternatives[:2]])
    topic = plan.topic.strip()
    # What happened on a calendar date is often told the next day ("Had a great night watching the fight",
    # past midnight): those memories count as naming the day, when the topic finds them by keywords (below).
    # Only for a date: a day reckoned from now or from an event ("yesterday", "the day before the storm")
    # gained nothing by it on the public sets, which have no such questions, and lost on the generated set.
    later = set()
    if topic and when.kind == "absolute":
        later = await told_after(store, chat_id, when.span, tuning.DAYS_TOLD_AFTER) - set(days)
    if not days and not later:
        return None
    bm25 = lexical.score_docs(plan.topic, [*days, *later]) if topic else None
    if later and bm25 is not None:
        days.update((n, 0.5) for n in later if bm25.get(n, 0.0) >= tuning.MIN_BM25)
        bm25 = {n: v for n, v in bm25.items() if n in days}
    if not days:
        return None
    cosine = similarities(index, qvec, list(days))
    if tuning.TIME_NEEDS_TOPIC and bm25 is not None:
        # "What did Kevin watch on the night of the 10th?": of that day's memories, those that share more
        # than a common word with the question, not all the day's small talk. An answer told a day later
        # ("Had a great night watching the fight", past midnight) then ranks by its words against fewer.
        # A question that names only the day keeps the whole day.
        on_topic = {n for n in days if bm25.get(n, 0.0) >= tuning.MIN_BM25}
        if on_topic:
            days = {n: v for n, v in days.items() if n in on_topic}
            bm25 = {n: v for n, v in bm25.items() if n in on_topic}
            cosine = {n: v for n, v in cosine.items() if n in on_topic}
    topical = _fuse_topic("time", weight, bm25, cosine, rrf_k)
    # A memory said on the day outranks one that only names it, at equal topic rank.
    scores = {n: v * (0.5 + 0.5 * days[n]) for n, v in topical.scores.items()}
    return ranked("time", weight, scores)


# Edges looked up by where they point. Without ANALYZE statistics SQLite answers `chat_id = ? AND to_id IN
# (...)` from the (chat_id, from_id, ...) index, reading every edge of the chat: 15-20 ms a recall at 5,000
# messages instead of 3 (the 5,000-message chat of scripts/bench_ingest.py).
BY_TARGET = "INDEXED BY edges_to"


def _names_of(conn, chat_id: str, seeds: list[str]) -> dict[str, int]:
    """The names (character, entity, location anchors) the seeds involve, with how many memories each is in."""
    marks = ",".join("?" * len(seeds))
    anchors = [r[0] for r in conn.execute(
        f"SELECT DISTINCT e.from_id FROM edges e {BY_TARGET} JOIN nodes n ON n.id = e.from_id WHERE e.chat_id = ? AND"
        f" e.to_id IN ({marks}) AND e.relation = 'involved_in' AND e.invalid_at IS NULL"
        f" AND n.type IN ({_NAMED_MARKS})", (chat_id, *seeds, *NAMED_TYPES))]
    return {anchor: _degree(conn, chat_id, anchor) for anchor in anchors}


def _degree(conn, chat_id: str, anchor: str) -> int:
    """How many memories a name is in, counted up to one past HUB_DEGREE."""
    return conn.execute("SELECT count(*) FROM (SELECT 1 FROM edges WHERE chat_id = ? AND from_id = ? AND"
                        " relation = 'involved_in' LIMIT ?)", (chat_id, anchor, HUB_DEGREE + 1)).fetchone()[0]


def _members(conn, chat_id: str, anchors: list[str]) -> list[str]:
    out: list[str] = []
    for anchor in anchors:
        out += [r[0] for r in conn.execute(
            "SELECT to_id FROM edges WHERE chat_id = ? AND from_id = ? AND relation = 'involved_in'"
            " AND invalid_at IS NULL ORDER BY created_at DESC LIMIT ?", (chat_id, anchor, EXPANDED_PER_NAME))]
    return out


def _hub(conn, chat_id: str) -> int:
    """The most memories a name may be in and still be followed: past it, it is a main character's."""
    return min(HUB_DEGREE, max(HUB_FLOOR, int(HUB_SHARE * count_events(conn, chat_id, int(HUB_DEGREE / HUB_SHARE)))))


def graph_members(conn, chat_id: str, seeds: list[str]) -> list[str]:
    """The memories of the less common names the first hits (seeds) involve (a read: pass it a connection)."""
    seeds = seeds[:EXPAND_SEEDS]
    if not seeds:
        return []
    degree = _names_of(conn, chat_id, seeds)
    hub = _hub(conn, chat_id)
    rare = [a for a, d in sorted(degree.items(), key=lambda item: (item[1], item[0])) if d <= hub]
    return _members(conn, chat_id, rare) if rare else []


_CJK = re.compile(r"[\u4e00-\u9fff]")
_BEFORE_A_SENTENCE = ("", ".", "!", "?", "。", "！", "？", '"', "“", "*", "(")   # what a sentence's first word follows
_EVERY_MESSAGE = 1 << 62


def _unaddressed(conn, chat_id: str, text: str, speakers=None) -> str:
    """The input without the names it only addresses ("Kate, when did you ...", "艾琳，后来呢？": a Chinese name
    of the chat's, addressed, as the memories leave it out). `speakers`: the chat's names, if already read."""
    if not _CJK.search(text):
        return without_vocatives(text)
    names = speakers if speakers is not None else speakers_before(conn, chat_id, _EVERY_MESSAGE)
    return without_vocatives(text, addressed=addressed_names(text, "", names))


def _anchors(conn, chat_id: str) -> list[tuple[str, str]]:
    """The chat's names (character, entity, location anchors) as (name, node id), the longest first:
    "安娜·卡列尼娜" before "安娜"."""
    return sorted(((str(orjson.loads(fields).get("name") or ""), node_id) for node_id, fields in
                   conn.execute("SELECT id, fields FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
                                f" ({_NAMED_MARKS})", (chat_id, *NAMED_TYPES))),
                  key=lambda a: (-len(a[0]), a))


def names_mentioned(conn, chat_id: str, text: str) -> list[str]:
    """The chat's names the input mentions other than by addressing them ("Wait. Who is Dagny seeing these
    days?" -> Dagny), the longest first. A read: pass it a connection."""
    said = _unaddressed(conn, chat_id, text).casefold()
    return [name for name, _ in _anchors(conn, chat_id) if name and mentions_name(name.casefold(), said)]


def subject_members(conn, chat_id: str, text: str, recent: list[str], after: int, *,
                    echoed: Callable[[], list[str]] | None = None, count: int = 0,
                    before: float = float("inf")) -> list[str]:
    """For an input that names nobody (its vocatives aside) and leans on the recent turns (newest first):
    the memories of the messages from each mention of the newest turn's known names to `after` messages
    later, for at most SUBJECT_NAMES of them, less common names only (a main character is in everything).
    When no recent turn names one, the same from the first `count` of `echoed()` (the memories the recent
    turns' words find best: the passage they echo, searched only then) said before message `before` (the
    prompt's own). Empty when the input names someone itself: its own words find that. A read: pass it a
    connection."""
    said = _unaddressed(conn, chat_id, text)
    if candidate_names(said):
        return []
    said = said.casefold()
    anchors = _anchors(conn, chat_id)
    if any(mentions_name(name.casefold(), said) for name, _ in anchors):
        return []
    hub, subjects = _hub(conn, chat_id), []
    for turn in recent:
        # As written: "a rose" in a turn is no mention of "Rose".
        subjects = [a for name, a in anchors if mentions_name(name, turn)
                    and _degree(conn, chat_id, a) <= hub][:SUBJECT_NAMES]
        if subjects:
            break
    mentions = sorted({row[0] for a in subjects for row in conn.execute(
        "SELECT n.seq_to FROM edges e JOIN nodes n ON n.id = e.to_id WHERE e.chat_id = ? AND e.from_id = ? AND"
        " e.relation = 'involved_in' AND e.invalid_at IS NULL AND n.type = 'event' AND n.seq_to IS NOT NULL",
        (chat_id, a))})
    hits = echoed() if not subjects and echoed is not None and count > 0 else []
    if hits:
        said = {r["id"]: r["seq_to"] for r in nodes_by_ids(conn, chat_id, hits, columns="id, seq_to")}
        mentions = sorted(set([said[n] for n in hits if said.get(n) is not None and said[n] < before][:count]))
    spans: list[list[int]] = []
    for seq in mentions:   # overlapping windows read as one
        if spans and seq <= spans[-1][1] + 1:
            spans[-1][1] = seq + after
        else:
            spans.append([seq, seq + after])
    return [row[0] for lo, hi in spans for row in conn.execute(
        "SELECT id FROM nodes WHERE chat_id = ? AND seq_to BETWEEN ? AND ? AND type = 'event' AND archived = 0",
        (chat_id, lo, hi))]


def speaker_asked_about(conn, chat_id: str, text: str) -> str | None:
    """The one speaker of the chat the input names other than by addressing them ("When did Nicolas go to the
    cinema?"), or None. What a person did is told by that person: of the evidence of the public sets' tuned-on
    questions that name one speaker, 97% is that speaker's own messages. A read: pass it a connection."""
    speakers = speakers_before(conn, chat_id, _EVERY_MESSAGE)
    said = _unaddressed(conn, chat_id, text, speakers)
    # The name as stored (the messages are looked up by it), matched without the spaces around it.
    named = [s for s in speakers if s and len(s.strip()) >= 2 and _names_speaker(s.strip(), said)]
    return named[0] if len(named) == 1 else None


def _names_speaker(speaker: str, said: str) -> bool:
    """Does the input name this speaker, by the whole name or the first of several words ("Fahim" for "Fahim
    Khan")? A name that is also a common word ("Will", "Hope") only as written and inside a sentence ("Will you
    ...?" and "I hope so" name nobody); another in any case ("what did elena say?")."""
    words = speaker.split()
    for name in dict.fromkeys([speaker, words[0]] if len(words) > 1 and speaker.isascii() else [speaker]):
        if not is_common_word(name):
            if mentions_name(name.casefold(), said.casefold()):
                return True
        elif any(said[:m.start()].rstrip()[-1:] not in _BEFORE_A_SENTENCE
                 for m in re.finditer(rf"(?<!\w){re.escape(name)}(?!\w)", said)):
            return True
    return False


def graph_ranking(members: list[str], seeds: list[str], plan: QueryPlan, *, lexical: LexicalIndex,
                  index: ChatIndex | None, qvec: np.ndarray | None, weight: float, rrf_k: int) -> Ranking | None:
    """The graph members (graph_members) ranked by the topic (multi-hop)."""
    seeds = seeds[:EXPAND_SEEDS]
    if weight <= 0 or not seeds or not set(members) - set(seeds):
        return None
    # The seeds are ranked with the names' memories: they are their own neighbourhood, and a hit left out of
    # this list would lose to the memories around it.
    return by_topic("graph", weight, set(members) | set(seeds), lexical=lexical, index=index, qvec=qvec,
                    topic=plan.topic, rrf_k=rrf_k)


NEIGHBOUR_KINDS = ("exchange", "prev_reply", "next_reply", "next_same", "prev_same")
_SIDES = ("SELECT e.from_id, e.to_id, ms.name, mo.name, ms.role, mo.role, 'prev' FROM edges e"
          " JOIN nodes ns ON ns.id = e.from_id JOIN messages ms ON ms.chat_id = e.chat_id AND ms.idx = ns.seq_from"
          " JOIN nodes no ON no.id = e.to_id JOIN messages mo ON mo.chat_id = e.chat_id AND mo.idx = no.seq_from"
          " WHERE e.chat_id = ? AND e.from_id IN ({marks}) AND e.relation = 'replies_to' AND ns.seq_from != no.seq_from",
          f"SELECT e.to_id, e.from_id, ms.name, mo.name, ms.role, mo.role, 'next' FROM edges e {BY_TARGET}"
          " JOIN nodes ns ON ns.id = e.to_id JOIN messages ms ON ms.chat_id = e.chat_id AND ms.idx = ns.seq_from"
          " JOIN nodes no ON no.id = e.from_id JOIN messages mo ON mo.chat_id = e.chat_id AND mo.idx = no.seq_from"
          " WHERE e.chat_id = ? AND e.to_id IN ({marks}) AND e.relation = 'replies_to' AND ns.seq_from != no.seq_from")


def message_neighbours(conn, chat_id: str, seeds: list[str], kinds=("exchange",)) -> dict[str, str]:
    """The memories of the messages next to each seed's that count as its neighbours: {neighbour id: seed
    id}, through the `replies_to` edges of the per-message memories. Kinds:
    - exchange: a user's message and the reply to it (an answer follows its question, a reply needs what
      it answers); a user's next message starts a new exchange and is not one;
    - prev_reply / next_reply: the message before / after, by the other speaker;
    - next_same / prev_same: the message after / before, by the same speaker (one thought, two messages).
    A read: pass it a connection."""
    if not seeds or not kinds:
        return {}
    unknown = set(kinds) - set(NEIGHBOUR_KINDS)
    if unknown:
        raise ValueError(f"unknown neighbour kinds {sorted(unknown)}")
    marks = ",".join("?" * len(seeds))
    rows = [r for sql in _SIDES for r in conn.execute(sql.format(marks=marks), (chat_id, *seeds))]
    found: dict[str, str] = {}
    for seed, other, seed_name, other_name, seed_role, other_role, side in rows:
        same = seed_name == other_name
        later_role = other_role if side == "next" else seed_role
        wanted = (("exchange" in kinds and later_role != "user")
                  or (f"{side}_same" in kinds and same) or (f"{side}_reply" in kinds and not same))
        if wanted:
            found.setdefault(other, seed)
    return found
