"""LLM extraction: the new messages of a batch become structured memories (characters, locations, rules,
threads, summarised events), on top of the heuristic per-message events.

Why keep the heuristic events in LLM mode: they are the raw episodic layer (every message is findable by
its words), they cost no tokens, and recall keeps working when the LLM is down. The LLM adds the
abstractions: who is who, where, what changed, what rules hold.

The LLM reads several replies at once: a batch is one assistant message (its per-message memories are made
at once), and the extraction runs when `extract.every` replies have come since its last run, or earlier
on a plot turn (the smart trigger), over all of them. Its changes are journaled with that whole range, so an
edit of any message it read undoes it (store/journal.py moves the cut back to the range's start).

prepare: one LLM call with the context turns, the new messages (reasoning blocks removed) and the existing
  relevant memories under short keys; the schema and the duties (A-MEM evolution, pipeline/evolve.py) are in
  the fixed system prompt; the answer is parsed tolerantly into operations (pipeline/operations.py).
apply:   the operations in the batch transaction.
A failed extraction fails the batch: the job is retried with backoff and then parked with its error;
nothing of the batch is written, so a retry later extracts exactly what a first success would have.
"""

from __future__ import annotations

import collections
import logging
import re

from ..graph.changes import ChangeSet
from ..graph.model import field_text, node_from_row
from ..graph.schema import MESSAGE_FIELDS, NAMED_TYPES, NODE_TYPES, RELATIONS
from ..llm.answer_schemas import extract_schema
from ..llm.prompts import EVOLVE_WITH_EXTRACTION
from ..patterns import matches, split_patterns
from ..store.events import record_event
from ..store.queries import chat_row
from ..tokens import truncate_to_tokens
from .batch import MAX_BATCH_MESSAGES, BatchContext, batch_end
from .evolve import EvolutionCounts
from .heuristic import mentions_name, remove_tag_blocks
from .operations import CREATABLE, MAX_OPS, OpApplier, parse_operations
from .prompting import KeyMap, LLMStage, chat_language, memory_line
from .sync import Message, load_messages

log = logging.getLogger("stbme.extract")
MAX_MESSAGE_TOKENS = 1500
# Smart trigger (ST-BME §2.1): plot-turn words, Chinese and English.
TURN_WORDS = ("突然", "原来", "其实", "发现", "背叛", "死亡", "复活", "失忆", "恢复记忆", "坦白", "暴露", "秘密", "计划",
              "规则", "契约", "地点", "离开", "到达", "suddenly", "turns out", "actually", "discover", "betray",
              "died", "revive", "confess", "secret", "plan", "rule", "contract", "arrive", "leave")
_ENTITY_LIKE = re.compile(r"\b[A-Z][a-z]{2,}\b|[\u4e00-\u9fff]{2,6}(?:先生|小姐|王国|城|村|学院|公司|小队|军团)")



def _schema() -> str:
    lines = ["Memory types (* = required):"]
    for name in CREATABLE:
        spec = NODE_TYPES[name]
        lines.append(f"{name}: " + ", ".join(c + ("*" if c in spec.required else "") for c in spec.columns
                                              if c not in MESSAGE_FIELDS))
    return "\n".join(lines)


SCHEMA_APPENDIX = _schema()  # fixed: part of the cacheable system prompt, not of each call's content
ANSWER_SCHEMA = extract_schema({name: (tuple(c for c in NODE_TYPES[name].columns if c not in MESSAGE_FIELDS),
                                        NODE_TYPES[name].required) for name in CREATABLE}, RELATIONS, MAX_OPS)


def strip_tags(text: str, tags: str) -> str:
    """Remove <tag>...</tag> blocks (and a dangling unclosed one at the end) for the given tags."""
    text = remove_tag_blocks(text, [t.strip() for t in tags.split(",")], drop_unclosed=True, lenient=True)
    return re.sub(r"[ \t]+", " ", text).strip()


