"""A-MEM evolution (seed 000): a new memory re-reads related old memories; where it changes how one should be
understood, that memory gets new context and tags (and an evolution history entry), and the two are linked.

Two ways to ask, one way to apply:
- `evolve.mode = with_extraction` (default): the extraction call already shows the LLM the existing memories
  relevant to the new messages; its answer carries, per created memory, the same decision the seed asks for
  (`should_evolve`, `reason`, `suggested_connections`, `neighbor_updates`). No extra call.
- `evolve.mode = separate`: after the batch is committed and embedded, each new memory is shown with its
  nearest memories by vector (any other active memory, the batch's own new ones included) and ONE call for
  the batch answers per memory.

Better than the original: keys map only to memories that were shown (an invented or mistyped key changes
nothing); new context goes into a `context` field instead of overwriting the summary or state; locked memories
are never rewritten. Every change re-embeds the memory, appends to its history and writes an audit event;
connections are events too. Writes are journaled with the batch's message range, so a rollback undoes them.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Any, Callable

import numpy as np

from ..graph.changes import ChangeSet
from ..graph.model import node_from_row
from ..graph.schema import Strength
from ..llm.base import LLMError
from ..store.events import complete_event, record_event
from ..store.queries import nodes_by_ids
from .batch import BatchContext
from .prompting import KeyMap, LLMStage, as_list, memory_line, norm_key

log = logging.getLogger("stbme.evolve")
MAX_NEW = 6
MAX_CONTEXT_CHARS = 600
MAX_TAGS = 8
HISTORY_KEPT = 20
_DECISION_KEYS = ("should_evolve", "neighbor_updates", "suggested_connections", "shouldEvolve", "neighborUpdates")


@dataclasses.dataclass
class EvolutionCounts:
    """The seed's per-run figures: decisions to evolve, links made, memories updated."""
    evolved: int = 0
    connections: int = 0
    updates: int = 0
    # Connections and neighbour updates left out, by reason (a key it was not shown, a locked memory, ...):
    # logged and counted in the LLM usage, not in the seed's figures.
    dropped: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def __iadd__(self, other: "EvolutionCounts") -> "EvolutionCounts":
        self.evolved += other.evolved
        self.connections += other.connections
        self.updates += other.updates
        self.dropped.update(other.dropped)
        return self

    def to_json(self) -> dict:
        return {"evolved": self.evolved, "connections": self.connections, "updates": self.updates}


def _first(data: dict, *names: str) -> Any:
    return next((data[n] for n in names if n in data and data[n] is not None), None)


def decisions_of(value: Any) -> list[dict]:
    """The decisions in an evolution answer: the seed's single object, a list, or {"results": [...]}."""
    if isinstance(value, dict) and any(k in value for k in _DECISION_KEYS):
        return [value]
    return [d for d in as_list(value, "results", "evolutions", "memories", "decisions") if isinstance(d, dict)]


