"""A-MEM evolution (after the batch committed and its memories are embedded): each new LLM memory is
shown with its nearest older memories; ONE call for the batch answers, per new memory, should_evolve,
suggested_connections and neighbor_updates (new context, new tags), as in the A-MEM contract.

Better than the original: neighbours are named by keys that map only to the neighbours shown for that
memory (the original accepted any id, so it could rewrite unrelated memories); new context goes into
a `context` field instead of overwriting the memory's summary or state; locked memories are never
rewritten. Each change re-embeds the memory, appends to its evolution history and writes an audit
event. Writes go through ctx.write: journaled with the batch's message range, undone by a rollback.
A failed call degrades (logged + notice): the batch's memories stay.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..graph.changes import ChangeSet
from ..graph.model import node_from_row
from ..graph.schema import Strength
from ..llm.base import LLMError
from ..store.events import record_event
from ..store.queries import nodes_by_ids
from .batch import BatchContext
from .prompting import KeyMap, LLMStage, as_list, memory_line, norm_key

log = logging.getLogger("stbme.evolve")
MAX_NEW = 6


class EvolveStage(LLMStage):
    name = "evolve"

    async def after(self, ctx: BatchContext) -> None:
        created = [n for n in ctx.data.get("llm_created", [])]
        if not created or not ctx.setting("evolve.enabled"):
            return
        rows = await self.store.read(lambda conn: nodes_by_ids(
            conn, ctx.chat_id, created, where="AND archived = 0 AND embedding IS NOT NULL"))
        by_id = {r["id"]: node_from_row(r) for r in rows}
        new_nodes = [by_id[n] for n in created if n in by_id][:MAX_NEW]
        keys = KeyMap("M")
        plan: dict[str, tuple[str, dict[str, str]]] = {}
        lines = []
        for i, node in enumerate(new_nodes, 1):
            near = await self.nearest(ctx, np.asarray(node.embedding), ctx.setting("evolve.neighbors"),
                                 exclude=set(created), min_similarity=ctx.setting("evolve.min_similarity"))
            if not near:
                continue
            shown = {keys.add(n.id): n.id for n, _ in near}
            plan[f"N{i}"] = (node.id, shown)
            lines.append(f"## New memory {memory_line(f'N{i}', node)}")
            lines.append("Nearest existing memories:")
            lines += [f"{memory_line(keys.add(n.id), n)} similarity {sim:.2f}" for n, sim in near]
            lines.append("")
        if not plan:
            return
        try:
            value, _ = await self.ask(ctx, "evolve", "\n".join(lines), language=ctx.data.get("language", "en"))
        except LLMError as exc:
            self.skip(ctx, exc, "memory evolution")
            return
        results = as_list(value, "results", "evolutions", "memories")
        if len(plan) == 1 and len(results) == 1 and isinstance(results[0], dict) and "new" not in results[0]:
            results[0]["new"] = next(iter(plan))  # the seed's single-memory shape
        decisions = []
        for result in results:
            if not isinstance(result, dict) or not result.get("should_evolve"):
                continue
            entry = plan.get(norm_key(result.get("new") or result.get("node_id") or result.get("id")))
            if entry is not None:
                decisions.append((entry, result))
        if decisions:
            await ctx.write(lambda cs: apply_evolution(cs, decisions), "evolve")


def apply_evolution(cs: ChangeSet, decisions) -> int:
    """Links to real neighbour ids, context and tag updates, history and audit events. Returns changes."""
    changes = 0
    now = time.time()
    for (new_id, shown), result in decisions:
        reason = str(result.get("reason") or "")[:300]
        connections = result.get("suggested_connections") or result.get("connections") or []
        for key in connections if isinstance(connections, list) else []:
            target = shown.get(norm_key(key))
            if target and cs.get_node(target) is not None and cs.add_edge(new_id, target, "related", Strength.EVOLVED):
                changes += 1
        updates = result.get("neighbor_updates") or []
        for update in updates if isinstance(updates, list) else []:
            if not isinstance(update, dict):
                continue
            target = shown.get(norm_key(update.get("key") or update.get("nodeId") or update.get("id")))
            node = cs.get_node(target) if target else None
            if node is None or node.archived or node.locked:
                continue
            context = update.get("new_context", update.get("newContext"))
            tags = update.get("new_tags", update.get("newTags"))
            fields, new_tags = dict(node.fields), list(node.tags)
            if isinstance(context, str) and context.strip() and context.strip() != fields.get("context"):
                fields["context"] = context.strip()[:600]
            if isinstance(tags, list):
                clean = list(dict.fromkeys(str(t).strip()[:64] for t in tags if isinstance(t, (str, int)) and str(t).strip()))
                if clean:
                    new_tags = clean[:8]
            if fields == node.fields and new_tags == node.tags:
                continue
            history = list(node.evolution) + [{"triggered_by": new_id, "at": now, "reason": reason,
                                               "context": fields.get("context"), "tags": new_tags}]
            cs.update_node(node.id, fields=fields, tags=new_tags, embedding=None, evolution=history[-20:])
            record_event(cs.conn, cs.chat_id, "evolve", node_id=node.id, triggered_by=new_id, reason=reason)
            changes += 1
    return changes
