"""Recall: the read path, from the user's new input to the memory block injected before a generation.

1. The query (recall/query.py): the input without its roleplay actions, split into its parts, the time it
   asks about read apart; recent turns only lend names when the input refers back to them.
2. Candidates (recall/candidates.py): keywords and vectors per part, the memories of the days it names,
   the memories of the less common names the first hits involve, the messages around the best hits, and
   for an input that names nobody, what was said while the recent turns' subject was talked about.
3. Fusion and order (recall/ranking.py): weighted reciprocal-rank fusion, one memory per message,
   near-duplicates out, ties by node id.
4. The block (recall/render.py): pinned memories, rules and the synopsis, directives within their share,
   then the evidence while it fits the token budget; story dates on past events.
Memories of messages still in the prompt (the last messages, a short chat's greeting) are not recalled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import time

import numpy as np
import orjson

from ..embed import EmbedError, EmbeddingService
from ..graph.model import NODE_COLUMNS, node_from_row
from ..graph.schema import NAMED_TYPES, NODE_TYPES
from ..index import ChatIndexes
from ..index.lexical import tokenize
from ..store import Store
from ..store.queries import (RANKING_INDEX, latest_send_date, memories_of_turn, message_count, messages_by,
                             nodes_by_ids, texts_with_question_mark)
from ..tokens import count_tokens, last_tokens
from . import tuning
from .candidates import (Ranking, anchor_day, by_topic, graph_members, graph_ranking, message_neighbours,
                         names_mentioned, speaker_asked_about, subject_members, time_ranking)
from .current import (asks_about_now, field_words, latest_ranking, may_say_a_change, names_any, spoken_text,
                      subject_terms)
from .query import QueryPlan, clean_input, plan_query
from .ranking import (NEIGHBOUR_SEEDS, RRF_K, Scored, asks, found_by_search, fuse, lift_neighbours, lower_askers,
                      lower_other_speakers, may_show, only_asks, order, relevant, score_rows)
from ..language import detect_language
from .reinforce import Reinforcement
from .render import render_block
from ..pipeline.timeline import parse_send_date

CORE_TYPES = tuple(t.name for t in NODE_TYPES.values() if t.always_inject)
# The user's directives are in every block, whatever was asked: being shown is no use of them. They are used
# when the user says them again (dna/stage.py), and the DNA strategies reinforce and decay them from that.
DIRECTIVE_TYPES = frozenset(t.name for t in NODE_TYPES.values() if t.section == "directives")
# A message that only asks is checked once it reaches the first 30 candidates, or the first max_memories if
# more (ranking.lower_askers): 30 leave room for the memories order() drops (a message's other chunks).
ASKING_WINDOW = 30
INDEX_WAIT_S = 0.25   # how long a recall waits for a loading HNSW index before going without it
# The passage the recent turns echo (candidates.subject_members): their newest ECHO_TOKENS searched by keywords,
# the first ECHO_HITS hits looked through for one said before the prompt's own messages.
ECHO_TOKENS = 128
ECHO_HITS = 20
# Everything but the embedding blob: recall reads vectors from the HNSW index, not from rows.
_COLUMNS = ", ".join(c for c in NODE_COLUMNS if c != "embedding")
# Of the ~200 candidates, only what ranks them (score_rows, order), read from RANKING_INDEX; a name anchor's
# fields too, to know whether it says anything at all (only those rows are read, for that column). The texts
# are read for the ~10 shown (_SHOWN_COLUMNS).
_RANKING_COLUMNS = ("id, type, importance, weight, seq_from, seq_to, pinned, source,"
                    f" CASE WHEN type IN ({', '.join(repr(t) for t in NAMED_TYPES)}) THEN fields END AS fields")
# Of a memory shown, only what its line in the block, the answer and the rerank prompt use. Its Node's other
# fields are defaults.
_SHOWN_COLUMNS = ("id, chat_id, type, fields, importance, weight, seq_from, seq_to, archived, locked, pinned,"
                  " story_time, tags, source")


@dataclasses.dataclass
class RecallQuery:
    query: str
    recent: list[dict]
    budget_tokens: int
    max_memories: int
    reinforce: bool = True   # False: a look at what would be injected changes nothing stored


def greeting_in_prompt(conn, chat_id: str, tokens: int) -> int:
    """How many leading messages (the greeting: every message before the user's first) are certainly in
    the prompt: all of them while the whole chat fits in `tokens`, as SillyTavern drops the oldest messages
    only when the context is full; else 0. Hidden messages are not sent and do not count."""
    if tokens <= 0:
        return 0
    used, greeting, length = 0, None, 0
    for idx, role, text in conn.execute("SELECT idx, role, text FROM messages WHERE chat_id = ? ORDER BY idx",
                                        (chat_id,)):
        length = idx + 1
        if role == "user" and greeting is None:
            greeting = idx
        if role != "system":
            used += count_tokens(text)
            if used > tokens:
                return 0
    return length if greeting is None else greeting  # no user message yet: it is all greeting


@dataclasses.dataclass
class ChatState:
    """What a recall needs of the chat before it searches: its core memories (pinned, rules, synopsis,
    directives: shown first), its length, its latest day (what "yesterday" means) and how many greeting
    messages are in the prompt."""
    core: list[Scored]
    length: int
    now: dt.date | None
    greeting: int


def read_chat_state(conn, chat_id: str, prompt_tokens: int) -> ChatState:
    """The chat's state (a read). Two index-served queries for the core, not one with OR."""
    core = conn.execute(
        f"SELECT {_COLUMNS} FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
        f" ({','.join('?' * len(CORE_TYPES))}) UNION SELECT {_COLUMNS} FROM nodes WHERE chat_id = ?"
        " AND pinned = 1 AND archived = 0", (chat_id, *CORE_TYPES, chat_id)).fetchall()
    return ChatState(_core(core), message_count(conn, chat_id), parse_send_date(latest_send_date(conn, chat_id)),
                     greeting_in_prompt(conn, chat_id, prompt_tokens))


class ChatStates:
    """The chats' states, read again only after the store has written anything (Store.write_seq): between
    writes, a recall's one read is the read around its hits."""

    def __init__(self, store: Store):
        self.store = store
        self._states: dict[tuple[str, int], tuple[int, ChatState]] = {}

    def cached(self, chat_id: str, prompt_tokens: int) -> ChatState | None:
        hit = self._states.get((chat_id, prompt_tokens))
        return hit[1] if hit is not None and hit[0] == self.store.write_seq else None

    async def read(self, chat_id: str, prompt_tokens: int) -> ChatState:
        seq = self.store.write_seq   # before the read: a write during it makes the next recall read again
        state = self.store.read_inline(lambda conn: read_chat_state(conn, chat_id, prompt_tokens))
        if len(self._states) > 256:
            self._states.clear()
        self._states[(chat_id, prompt_tokens)] = (seq, state)
        return state

    def forget(self, chat_id: str) -> None:
        self._states = {k: v for k, v in self._states.items() if k[0] != chat_id}


def _recent_texts(q: RecallQuery, settings) -> list[str]:
    turns = settings("recall.recent_turns")
    return [str(m.get("text") or "") for m in reversed(q.recent[-turns:])
            if str(m.get("text") or "").strip()] if turns else []


def _input_text(q: RecallQuery, recent: list[str]) -> str:
    return q.query if q.query.strip() else (recent[0] if recent else "")  # continue/regenerate: the last turn


def _plan_tuning() -> dict:
    """The named numbers of recall/tuning.py that plan_query takes (read when asked: the evaluation
    overrides them)."""
    return {"borrow_terms": tuning.BORROW_RARE_TERMS, "search_time_words": tuning.SEARCH_TIME_WORDS,
            "long_rest_weight": tuning.LONG_REST_WEIGHT}


async def _plan(q: RecallQuery, settings, *, now, store: Store, chat_id: str, lexical) -> QueryPlan:
    recent = _recent_texts(q, settings)
    text = _input_text(q, recent)
    if not settings("recall.query_cleanup"):
        return QueryPlan(text, [text], text)
    lang = detect_language([text])
    plan = plan_query(text, recent, now=now, lang=lang, weights=lexical.term_weights, **_plan_tuning())
    when = plan.time
    if when is not None and when.kind == "anchor" and when.span is None and when.anchor:
        day = await anchor_day(store, chat_id, lexical, when.anchor)  # "the day after the festival": which day?
        if day is not None:
            plan = plan_query(text, recent, now=now, lang=lang, find_anchor=lambda _phrase: day,
                              weights=lexical.term_weights, **_plan_tuning())
    return plan


async def _embed_parts(embeddings: EmbeddingService, parts: list[str], max_tokens: int) -> list[np.ndarray]:
    return list(await asyncio.gather(*(embeddings.embed_query(last_tokens(part, max_tokens)) for part in parts)))


def plan_query_draft(q: RecallQuery, settings, lexical) -> list[str]:
    """The parts of the input to embed before the chat's latest day is known (today stands in for it)."""
    recent = _recent_texts(q, settings)
    text = _input_text(q, recent)
    if not settings("recall.query_cleanup"):
        return [text]
    # Only the parts: the recent turns' rare terms (borrow_terms) are left to the real plan.
    return plan_query(text, recent, now=dt.date.today(), lang=detect_language([text]),
                      weights=lexical.term_weights, search_time_words=tuning.SEARCH_TIME_WORDS,
                      long_rest_weight=tuning.LONG_REST_WEIGHT).parts


async def recall(*, store: Store, embeddings: EmbeddingService, indexes: ChatIndexes, chat_id: str, q: RecallQuery,
                 settings, reranker=None, states: ChatStates | None = None,
                 reinforcement: Reinforcement | None = None, index_wait_s: float | None = INDEX_WAIT_S) -> dict:
    """Run one recall; `settings(name)` gives the chat's effective setting. `reranker(result, query,
    recent)` (the optional LLM rerank) reorders a larger candidate list and cuts it to max_memories.
    `states` keeps the chats' states between recalls; `reinforcement` counts what is injected (without
    one, the count is written at once). `index_wait_s`: how long to wait for a chat's HNSW index that is
    not loaded yet (None: until it is)."""
    started = time.perf_counter()
    prompt_tokens = settings("recall.in_prompt_tokens")
    states = states or ChatStates(store)
    state = states.cached(chat_id, prompt_tokens)
    # The chat's state is read while the query is embedded (the plan the embedding needs takes today for
    # the chat's latest day; the real plan below differs from it only if that changes which part is asked).
    reading = None if state is not None else asyncio.ensure_future(states.read(chat_id, prompt_tokens))
    lexical = await indexes.lexical.get(chat_id)
    k = tuning.CANDIDATES
    degraded, hnsw, vectors = None, None, []
    embedded: dict[str, np.ndarray] = {}
    max_tokens = settings("recall.max_query_tokens")
    try:
        if not embeddings.embedder.ready:  # just started: the model is still loading
            raise EmbedError("the embedding model is still loading")
        draft = plan_query_draft(q, settings, lexical) if state is None else None
        if draft is not None:
            embedded = dict(zip(draft, await _embed_parts(embeddings, draft, max_tokens)))
        if state is None:
            state = await reading
        plan = await _plan(q, settings, now=state.now, store=store, chat_id=chat_id, lexical=lexical)
        missing = [p for p in plan.parts if p not in embedded]
        if missing:
            embedded.update(zip(missing, await _embed_parts(embeddings, missing, max_tokens)))
        vectors = [embedded[p] for p in plan.parts]
    except EmbedError as exc:  # the embedding API is down: keywords still work
        degraded = f"vector search unavailable: {exc.message}"
        if state is None:
            state = await reading
        plan = await _plan(q, settings, now=state.now, store=store, chat_id=chat_id, lexical=lexical)
    finally:
        if reading is not None and not reading.done():
            reading.cancel()
    core, length, now, greeting = state.core, state.length, state.now, state.greeting
    # Memories still in the prompt's chat history are not injected again: the last N messages, and a short
    # chat's greeting. A chat with no synced messages (an import into a new chat) has nothing in the prompt.
    skip_from = length - settings("recall.exclude_recent_messages") if length else float("inf")
    embed_ms = (time.perf_counter() - started) * 1000
    if vectors:
        # After a restart the HNSW index may still be loading: answer from keywords rather than wait.
        hnsw = await (indexes.vectors.get(chat_id) if index_wait_s is None
                      else indexes.vectors.get_within(chat_id, index_wait_s))
        if hnsw is None:
            degraded, vectors = "the vector index is still loading: keyword results only", []
    w_lex = tuning.LEXICAL_WEIGHT
    if tuning.LEXICAL_WEIGHT_CJK is not None and detect_language([plan.text]) == "zh":
        w_lex = tuning.LEXICAL_WEIGHT_CJK
    w_vec = tuning.VECTOR_WEIGHT
    topic_vec = vectors[0] if len(vectors) == 1 else (
        _unit(np.sum([plan.part_weight(i) * v for i, v in enumerate(vectors)], axis=0)) if vectors else None)
    rankings: list[Ranking] = []
    # An input that leans on the last turn (it borrows that turn's names or rare terms) is ranked by keywords
    # as itself with what it borrows (lexref, below); its own keyword lists only find candidates.
    own_lex = w_lex * (tuning.LEANING_OWN_KEYWORDS if plan.reference else 1.0)
    for i, part in enumerate(plan.parts):
        share = plan.part_weight(i)
        if part.strip():
            rankings.append(Ranking(f"lex{i}", own_lex * share, *_split(lexical.search(part, k))))
        if vectors and hnsw is not None:
            rankings.append(Ranking(f"vec{i}", w_vec * share, *_split(hnsw.query(vectors[i], k))))
    if plan.reference:
        rankings.append(Ranking("lexref", w_lex * tuning.REFERENCE_SHARE, *_split(lexical.search(plan.reference, k))))
        recent = _recent_texts(q, settings)
        if tuning.VECTOR_REFERENCE and vectors and hnsw is not None and recent:
            # The input leans on the last turn: the input's vector and that turn's (its memories' stored
            # vectors: nothing more to embed), summed, as one more list.
            turn = store.read_inline(lambda conn: memories_of_turn(conn, chat_id, recent[0], length))
            turn_vectors = list(_vectors(hnsw, turn).values())
            if turn_vectors:
                ref_vec = _unit(_unit(topic_vec) + _unit(np.mean(turn_vectors, axis=0)))
                rankings.append(Ranking("vecref", w_vec * tuning.REFERENCE_SHARE, *_split(hnsw.query(ref_vec, k))))
        if tuning.SUBJECT_WEIGHT > 0 and recent:
            subject = store.read_inline(lambda conn: subject_members(
                conn, chat_id, plan.text, recent, tuning.SUBJECT_AFTER, echoed=lambda: _echoed(lexical, recent),
                count=tuning.SUBJECT_ECHOES, before=skip_from))
            if subject:
                rankings.append(by_topic("subject", tuning.SUBJECT_WEIGHT, subject, lexical=lexical, index=hnsw,
                                         qvec=topic_vec, topic=plan.topic, rrf_k=RRF_K))
    extra = dict(store=store, chat_id=chat_id, lexical=lexical, index=hnsw, qvec=topic_vec, rrf_k=RRF_K)
    timed = await time_ranking(plan, weight=tuning.TIME_WEIGHT, **extra)
    rankings += [timed] if timed else []
    latest = await _latest(plan, rankings, store=store, chat_id=chat_id, lexical=lexical,
                           weight=tuning.LATEST_WEIGHT)
    rankings += [latest] if latest else []
    fused = fuse(rankings)
    found = found_by_search(rankings)
    seeds = sorted(found, key=lambda n: (-fused[n], n))
    share, graph_weight = tuning.NEIGHBOUR_SHARE, tuning.GRAPH_WEIGHT
    expand = seeds if graph_weight > 0 else []
    near = seeds[:NEIGHBOUR_SEEDS] if share > 0 else []
    min_similarity = tuning.MIN_SIMILARITY
    lower_questions = tuning.ASKING_SHARE < 1.0 and asks(plan.text)

    def around_the_hits(conn):
        # One read: what grows from the first hits (the graph of their names, their exchanges), then the rows
        # of every candidate that may be shown.
        members = graph_members(conn, chat_id, expand)
        neighbour_of = message_neighbours(conn, chat_id, near, tuning.NEIGHBOUR_KINDS)
        wanted = may_show(fused, found, neighbour_of, members, rankings, min_similarity)
        return members, neighbour_of, nodes_by_ids(conn, chat_id, wanted, columns=_RANKING_COLUMNS,
                                                   where="AND archived = 0", index=RANKING_INDEX)

    members, neighbour_of, row_list = store.read_inline(around_the_hits)
    graph = graph_ranking(members, seeds, plan, weight=graph_weight, lexical=lexical, index=hnsw, qvec=topic_vec,
                          rrf_k=RRF_K)
    if graph is not None:
        rankings.append(graph)
        fused = fuse(rankings)
    for neighbour in neighbour_of:
        fused.setdefault(neighbour, 0.0)
    rows = {r["id"]: r for r in row_list}
    rows = {n: r for n, r in rows.items() if r["type"] not in CORE_TYPES}
    scores = score_rows(fused, rows, rankings, length=length, skip_from=skip_from, skip_before=greeting)
    limit = q.max_memories + (settings("recall.rerank_pool") if reranker else 0)
    lift_from: dict[str, float] = {}
    # Lowered before the lift: the reply to a question that matched by its form answers another, but the
    # reply to one that names the input's topic rises from the question's unlowered score (lift_from).
    if lower_questions:
        lift_from = lower_askers(
            scores, rows, lambda ids: _only_asking(store, chat_id, {n: rows[n]["seq_from"] for n in ids}),
            tuning.ASKING_SHARE, window=max(ASKING_WINDOW, limit), names_topic=names_the_topic(plan, lexical))
    lift_neighbours(scores, neighbour_of, share, lift_from)
    # After the lift: the reply a hit brings is the other speaker's.
    asked_about = (store.read_inline(lambda conn: speaker_asked_about(conn, chat_id, plan.text))
                   if tuning.SPEAKER_SHARE < 1.0 and plan.text else None)
    if asked_about is not None:
        lower_other_speakers(scores, rows, lambda ids: _said_by_others(store, chat_id, asked_about, ids, rows),
                             tuning.SPEAKER_SHARE, window=max(ASKING_WINDOW, limit))
    scores = relevant(scores, found, min_similarity, neighbour_of)
    result = order(scores, rows, limit=limit, duplicate_similarity=tuning.DUPLICATE_SIMILARITY,
                   vectors=(lambda ids: _vectors(hnsw, ids)) if hnsw is not None else None,
                   node_rows=lambda ids: {r["id"]: r for r in store.read_inline(
                       lambda conn: nodes_by_ids(conn, chat_id, ids, columns=_SHOWN_COLUMNS,
                                                 where="AND archived = 0"))})
    if reranker is not None:
        result, why = await reranker(result, plan.text, [])
        degraded = degraded or why
    lang = settings("recall.language")
    if lang == "auto":
        lang = detect_language([q.query] + [s.node.label for s in result[:5]])
    line_tokens = settings("recall.line_tokens")
    weights = lexical.term_weights(" ".join([plan.text, *plan.borrowed_names])) if line_tokens else None
    text, placed, tokens = render_block([s.node for s in core], q.budget_tokens, lang,
                                        evidence=[s.node for s in result],
                                        directive_share=settings("recall.directive_share"), today=now,
                                        query_weights=weights, line_tokens=line_tokens)
    placed_ids = {n.id for n in placed}
    # In the block's order: the core sections come before the evidence.
    chosen = [s for s in core if s.node.id in placed_ids] + [s for s in result if s.node.id in placed_ids]
    used = [s.node.id for s in chosen if s.node.type not in DIRECTIVE_TYPES]
    if used and q.reinforce:
        if reinforcement is None:
            reinforcement = Reinforcement(store)
            reinforcement.injected(used)
            reinforcement.flush()
        else:
            reinforcement.injected(used)
    return {
        "text": text,
        "tokens": tokens,
        "language": lang,
        "memories": [_memory_json(s) for s in chosen],
        "query": {"text": plan.text, "parts": plan.parts,
                  **({"time": plan.time.expression} if plan.time is not None else {})},
        "took_ms": round((time.perf_counter() - started) * 1000, 2),
        "embed_ms": round(embed_ms, 2),
        **({"degraded": degraded} if degraded else {}),
    }


async def _latest(plan: QueryPlan, rankings: list[Ranking], *, store: Store, chat_id: str, lexical,
                  weight: float) -> Ranking | None:
    """For a question about now: the keyword and vector candidates that say their subject changed."""
    if weight <= 0 or not asks_about_now(plan.text):
        return None
    topic = plan.topic or plan.text
    subject = subject_terms(lexical, topic, store.read_inline(lambda conn: names_mentioned(conn, chat_id, topic)))
    if not subject:
        return None
    ids = list(dict.fromkeys(n for r in rankings for n in r.ids))
    rows = store.read_inline(lambda conn: nodes_by_ids(conn, chat_id, ids, columns="id, fields, seq_to",
                                                       where="AND archived = 0"))
    holding = None   # the memories that hold a subject term by the index (one pass), read if a row needs it
    texts = {}
    for r in rows:
        if r["seq_to"] is None:
            continue
        fields = orjson.loads(r["fields"])
        words = field_words(fields)
        # Only a memory whose fields name the subject and hold a change word can state its change: its spoken
        # text (node_text, a regex per memory to drop vocatives) is built only for those. A stem is not always a
        # part of its word ("dagni" of "Dagny"): what the fields do not show, the index answers.
        if not names_any(words, subject):
            holding = holding if holding is not None else lexical.score_terms(subject, ids)
            if holding.get(r["id"], 0.0) <= 0:
                continue
        if may_say_a_change(words):
            texts[r["id"]] = (spoken_text(fields), r["seq_to"])
    return latest_ranking(texts, subject=subject, weight=weight)


def _echoed(lexical, recent: list[str]) -> list[str]:
    """The memories the recent turns (newest first) echo best by keywords: their newest ECHO_TOKENS searched.
    The recent turns are in the chat too and find themselves first; subject_members keeps those said before."""
    said = last_tokens(" ".join(clean_input(turn) for turn in reversed(recent)), ECHO_TOKENS)
    return [node_id for node_id, _ in lexical.search(said, ECHO_HITS, common=tuning.ECHO_COMMON_TERMS)]


def _said_by_others(store: Store, chat_id: str, speaker: str, ids: list[str], rows: dict) -> dict[str, None]:
    """Of these memories (each a message's own), those whose message `speaker` did not say."""
    said = store.read_inline(lambda conn: messages_by(conn, chat_id, speaker, [rows[n]["seq_from"] for n in ids]))
    return {n: None for n in ids if rows[n]["seq_from"] not in said}


def _only_asking(store: Store, chat_id: str, messages: dict[str, int]) -> dict[str, str]:
    """Of these memories ({id: its message}), those whose message only asks, with its text: one read of the
    messages' texts that hold a question mark."""
    texts = store.read_inline(lambda conn: texts_with_question_mark(conn, chat_id, messages.values()))
    return {node_id: texts[i] for node_id, i in messages.items() if i in texts and only_asks(texts[i])}


def names_the_topic(plan: QueryPlan, lexical):
    """A test of a question's text: does it name what the input asks about? That is what the input borrows from
    the recent turns, or else its rarest terms in the chat. Not the input's own rarest when it borrows: in
    "知道他是哪年出生的吗？" those are question words, which every question of that form shares (adding them cost
    Chinese reference questions, docs/evaluation.md). None when ASKING_TOPIC_LIFT is off or nothing is named."""
    if not tuning.ASKING_TOPIC_LIFT:
        return None
    if plan.borrowed_names:
        terms = {t for name in plan.borrowed_names for t in tokenize(name)}
    else:
        # Only the terms tied at the rarest, not current.subject_terms' two rarest: a commoner term is what
        # form-alike questions share (terms within 0.5 of the rarest's idf: ZH reference .184 -> .180; the two
        # rarest were not measured).
        weights = lexical.term_weights(plan.text)
        rarest = max(weights.values(), default=0.0)
        terms = {t for t, w in weights.items() if w >= rarest}
    return (lambda text: not terms.isdisjoint(tokenize(text))) if terms else None


def _split(hits: list[tuple[str, float]]) -> tuple[list[str], dict[str, float]]:
    return [n for n, _ in hits], dict(hits)


def _unit(vec: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm else vec


def _vectors(index, ids: list[str]) -> dict[str, np.ndarray]:
    known = [n for n in ids if n in index]
    return dict(zip(known, index.vectors(known))) if known else {}


def _core(rows) -> list[Scored]:
    """Pinned memories first (the user chose them), then rules, the synopsis and directives by importance."""
    core = [Scored(node_from_row(r), 1.0 + r["importance"] / 10 + (1.0 if r["pinned"] else 0.0), {}, core=True)
            for r in rows]
    core.sort(key=lambda s: (-s.score, s.node.id))
    return core


def _memory_json(s: Scored) -> dict:
    return {"id": s.node.id, "type": s.node.type, "label": s.node.label, "score": round(s.score, 4),
            "pinned": s.node.pinned, "core": s.core, "score_parts": {k: round(v, 4) for k, v in s.parts.items()},
            "seq_range": [s.node.seq_from, s.node.seq_to] if s.node.seq_from is not None else None}


__all__ = ["RecallQuery", "recall", "clean_input", "greeting_in_prompt"]