def apply_evolution(cs: ChangeSet, new_id: str, decision: dict, resolve: Callable[[Any], str | None]) -> EvolutionCounts:
    """Apply one memory's decision. `resolve(key)` maps a key the LLM used to a memory it was shown (None for
    anything else). Accepts the seed's names (nodeId, newContext, newTags) and ours (key, new_context, new_tags)."""
    counts = EvolutionCounts()
    if not (decision.get("should_evolve") or decision.get("shouldEvolve")):
        return counts
    counts.evolved = 1
    reason = str(decision.get("reason") or "")[:300]
    now_ms = int(time.time() * 1000)
    connections = _first(decision, "suggested_connections", "suggestedConnections", "connections") or []
    for key in connections if isinstance(connections, list) else []:
        target = resolve(key)
        if not target or cs.get_node(target) is None:
            counts.dropped["bad_reference"] += 1
        elif target != new_id:
            edge = cs.add_edge(new_id, target, "related", Strength.EVOLVED)
            if edge is not None:
                counts.connections += 1
                record_event(cs.conn, cs.chat_id, "evolve_link", from_id=new_id, to_id=target, edge_id=edge.id,
                             reason=reason)
    updates = _first(decision, "neighbor_updates", "neighborUpdates") or []
    for update in updates if isinstance(updates, list) else []:
        if not isinstance(update, dict):
            counts.dropped["not_an_object"] += 1
            continue
        target = resolve(_first(update, "key", "nodeId", "node_id", "id"))
        node = cs.get_node(target) if target else None
        if node is None or node.archived or node.locked or node.id == new_id:
            counts.dropped["bad_reference" if node is None or node.archived else
                           "locked" if node.locked else "self_reference"] += 1
            continue
        context = _first(update, "new_context", "newContext")
        tags = _first(update, "new_tags", "newTags")
        fields, new_tags = dict(node.fields), list(node.tags)
        if isinstance(context, str) and context.strip() and context.strip() != fields.get("context"):
            fields["context"] = context.strip()[:MAX_CONTEXT_CHARS]
        if isinstance(tags, list):
            clean = list(dict.fromkeys(str(t).strip()[:64] for t in tags
                                       if isinstance(t, (str, int)) and not isinstance(t, bool) and str(t).strip()))
            # As the seed: `[]` is the memory's tags now (none); null keeps them. A list of nothing usable
            # ([""], [{}]) is a garbled answer, not a decision to clear.
            if clean or not tags:
                new_tags = clean[:MAX_TAGS]
        if fields == node.fields and new_tags == node.tags:
            continue
        # The seed's history entry {triggeredBy, timestamp (ms), reason}, plus what changed.
        history = list(node.evolution) + [{"triggered_by": new_id, "timestamp": now_ms, "reason": reason,
                                           "context": fields.get("context"), "tags": new_tags}]
        cs.update_node(node.id, fields=fields, tags=new_tags, embedding=None, evolution=history[-HISTORY_KEPT:])
        record_event(cs.conn, cs.chat_id, "evolve", node_id=node.id, triggered_by=new_id, reason=reason)
        counts.updates += 1
    return counts


def add_counts(ctx: BatchContext, counts: EvolutionCounts) -> None:
    """Keep the batch's evolution figures for its progress message."""
    total = ctx.data.setdefault("evolution", EvolutionCounts())
    total += counts


@dataclasses.dataclass
class ShownMemory:
    """One new memory as the separate evolution call showed it: its key (N1), its id, and its neighbours
    by key (M1 -> (memory id, similarity))."""
    key: str
    node_id: str
    neighbours: dict[str, tuple[str, float]]

    def resolve(self, key: Any) -> str | None:
        """The id of the neighbour a key the LLM used names (None for a key it was not shown)."""
        found = self.neighbours.get(norm_key(key) or "")
        return found[0] if found else None


def _named_keys(decision: dict) -> list[str]:
    """The memory keys a decision points at: its connections and the memories its updates rewrite."""
    keys = _first(decision, "suggested_connections", "suggestedConnections", "connections") or []
    keys = list(keys) if isinstance(keys, list) else []
    updates = _first(decision, "neighbor_updates", "neighborUpdates") or []
    keys += [_first(u, "key", "nodeId", "node_id", "id") for u in (updates if isinstance(updates, list) else [])
             if isinstance(u, dict)]
    return [k for k in map(norm_key, keys) if k]


