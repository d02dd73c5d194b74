"""Maintenance after a batch, on cadences: rolling small summaries with hierarchical roll-ups, the
synopsis, reflections, and hierarchical compression of old LLM events, threads and reflections.

Cadences count assistant messages, not runs: maintenance runs when a batch crosses a multiple of
`N x extract.every` assistant messages. That is "every N extractions", derived from the chat itself,
so a replay after a rollback runs the same maintenance at the same places (no counter to undo).
Every write goes through ctx.write (journaled with the batch's range). A failed task degrades: logged,
noticed, the other tasks still run.
"""

from __future__ import annotations

import logging

from ..graph.changes import ChangeSet
from ..graph.model import Node, field_text, new_id, node_from_row
from ..graph.schema import MESSAGE_FIELDS, NODE_TYPES, Strength
from ..llm.base import LLMError
from ..store.events import record_event
from ..tokens import count_tokens, truncate_to_tokens
from .batch import BatchContext, StaleBatch
from .extract import strip_tags
from .prompting import LLMStage, as_list, clean_fields, norm_key
from .sync import load_messages

log = logging.getLogger("stbme.maintain")
SUMMARY_SOURCE_TOKENS = 3000
MAX_ROLLUP_LEVELS = 6
COMPRESSIBLE = tuple(name for name, t in NODE_TYPES.items() if t.compression)


def _active(conn, chat_id: str, where: str = "", args: tuple = ()) -> list[Node]:
    rows = conn.execute(f"SELECT * FROM nodes WHERE chat_id = ? AND archived = 0 {where}"
                        # Content breaks ties, not rowid: a rollback re-inserts rows under new rowids.
                        " ORDER BY coalesce(seq_to, -1), coalesce(seq_from, -1), type, fields, id",
                        (chat_id, *args)).fetchall()
    return [node_from_row(r) for r in rows]


