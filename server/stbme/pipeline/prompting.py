"""What the LLM stages share: short keys (M1, M2...) that stand for real node ids, memories rendered for
prompts, nearest-neighbour look-ups that ignore the raw per-message layer, and the task call itself.

The LLM never sees a real id. A stage shows keys, keeps the map, and maps answers back; a key the LLM
invents or mistypes maps to nothing and is ignored.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Iterable

import numpy as np

from ..embed import EmbeddingService
from ..graph.model import Node, field_text, node_from_row
from ..graph.schema import MESSAGE_FIELDS
from ..live import LiveHub
from ..llm.answer_schemas import ANSWER_SCHEMAS
from ..llm.base import LLMClient, LLMError, Usage, complete_json
from ..llm.prompts import system_prompt
from ..store import Store
from ..store.queries import nodes_by_ids
from .batch import BaseStage, BatchContext
from ..language import detect_language

log = logging.getLogger("stbme.llm")
_KEY = re.compile(r"^\[?\s*([A-Za-z]+)\s*[-_]?\s*(\d+)\s*\]?$")


def norm_key(value: Any) -> str | None:
    """'M3', '[m3]', 'M-3' -> 'M3'; anything else -> None."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None
    match = _KEY.match(str(value).strip())
    return f"{match.group(1).upper()}{int(match.group(2))}" if match else None