def smart_score(messages: list[Message], patterns: str) -> int:
    """ST-BME's smart-trigger score of the pending text."""
    text = "\n".join(m.text for m in messages if m.role != "system")
    low = text.lower()
    score = min(2, sum(1 for w in TURN_WORDS if w in low))
    if any(matches(pattern, text) for pattern in split_patterns(patterns or "")):  # RE2: no backtracking blow-up
        score += 2
    roles = [m.role for m in messages if m.role != "system"]
    if sum(1 for a, b in zip(roles, roles[1:]) if a != b) >= 2:
        score += 1
    if len(re.findall(r"[!?！？]", text)) >= 2:
        score += 1
    if _ENTITY_LIKE.search(text):
        score += 1
    return score


def unread_from(llm_upto: int, degraded_from: int | None, start: int, every: int) -> int:
    """The first message the extraction reads, for a batch starting at `start`: every message since the
    LLM last read the chat (with `extract.every`, the replies it was not due for yet), but no further back
    than its groups can reach. Messages from `degraded_from` on are redone by their own batches (a read
    over them would be undone with them), and a chat whose LLM was off (`llm.mode none`, llm_upto -1)
    must not send its whole history in one prompt."""
    if degraded_from is not None and degraded_from <= start:
        return start
    return max(min(llm_upto + 1, start), start - 2 * every - MAX_BATCH_MESSAGES)