class MaintainStage(LLMStage):
    name = "maintain"

    async def after(self, ctx: BatchContext) -> None:
        if not ctx.data.get("llm_range"):
            return  # maintenance follows the LLM extraction's runs
        llm_from, _ = ctx.data["llm_range"]
        every = ctx.setting("extract.every")
        before, through = await self.store.read(lambda conn: tuple(conn.execute(
            "SELECT count(*) FILTER (WHERE idx < ?), count(*) FROM messages WHERE chat_id = ? AND role = 'assistant'"
            " AND idx <= ?", (llm_from, ctx.chat_id, ctx.end)).fetchone()))

        def due(name: str) -> bool:
            n = ctx.setting(name)
            step = n * every
            return bool(n) and through // step > before // step

        for task, setting in ((self.summarise, "maintain.summary_every"), (self.synopsis, "maintain.synopsis_every"),
                              (self.reflect, "maintain.reflect_every"), (self.compress, "maintain.compress_every")):
            if not due(setting):
                continue
            try:
                await task(ctx)
            except StaleBatch:
                raise
            except LLMError as exc:
                self.skip(ctx, exc, task.__name__)
                return  # the LLM is failing: the batch is redone with every task once it answers

    # -- summaries ------------------------------------------------------------------------------
    async def summarise(self, ctx: BatchContext) -> None:
        """A small summary of the messages since the last one, then roll-ups while a level is full."""
        summaries = await self.store.read(lambda conn: _active(conn, ctx.chat_id, "AND type = 'summary'"))
        covered = max((s.seq_to for s in summaries if s.seq_to is not None), default=-1)
        exclude = ctx.setting("extract.exclude_tags")
        messages = await self.store.read(lambda conn: load_messages(conn, ctx.chat_id, covered + 1, ctx.end))
        lines = [f"#{m.index} [{m.role} {m.name}]: {strip_tags(m.text, exclude)}" for m in messages
                 if m.role != "system" and strip_tags(m.text, exclude)]
        if not lines:
            return
        text = "\n".join(lines)
        if count_tokens(text) > SUMMARY_SOURCE_TOKENS:  # keep the end: the newest state matters most
            text = truncate_to_tokens(text[::-1], SUMMARY_SOURCE_TOKENS, "")[::-1]
        frontier = [s for s in summaries][-3:]
        user = ""
        if frontier:
            user += "## Earlier summaries\n" + "\n".join(field_text(s.fields.get("summary")) for s in frontier) + "\n\n"
        user += "## Messages\n" + text
        value, _ = await self.ask(ctx, "summary", user, language=ctx.data.get("language", "en"))
        summary = field_text(value.get("summary") if isinstance(value, dict) else None)
        if not summary:
            return
        first = messages[0].index

        def write(cs: ChangeSet):
            node = cs.insert_node(Node(id=new_id("n"), chat_id=cs.chat_id, type="summary",
                                       fields={"summary": summary[:1000], "level": 0, "range": f"{first}-{ctx.end}"},
                                       importance=6.0, seq_from=first, seq_to=ctx.end, source="llm"))
            record_event(cs.conn, cs.chat_id, "summary", node_id=node.id, level=0)

        await ctx.write(write, "summary")
        await self.rollup(ctx)

    async def rollup(self, ctx: BatchContext) -> None:
        fan_in = ctx.setting("maintain.summary_fan_in")
        for level in range(MAX_ROLLUP_LEVELS):
            nodes = await self.store.read(lambda conn: _active(
                conn, ctx.chat_id, "AND type = 'summary' AND level = ?", (level,)))
            if len(nodes) <= fan_in:
                return
            group = nodes[:fan_in]
            user = "\n".join(f"[{i}] {field_text(n.fields.get('summary'))}" for i, n in enumerate(group, 1))
            value, _ = await self.ask(ctx, "rollup", user, language=ctx.data.get("language", "en"))
            summary = field_text(value.get("summary") if isinstance(value, dict) else None)
            if not summary:
                return
            await ctx.write(lambda cs: _fold(cs, group, "summary", {"summary": summary[:1200], "level": level + 1,
                                                                    "range": f"{group[0].seq_from}-{group[-1].seq_to}"},
                                             level + 1), "rollup")

    # -- synopsis ---------------------------------------------------------------------------------
    async def synopsis(self, ctx: BatchContext) -> None:
        def read(conn):
            return (_active(conn, ctx.chat_id, "AND type = 'event' AND source = 'llm'"),
                    _active(conn, ctx.chat_id, "AND type = 'character' AND source = 'llm'"),
                    _active(conn, ctx.chat_id, "AND type = 'thread'"),
                    _active(conn, ctx.chat_id, "AND type = 'synopsis'"))

        events, characters, threads, current = await self.store.read(read)
        if len(events) < 3:
            return
        parts = ["## Events", *(f"[#{e.seq_to}] {field_text(e.fields.get('summary'))}" for e in events[-30:])]
        if characters:
            parts += ["## Characters", *(f"{field_text(c.fields.get('name'))}: {field_text(c.fields.get('state'))}"
                                         for c in characters[-12:])]
        if threads:
            parts += ["## Threads", *(f"{field_text(t.fields.get('title'))}: {field_text(t.fields.get('status'))}"
                                      for t in threads[-8:])]
        value, _ = await self.ask(ctx, "synopsis", "\n".join(parts), language=ctx.data.get("language", "en"))
        summary = field_text(value.get("summary") if isinstance(value, dict) else None)
        if not summary:
            return
        fields = {"summary": summary[:1000], "scope": f"0-{ctx.end}"}

        def write(cs: ChangeSet):
            existing = current[-1] if current else None
            if existing is not None and cs.get_node(existing.id) is not None:
                if not existing.locked:
                    cs.update_node(existing.id, fields=fields, seq_to=ctx.end, embedding=None)
                return
            cs.insert_node(Node(id=new_id("n"), chat_id=cs.chat_id, type="synopsis", fields=fields, importance=9.0,
                                seq_from=0, seq_to=ctx.end, source="llm"))

        await ctx.write(write, "synopsis")

    # -- reflection -------------------------------------------------------------------------------
    async def reflect(self, ctx: BatchContext) -> None:
        def read(conn):
            contradictions = conn.execute(
                "SELECT f.fields AS a, t.fields AS b FROM edges e JOIN nodes f ON f.id = e.from_id JOIN nodes t"
                " ON t.id = e.to_id WHERE e.chat_id = ? AND e.relation = 'contradicts' AND e.invalid_at IS NULL"
                " ORDER BY e.created_at DESC, f.fields, t.fields LIMIT 5", (ctx.chat_id,)).fetchall()
            return (_active(conn, ctx.chat_id, "AND type = 'event' AND source = 'llm'"),
                    _active(conn, ctx.chat_id, "AND type = 'character'"),
                    _active(conn, ctx.chat_id, "AND type = 'thread'"), contradictions)

        events, characters, threads, contradictions = await self.store.read(read)
        if len(events) < 2:
            return
        parts = ["## Recent events", *(f"[#{e.seq_to}] {field_text(e.fields.get('summary'))}" for e in events[-6:])]
        named = [c for c in characters if c.source == "llm" or len(c.fields) > 1][-5:]
        if named:
            parts += ["## Characters", *(f"{field_text(c.fields.get('name'))}: {field_text(c.fields.get('state'))}"
                                         for c in named)]
        if threads:
            parts += ["## Threads", *(f"{field_text(t.fields.get('title'))}: {field_text(t.fields.get('status'))}"
                                      for t in threads[-4:])]
        if contradictions:
            parts += ["## Contradictions", *(f"{r['a'][:150]} contradicts {r['b'][:150]}" for r in contradictions)]
        value, _ = await self.ask(ctx, "reflect", "\n".join(parts), language=ctx.data.get("language", "en"))
        if not isinstance(value, dict):
            return
        fields = clean_fields(NODE_TYPES["reflection"].columns, value)
        if not fields.get("insight"):
            return
        try:
            importance = max(5.0, min(10.0, float(value.get("importance", 7))))
        except (TypeError, ValueError):
            importance = 7.0
        recent = [e.id for e in events[-3:]]

        def write(cs: ChangeSet):
            node = cs.insert_node(Node(id=new_id("n"), chat_id=cs.chat_id, type="reflection", fields=fields,
                                       importance=importance, seq_from=ctx.msg_range[0], seq_to=ctx.end,
                                       source="llm"))
            for event_id in recent:
                if cs.get_node(event_id) is not None:
                    cs.add_edge(node.id, event_id, "evolves", Strength.REFLECTION)
            record_event(cs.conn, cs.chat_id, "reflect", node_id=node.id)

        await ctx.write(write, "reflect")

    # -- compression ------------------------------------------------------------------------------
    async def compress(self, ctx: BatchContext) -> None:
        """For each compressible type and level: all but the newest keep_recent nodes, in chunks of fan_in,
        each folded into one node a level up (one LLM call per level for every type's chunks)."""
        max_depth = max(NODE_TYPES[t].compression[2] for t in COMPRESSIBLE)
        for level in range(max_depth):
            chunks = []
            for type_ in COMPRESSIBLE:
                threshold, fan_in, depth, keep = NODE_TYPES[type_].compression
                if level >= depth:
                    continue
                nodes = await self.store.read(lambda conn: _active(
                    conn, ctx.chat_id, "AND type = ? AND level = ? AND source = 'llm' AND locked = 0 AND pinned = 0",
                    (type_, level)))
                if len(nodes) <= max(threshold, 2):
                    continue
                compressible = nodes[:len(nodes) - keep] if keep else nodes
                if len(compressible) < fan_in:
                    continue
                for i in range(0, len(compressible), fan_in):
                    chunk = compressible[i:i + fan_in]
                    if len(chunk) < max(2, fan_in):
                        break
                    chunks.append((type_, chunk))
            if not chunks:
                return
            lines = []
            for g, (type_, chunk) in enumerate(chunks, 1):
                cols = ", ".join(c for c in NODE_TYPES[type_].columns if c not in MESSAGE_FIELDS)
                lines.append(f"## G{g} ({type_}; fields: {cols})")
                lines += [f"- {n.label}: {n.text()}" for n in chunk]
            value, _ = await self.ask(ctx, "compress", "\n".join(lines), language=ctx.data.get("language", "en"),
                                 max_tokens=min(4000, 200 + 250 * len(chunks)))
            answers = {}
            for item in as_list(value, "groups", "results"):
                if isinstance(item, dict) and norm_key(item.get("key") or item.get("group")):
                    answers[norm_key(item.get("key") or item.get("group"))] = item.get("fields") or item
            folds = []
            for g, (type_, chunk) in enumerate(chunks, 1):
                spec = NODE_TYPES[type_]
                fields = clean_fields(spec.columns, answers.get(f"G{g}"))
                for column in spec.required:  # fill what the LLM left out from the children
                    if not fields.get(column):
                        fields[column] = "; ".join(field_text(n.fields.get(column)) for n in chunk
                                                   if field_text(n.fields.get(column)))[:600]
                if all(fields.get(c) for c in spec.required):
                    folds.append((type_, chunk, fields))
            if not folds:
                return
            await ctx.write(lambda cs: [_fold(cs, chunk, type_, fields, level + 1) for type_, chunk, fields in folds],
                            "compress")