class KeyMap:
    """Short keys for nodes shown to the LLM, and the way back."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.to_id: dict[str, str] = {}
        self.to_key: dict[str, str] = {}

    def add(self, node_id: str) -> str:
        key = self.to_key.get(node_id)
        if key is None:
            key = f"{self.prefix}{len(self.to_id) + 1}"
            self.to_id[key] = node_id
            self.to_key[node_id] = key
        return key

    def resolve(self, value: Any) -> str | None:
        key = norm_key(value)
        return self.to_id.get(key) if key else None

    def __len__(self) -> int:
        return len(self.to_id)


def memory_line(key: str, node: Node, *, max_chars: int = 320) -> str:
    """`[M1] character: name: Elena | state: wounded (importance 6)`: what the LLM sees of a memory."""
    parts = []
    for name, value in node.fields.items():
        text = field_text(value)
        if text and name not in MESSAGE_FIELDS:
            parts.append(f"{name}: {text}")
    body = " | ".join(parts)
    if len(body) > max_chars:
        body = body[:max_chars - 1] + "…"
    tags = f" tags: {', '.join(node.tags[:6])}" if node.tags else ""
    return f"[{key}] {node.type}: {body} (importance {node.importance:g}){tags}"


def is_raw_event(node: Node) -> bool:
    """The heuristic per-message events: the raw episodic layer, never deduplicated, evolved or shown as
    existing memories (the LLM reads the messages themselves)."""
    return node.type == "event" and node.source == "heuristic"


def neighbour_sort_key(item: tuple[Node, float]):
    node, sim = item
    # Ids are random: order ties by content, so a replay shows the same keys in the same order.
    return (-round(sim, 4), node.seq_to if node.seq_to is not None else -1, node.type, node.label)


async def nearest(store: Store, embedder_id: str, chat_id: str, vector: np.ndarray, k: int, *,
                  exclude: Iterable[str] = (), min_similarity: float = 0.0) -> list[tuple[Node, float]]:
    """The k most similar active memories to a vector, raw per-message events and `exclude` left out.

    Exact cosine over the chat's structured memories (not the HNSW index): they are few next to the raw
    events, exactness costs well under a millisecond, and it makes the answer independent of the index's
    history, so a replay after a rollback shows the LLM exactly the neighbours a fresh ingest shows."""
    excluded = set(exclude)

    def read(conn):
        return conn.execute(
            "SELECT id, embedding FROM nodes WHERE chat_id = ? AND archived = 0 AND embedding IS NOT NULL"
            " AND embedder = ? AND NOT (type = 'event' AND source = 'heuristic')",
            (chat_id, embedder_id)).fetchall()

    rows = [r for r in await store.read(read) if r["id"] not in excluded]
    if not rows:
        return []
    matrix = np.vstack([np.frombuffer(r["embedding"], dtype=np.float32) for r in rows])
    sims = matrix @ np.asarray(vector, dtype=np.float32)
    order = np.argsort(-sims, kind="stable")
    cut = float(sims[order[min(k, len(order)) - 1]]) - 1e-6  # keep every tie at the k-th place
    picked = {rows[i]["id"]: float(sims[i]) for i in order if sims[i] >= max(min_similarity, cut)}
    if not picked:
        return []
    ids = list(picked)
    node_rows = await store.read(lambda conn: nodes_by_ids(conn, chat_id, ids))
    found = [(node, picked[node.id]) for node in map(node_from_row, node_rows)]
    found.sort(key=neighbour_sort_key)
    return found[:k]


def chat_language(texts: list[str]) -> str:
    return detect_language(texts)


class LLMStage(BaseStage):
    """A stage that asks the memory LLM: it reads the store, compares vectors and tells the user when a
    task had to be skipped."""

    needs_llm = True

    def __init__(self, *, store: Store, embeddings: EmbeddingService, llm: LLMClient, live: LiveHub):
        self.store = store
        self.embeddings = embeddings
        self.llm = llm
        self.live = live

    async def ask(self, ctx: BatchContext, task: str, user: str, *, language: str, retries: int | None = None,
                  max_tokens: int | None = None, appendix: str = "", salvage: str | None = None,
                  schema: dict | None = None) -> tuple[Any, Usage]:
        """One JSON task: system prompt (override-aware, with a fixed appendix), user content, repair, retry;
        `salvage` (a list task's key) keeps the whole items of an answer cut off in every attempt; `schema`
        is the answer's JSON Schema (default: the task's in llm/answer_schemas.py)."""
        messages = [{"role": "system", "content": system_prompt(task, ctx.setting, language, appendix)},
                    {"role": "user", "content": user}]
        retries = ctx.setting("llm.json_retries") if retries is None else retries
        value, usage = await complete_json(self.llm, messages, task=task, retries=retries,
                                           max_tokens=max_tokens, expect=(dict, list), salvage=salvage,
                                           schema=schema or ANSWER_SCHEMAS.get(task))
        if usage.salvaged:
            self.live.notice("warning", f"the memory LLM's {task} answer for messages {ctx.start}-{ctx.end} was cut "
                             f"off at its token limit and no retry came back whole; its {usage.salvaged} complete items were "
                             "kept and the rest was dropped (raise llm.max_tokens, or lower extract.every)",
                             ctx.chat_id)
        return value, usage

    async def nearest(self, ctx: BatchContext, vector: np.ndarray, k: int, *, exclude: Iterable[str] = (),
                      min_similarity: float = 0.0) -> list[tuple[Node, float]]:
        return await nearest(self.store, self.embeddings.id, ctx.chat_id, vector, k, exclude=exclude,
                             min_similarity=min_similarity)

    def report_dropped(self, ctx: BatchContext, task: str, asked: int, kept: int, dropped: dict[str, int]) -> None:
        """One log line per answer that had items left out (why, by reason), and the counts in the LLM usage
        (`/health` llm.usage.dropped, `stbme stats`): a model whose answers parse but follow no schema is
        otherwise silent."""
        if not any(dropped.values()):
            return
        self.llm.usage.drop(task, dropped)
        why = ", ".join(f"{reason} {n}" for reason, n in sorted(dropped.items()) if n)
        log.log(logging.WARNING if asked and not kept else logging.INFO,
                "%s answer for chat %s messages %d-%d: %d items, %d kept; left out: %s", task, ctx.chat_id,
                ctx.start, ctx.end, asked, kept, why)

    def skip(self, ctx: BatchContext, error: LLMError, task: str) -> None:
        """A task skipped because the LLM failed: say so, and mark the batch to be redone when it answers."""
        ctx.skip_llm(error)
        self.live.notice("warning", f"{task} skipped for messages {ctx.start}-{ctx.end}: {error.message}; "
                         "these messages will be processed again when the memory LLM answers", ctx.chat_id)


def as_list(value: Any, *keys: str) -> list:
    """The list an LLM meant: the value itself, the first of `keys` holding a list, or a lone object."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        for key in keys:
            if isinstance(value.get(key), list):
                return value[key]
        for v in value.values():
            if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
                return v
        return [value]
    return []


def clean_fields(type_columns: tuple[str, ...], fields: Any, *, extra: tuple[str, ...] = ()) -> dict:
    """Keep the schema's columns, as text (lists of text stay lists); drop empty values."""
    if not isinstance(fields, dict):
        return {}
    out = {}
    for key in (*type_columns, *extra):
        value = fields.get(key)
        if value is None:
            continue
        if isinstance(value, list):
            value = [str(v).strip()[:200] for v in value if isinstance(v, (str, int, float)) and str(v).strip()][:12]
            if not value:
                continue
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = str(value).strip()[:1000]
            if not value:
                continue
        else:
            continue
        out[key] = value
    return out