class ExtractStage(LLMStage):
    name = "extract"

    # -- batch boundaries ---------------------------------------------------------------------------
    def batch_end(self, messages: list[Message], every: int, setting) -> int | None:
        """Exactly one group of `every` assistant messages: batch boundaries depend on the messages alone,
        never on how many were pending, so a replay after a rollback cuts the same batches."""
        return batch_end(messages, every, single_group=True)

    def _due(self, pending: list[Message], setting) -> bool:
        """Is the LLM extraction due over the messages since its last run? After `extract.every`
        assistant messages, or earlier when the smart trigger scores them as an important turn."""
        every = setting("extract.every")
        if sum(m.role == "assistant" for m in pending) >= every:
            return True
        return every > 1 and setting("extract.smart_trigger") and smart_score(
            pending, setting("extract.trigger_patterns")) >= setting("extract.smart_threshold")

    # -- prepare: the LLM call ------------------------------------------------------------------
    async def prepare(self, ctx: BatchContext) -> None:
        """One call over every message since the LLM's last run, when that is due (the per-message memories
        are made for every batch meanwhile)."""
        ctx.data["extract"] = None
        row = await self.store.read(lambda conn: chat_row(conn, ctx.chat_id))
        llm_from = unread_from(row["llm_upto"], row["degraded_from"], ctx.start, ctx.setting("extract.every"))
        pending = ctx.messages if llm_from == ctx.start else await self.store.read(
            lambda conn: load_messages(conn, ctx.chat_id, llm_from, ctx.end))
        if not self._due(pending, ctx.setting):
            return
        ctx.journal_from = llm_from
        ctx.data["llm_range"] = (llm_from, ctx.end)
        exclude = ctx.setting("extract.exclude_tags")
        turns = ctx.setting("extract.context_turns")
        first = max(0, llm_from - 2 * turns)
        context = await self.store.read(
            lambda conn: load_messages(conn, ctx.chat_id, first, llm_from - 1)) if llm_from > first else []
        new_msgs = [(m, strip_tags(m.text, exclude)) for m in pending if m.role != "system"]
        new_msgs = [(m, t) for m, t in new_msgs if t]
        if not new_msgs:
            return
        new_text = "\n".join(t for _, t in new_msgs)
        language = chat_language([new_text])
        ctx.data["language"] = language
        keys = KeyMap("M")
        shown = await self._existing(ctx, new_text, keys)

        def line(m: Message, text: str) -> str:
            who = f"{m.role} {m.name}".strip()
            return f"#{m.index} [{who}]: {truncate_to_tokens(text, MAX_MESSAGE_TOKENS)}"

        parts = ["## Existing memories", *(shown or ["(none yet)"]), ""]
        ctx_lines = [line(m, strip_tags(m.text, exclude)) for m in context if m.role != "system"
                     and strip_tags(m.text, exclude)]
        if ctx_lines:
            parts += ["## Earlier messages (context only, already remembered)", *ctx_lines, ""]
        parts += ["## NEW messages (extract from these)", *(line(m, t) for m, t in new_msgs)]
        evolve = ctx.setting("evolve.enabled") and ctx.setting("evolve.mode") == "with_extraction"
        value, _ = await self.ask(ctx, "extract", "\n".join(parts), language=language,
                                  retries=ctx.setting("llm.json_retries") + 1,
                                  appendix=SCHEMA_APPENDIX + ("\n" + EVOLVE_WITH_EXTRACTION if evolve else ""),
                                  salvage="operations", schema=ANSWER_SCHEMA)
        dropped = collections.Counter()
        ops = parse_operations(value, dropped)
        if not evolve:
            for op in ops:
                op["evolve"] = None
        ctx.data["extract"] = {"ops": ops, "keys": keys, "dropped": dropped}

    async def _existing(self, ctx: BatchContext, text: str, keys: KeyMap) -> list[str]:
        """Memories the LLM should know: named ones the new text mentions, then the nearest by meaning."""
        limit = ctx.setting("extract.existing_memories")
        if limit <= 0:
            return []
        folded = text.casefold()

        def read(conn):
            rows = conn.execute(
                f"SELECT * FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN ({','.join('?' * len(NAMED_TYPES))})",
                (ctx.chat_id, *NAMED_TYPES)).fetchall()
            return [node_from_row(r) for r in rows]

        named = []
        for node in await self.store.read(read):
            name = field_text(node.fields.get("name")).casefold()
            if mentions_name(name, folded):
                named.append(node)
        named.sort(key=lambda n: (field_text(n.fields.get("name")).casefold(), n.type, n.seq_to or -1))
        chosen = named[:limit]
        if len(chosen) < limit:
            vector = await self.embeddings.embed_query(text[:2000])
            near = await self.nearest(ctx, vector, limit - len(chosen), exclude={n.id for n in chosen})
            chosen += [n for n, _ in near]
        return [memory_line(keys.add(n.id), n) for n in chosen]

    # -- apply: the operations in the batch transaction -------------------------------------------
    def apply(self, ctx: BatchContext, cs: ChangeSet) -> None:
        if ctx.data.get("llm_range"):  # the LLM has read through this batch
            cs.conn.execute("UPDATE chats SET llm_upto = ? WHERE chat_id = ?", (ctx.end, ctx.chat_id))
        plan = ctx.data.get("extract")
        if not plan:
            return
        applier = OpApplier(ctx, cs, plan["keys"])
        applier.run(plan["ops"])
        dropped = plan.get("dropped", collections.Counter()) + applier.dropped
        asked = len(plan["ops"]) + sum(plan.get("dropped", {}).values())
        self.report_dropped(ctx, "extract", asked, len(plan["ops"]) - applier.skipped, dropped)
        ctx.data["llm_created"] = applier.created
        ctx.data["llm_touched"] = applier.touched
        # With the extraction, its evolution is applied above; in `evolve.mode separate` it runs after the batch
        # is embedded and fills in these counts then (EvolveStage).
        evolution = ctx.data.get("evolution") or EvolutionCounts()
        ctx.data["extract_event"] = record_event(
            cs.conn, ctx.chat_id, "extract", msg_range=list(ctx.msg_range), ops=len(plan["ops"]),
            created=len(applier.created), updated=len(applier.updated), skipped=applier.skipped,
            evolution=evolution.to_json(), **({"dropped": dict(dropped)} if dropped else {}))
        made = evolution.connections + evolution.updates
        self.report_dropped(ctx, "evolve", made + sum(evolution.dropped.values()), made, evolution.dropped)