def _fold(cs: ChangeSet, children: list[Node], type_: str, fields: dict, level: int) -> str | None:
    """One node a level up: the children's range and top importance, their outside edges moved onto it,
    the children archived under it."""
    current = [cs.get_node(c.id) for c in children]
    if any(c is None or c.archived for c in current):
        return None
    ids = {c.id for c in current}
    seqs = [s for c in current for s in (c.seq_from, c.seq_to) if s is not None]
    node = cs.insert_node(Node(
        id=new_id("n"), chat_id=cs.chat_id, type=type_, fields=fields, level=level, children=[c.id for c in current],
        importance=max(c.importance for c in current), seq_from=min(seqs) if seqs else None,
        seq_to=max(seqs) if seqs else None, scope=current[0].scope, source="llm",
        tags=list(dict.fromkeys(t for c in current for t in c.tags))[:8]))
    marks = ",".join("?" * len(ids))
    for edge in cs.conn.execute(
            f"SELECT * FROM edges WHERE chat_id = ? AND invalid_at IS NULL AND expired_at IS NULL AND"
            f" ((from_id IN ({marks})) + (to_id IN ({marks}))) = 1 ORDER BY rowid",
            (cs.chat_id, *ids, *ids)).fetchall():
        if edge["from_id"] in ids:
            cs.add_edge(node.id, edge["to_id"], edge["relation"], edge["strength"])
        else:
            cs.add_edge(edge["from_id"], node.id, edge["relation"], edge["strength"])
    for child in current:
        cs.update_node(child.id, archived=True, parent_id=node.id)
    record_event(cs.conn, cs.chat_id, "compress", node_id=node.id, children=[c.id for c in current], level=level)
    return node.id