def assign_decisions(decisions: list[dict],
                     shown: list[ShownMemory]) -> tuple[list[tuple[ShownMemory, dict]], list[str]]:
    """Which new memory each decision of a separate evolution answer is about, and why any is left out.

    Ours name it (`new: "N1"`). The seed's shape does not: its call showed one new memory. With several
    shown, a list of them without `new`, as long as the memories shown, is read in their order (a decision
    is about the memory in its place when it points at that memory's neighbours). Any other decision
    without `new` belongs to the memory whose neighbours it points at (its connections and updates): the
    one with the most of them shown, then the nearest (their similarities summed)."""
    by_key = {m.key: m for m in shown}
    positional = len(decisions) == len(shown) and not any(_first(d, "new") is not None for d in decisions)
    chosen, left_out = [], []
    for place, decision in enumerate(decisions):
        named = _first(decision, "new", "node_id", "nodeId", "id")
        if named is not None:
            memory = by_key.get(norm_key(named))
            if memory is None:
                left_out.append(f"it names {str(named)[:20]!r}, which is none of {', '.join(by_key)}")
            else:
                chosen.append((memory, decision))
            continue
        if len(shown) == 1:
            chosen.append((shown[0], decision))  # the seed's own case: one call, one new memory
            continue
        keys = _named_keys(decision)
        if positional and (not keys or any(k in shown[place].neighbours for k in keys)):
            chosen.append((shown[place], decision))
            continue
        scored = sorted(((sum(k in m.neighbours for k in keys), sum(m.neighbours[k][1] for k in keys
                                                                      if k in m.neighbours), m) for m in shown),
                        key=lambda t: (-t[0], -t[1]))
        best = [m for count, sim, m in scored if count and (count, sim) == scored[0][:2]]
        if len(best) == 1:
            chosen.append((best[0], decision))
        elif decision.get("should_evolve") or decision.get("shouldEvolve"):
            left_out.append("it does not say which new memory it is about, and points as much at the neighbours of "
                            + " and ".join(m.key for m in best) if best else
                            "it does not say which new memory it is about, and names no memory shown")
    return chosen, left_out


class EvolveStage(LLMStage):
    """evolve.mode = separate: one call per batch, after the new memories are embedded."""

    name = "evolve"

    async def after(self, ctx: BatchContext) -> None:
        created = list(ctx.data.get("llm_created", []))
        if not created or not ctx.setting("evolve.enabled") or ctx.setting("evolve.mode") != "separate":
            return
        rows = await self.store.read(lambda conn: nodes_by_ids(
            conn, ctx.chat_id, created, where="AND archived = 0 AND embedding IS NOT NULL"))
        by_id = {r["id"]: node_from_row(r) for r in rows}
        new_nodes = [by_id[n] for n in created if n in by_id][:MAX_NEW]
        keys = KeyMap("M")
        shown: list[ShownMemory] = []
        lines = []
        for i, node in enumerate(new_nodes, 1):
            # Any other active memory may be a neighbour, the batch's own new ones included (seed 000).
            near = await self.nearest(ctx, np.asarray(node.embedding), ctx.setting("evolve.neighbors"),
                                      exclude={node.id}, min_similarity=ctx.setting("evolve.min_similarity"))
            if not near:
                continue
            shown.append(ShownMemory(f"N{i}", node.id, {keys.add(n.id): (n.id, sim) for n, sim in near}))
            lines.append(f"## New memory {memory_line(f'N{i}', node)}")
            lines.append("Nearest existing memories:")
            lines += [f"{memory_line(keys.add(n.id), n)} similarity {sim:.2f}" for n, sim in near]
            lines.append("")
        if not shown:
            return
        try:
            value, _ = await self.ask(ctx, "evolve", "\n".join(lines), language=ctx.data.get("language", "en"),
                                      salvage="results")
        except LLMError as exc:
            self.skip(ctx, exc, "memory evolution")
            return
        chosen, left_out = assign_decisions(decisions_of(value), shown)
        for why in left_out:
            self.live.notice("info", f"memory evolution for messages {ctx.start}-{ctx.end}: a decision was not "
                             f"applied: {why}", ctx.chat_id)
        if not chosen:
            return
        event_id = ctx.data.get("extract_event")

        def write(cs: ChangeSet) -> EvolutionCounts:
            counts = EvolutionCounts()
            for memory, decision in chosen:
                counts += apply_evolution(cs, memory.node_id, decision, memory.resolve)
            if event_id is not None:  # the batch's extract event was written before this ran
                complete_event(cs.conn, event_id, evolution=counts.to_json())
            return counts

        counts = await ctx.write(write, "evolve")
        add_counts(ctx, counts)
        made = counts.connections + counts.updates
        self.report_dropped(ctx, "evolve", made + sum(counts.dropped.values()), made, counts.dropped)
