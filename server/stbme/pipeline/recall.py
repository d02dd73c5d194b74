"""Recall: the read path. Hybrid retrieval (HNSW vectors + BM25, fused by reciprocal rank), importance
and recency, core memories first, rendered into a token-budgeted block."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import orjson

from ..embed import EmbedError, EmbeddingService
from ..graph.model import NODE_COLUMNS, Node, node_from_row
from ..graph.schema import NODE_TYPES
from ..index import ChatIndexes
from ..policy import REINFORCE_STEP
from ..store import Store
from ..hashing import message_hash
from ..store.queries import last_message_hashes, message_count, newest_event_vectors, nodes_by_ids
from ..tokens import count_tokens
from .render import detect_language, has_content, render_block

CORE_TYPES = tuple(t.name for t in NODE_TYPES.values() if t.always_inject)
RRF_K = 60
RECENT_WEIGHTS = (0.35, 0.15, 0.1, 0.05)
INDEX_WAIT_S = 0.25                # how long a recall waits for a loading HNSW index before going without it
RECENT_MESSAGES_LOOKED_UP = 16     # recent turns are matched among the chat's last messages...
NEWEST_EVENTS_LOOKED_UP = 64       # ...and their vectors among its newest event memories


@dataclasses.dataclass
class RecallQuery:
    query: str
    recent: list[dict]
    budget_tokens: int
    max_memories: int


@dataclasses.dataclass
class Scored:
    node: Node
    score: float
    parts: dict[str, float]
    core: bool = False


def _recent_turns(recent: list[dict], turns: int) -> list[dict]:
    """The last `turns` turns that have text, newest first."""
    chosen = recent[-turns:] if turns else []
    return [m for m in reversed(chosen) if str(m.get("text") or "").strip()]


def _recent_texts(turns: list[dict]) -> list[str]:
    return [str(m.get("text") or "").strip()[:600] for m in turns]


async def query_vector(embeddings: EmbeddingService, query: str, recent: list[str],
                       stored: list[np.ndarray | None] | None = None) -> np.ndarray | None:
    """The user's input blended with the last turns (weights fall with age), as one unit vector.
    `stored[i]`: the vector recent turn i already has as a memory, used instead of embedding the turn."""
    stored = stored or [None] * len(recent)
    parts = ([(query, 1.0, None)] if query.strip() else []) + list(zip(recent, RECENT_WEIGHTS, stored))
    if not parts:
        return None
    total = None
    for text, weight, known in parts:
        vec = (known if known is not None else await embeddings.embed_query(text)) * weight
        total = vec if total is None else total + vec
    norm = float(np.linalg.norm(total))
    return total / norm if norm else None


def _turn_hash(turn: dict) -> str:
    return message_hash(str(turn.get("role") or ""), str(turn.get("name") or ""), str(turn.get("text") or ""))


def stored_turn_vectors(conn, chat_id: str, turns: list[dict], embedder_id: str) -> list[np.ndarray | None]:
    """For each recent turn, the vector its message's memories already have (the mean of its chunks), or
    None. The turns are among the chat's last messages (found by hash) and their event memories among
    its newest, so nothing is scanned; a turn not stored or not embedded yet is embedded as a query."""
    index_of = last_message_hashes(conn, chat_id, RECENT_MESSAGES_LOOKED_UP)
    wanted = {index_of.get(_turn_hash(t)) for t in turns} - {None}
    chunks: dict[int, list[np.ndarray]] = {}
    if wanted:
        for row in newest_event_vectors(conn, chat_id, NEWEST_EVENTS_LOOKED_UP):
            if row["seq_from"] in wanted and row["embedding"] is not None and row["embedder"] == embedder_id:
                chunks.setdefault(row["seq_from"], []).append(np.frombuffer(row["embedding"], dtype=np.float32))
    out = []
    for turn in turns:
        found = chunks.get(index_of.get(_turn_hash(turn)))
        mean = np.mean(found, axis=0) if found else None
        out.append(mean / np.linalg.norm(mean) if mean is not None and np.linalg.norm(mean) else None)
    return out


# Everything but the embedding blob: recall reads vectors from the HNSW index, not from rows.
_COLUMNS = ", ".join(c for c in NODE_COLUMNS if c != "embedding")


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


def _fetch(conn, chat_id: str, ids: list[str], prompt_tokens: int):
    # Two index-served queries, not one with OR (which would read the whole chat).
    core = conn.execute(
        f"SELECT {_COLUMNS} FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
        f" ({','.join('?' * len(CORE_TYPES))}) UNION SELECT {_COLUMNS} FROM nodes WHERE chat_id = ?"
        " AND pinned = 1 AND archived = 0", (chat_id, *CORE_TYPES, chat_id)).fetchall()
    rows = nodes_by_ids(conn, chat_id, ids, columns=_COLUMNS, where="AND archived = 0")
    return core, rows, message_count(conn, chat_id), greeting_in_prompt(conn, chat_id, prompt_tokens)


async def recall(*, store: Store, embeddings: EmbeddingService, indexes: ChatIndexes, chat_id: str, q: RecallQuery,
                 settings, reranker=None) -> dict:
    """Run one recall; `settings(name)` gives the chat's effective setting. `reranker(result, query,
    recent)` (the optional LLM rerank) reorders a larger candidate list and cuts it to max_memories."""
    started = time.perf_counter()
    turns = _recent_turns(q.recent, settings("recall.recent_turns"))
    recent = _recent_texts(turns)
    k = settings("recall.candidates")
    degraded = None
    try:
        if not embeddings.embedder.ready:  # just started: the model is still loading
            raise EmbedError("the embedding model is still loading")
        stored = await store.read(lambda conn: stored_turn_vectors(conn, chat_id, turns, embeddings.id)) \
            if turns else None
        qvec = await query_vector(embeddings, q.query, recent, stored)
    except EmbedError as exc:  # the embedding API is down: keywords still work
        qvec, degraded = None, f"vector search unavailable: {exc.message}"
    embed_ms = (time.perf_counter() - started) * 1000
    vec_hits: list[tuple[str, float]] = []
    hnsw = None
    if qvec is not None:
        # After a restart the HNSW index may still be loading: answer from keywords rather than wait.
        hnsw = await indexes.vectors.get_within(chat_id, INDEX_WAIT_S)
        if hnsw is None:
            degraded = "the vector index is still loading: keyword results only"
        else:
            vec_hits = hnsw.query(qvec, k)
    # Keywords come from the user's input alone: recent turns in BM25 drag in near-copies of the last
    # reply. They only stand in when the input is empty (continue, regenerate).
    lex_text = q.query if q.query.strip() else (recent[0] if recent else "")
    lex_hits = (await indexes.lexical.get(chat_id)).search(lex_text, k) if lex_text.strip() else []
    result = rank(
        vec_hits, lex_hits, await store.read(lambda conn: _fetch(conn, chat_id, list(
            dict.fromkeys([n for n, _ in vec_hits] + [n for n, _ in lex_hits])), settings("recall.in_prompt_tokens"))),
        settings=settings, max_memories=q.max_memories + (settings("recall.rerank_pool") if reranker else 0),
        vectors=lambda ids: hnsw.vectors([i for i in ids if i in hnsw]) if hnsw else None)
    if reranker is not None:
        result, why = await reranker(result, q.query, recent)
        degraded = degraded or why
    lang = settings("recall.language")
    if lang == "auto":
        lang = detect_language([q.query] + recent + [s.node.label for s in result[:5]])
    text, placed = render_block([s.node for s in result], q.budget_tokens, lang)
    placed_ids = {n.id for n in placed}
    chosen = [s for s in result if s.node.id in placed_ids]
    if chosen:
        ids = [s.node.id for s in chosen]
        now = time.time()
        store.write_nowait(lambda conn: conn.executemany(
            # DNA reinforcement: each injection adds weight (capped at 1). Not journaled: not message-derived.
            "UPDATE nodes SET access_count = access_count + 1, last_access = ?, weight = min(1.0, weight + ?)"
            " WHERE id = ?",
            [(now, REINFORCE_STEP, i) for i in ids]))
    return {
        "text": text,
        "tokens": count_tokens(text),
        "language": lang,
        "memories": [{
            "id": s.node.id, "type": s.node.type, "label": s.node.label, "score": round(s.score, 4),
            "pinned": s.node.pinned, "core": s.core, "score_parts": {k: round(v, 4) for k, v in s.parts.items()},
            "seq_range": [s.node.seq_from, s.node.seq_to] if s.node.seq_from is not None else None,
        } for s in chosen],
        "took_ms": round((time.perf_counter() - started) * 1000, 2),
        "embed_ms": round(embed_ms, 2),
        **({"degraded": degraded} if degraded else {}),
    }


def drop_near_duplicates(scored: list[Scored], vectors, threshold: float) -> list[Scored]:
    """Greedy diversity: skip a memory almost identical (cosine >= threshold) to a better one kept."""
    ids = [s.node.id for s in scored]
    matrix = vectors(ids) if vectors and len(ids) > 1 else None
    if matrix is None or len(matrix) != len(ids):
        return scored
    kept, kept_rows = [], []
    for row, item in zip(matrix, scored):
        if kept_rows and float(np.max(np.asarray(kept_rows) @ row)) >= threshold:
            continue
        kept.append(item)
        kept_rows.append(row)
    return kept


def _row_has_content(row) -> bool:
    # Only name anchors (characters, entities, places) can lack content: parse just those.
    return row["type"] not in ("character", "entity", "location") or has_content(orjson.loads(row["fields"]))


def rank(vec_hits, lex_hits, fetched, *, settings, max_memories: int, vectors=None) -> list[Scored]:
    """Fuse the rankings, gate weak matches, add importance and recency; core memories first.
    Scores come from the raw rows; Node objects are built only for the memories that can make the cut."""
    core_rows, rows, length, greeting = fetched
    by_id = {r["id"]: r for r in rows}
    # Memories of messages still in the prompt are not injected again: the last N messages, and a short
    # chat's greeting. A chat with no synced messages (an import into a new chat) has nothing in the prompt.
    exclude_from = length - settings("recall.exclude_recent_messages") if length else float("inf")
    w_vec, w_lex = settings("recall.vector_weight"), settings("recall.lexical_weight")
    w_imp, w_rec = settings("recall.importance_weight"), settings("recall.recency_weight")
    min_sim, min_bm25 = settings("recall.min_similarity"), settings("recall.min_bm25")
    if len(vec_hits) >= 5:
        min_sim = max(min_sim, float(np.median([s for _, s in vec_hits])) + settings("recall.vector_margin"))
    best = (w_vec + w_lex) / (RRF_K + 1) or 1.0
    sims = dict(vec_hits)
    bm25 = dict(lex_hits)
    fusion: dict[str, float] = {}
    for weight, hits in ((w_vec, vec_hits), (w_lex, lex_hits)):
        for rank_, (node_id, _) in enumerate(hits):
            fusion[node_id] = fusion.get(node_id, 0.0) + weight / (RRF_K + rank_ + 1)

    def recency(seq_to) -> float:
        if seq_to is None or length == 0:
            return 0.5
        return 1.0 / (1.0 + max(0, length - 1 - seq_to) / 100.0)

    candidates = []
    for node_id, fused in fusion.items():
        row = by_id.get(node_id)
        if row is None or row["pinned"] or row["type"] in CORE_TYPES:
            continue
        if row["seq_from"] is not None and (row["seq_from"] >= exclude_from or row["seq_to"] < greeting):
            continue  # still in the prompt's chat history
        sim, lex = sims.get(node_id, 0.0), bm25.get(node_id, 0.0)
        if (sim < min_sim and lex < min_bm25) or not _row_has_content(row):
            continue
        parts = {"vector": sim, "lexical": lex, "fusion": fused / best, "importance": row["importance"] / 10,
                 "recency": recency(row["seq_to"])}
        # DNA weight: a memory left unused for long fades in rank before it is ever forgotten.
        score = (parts["fusion"] + w_imp * parts["importance"] + w_rec * parts["recency"]) * (0.5 + 0.5 * row["weight"])
        candidates.append((score, node_id, parts))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    # Near-duplicates are dropped before the cut; room for them is kept by looking a little further.
    scored = [Scored(node_from_row(by_id[node_id]), score, parts)
              for score, node_id, parts in candidates[:max_memories * 3]]
    in_index = [s for s in scored if s.parts["vector"] > 0]
    if vectors is not None and len(in_index) > 1:
        unique = {s.node.id for s in drop_near_duplicates(in_index, vectors,
                                                          settings("recall.duplicate_similarity"))}
        scored = [s for s in scored if s.parts["vector"] == 0 or s.node.id in unique]
    core = []
    for row in core_rows:
        node = node_from_row(row)
        parts = {"vector": sims.get(node.id, 0.0), "lexical": bm25.get(node.id, 0.0), "fusion": 0.0,
                 "importance": node.importance / 10, "recency": recency(node.seq_to)}
        core.append(Scored(node, 1.0 + node.importance / 10 + (1.0 if node.pinned else 0.0), parts, core=True))
    core.sort(key=lambda s: (-s.score, s.node.id))
    return (core + scored)[:max_memories]
