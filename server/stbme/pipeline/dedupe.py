"""Dedupe: before the extraction's new memories are written, each one that is very similar (cosine >=
dedupe.threshold) to existing memories goes to ONE batched LLM call that decides add / merge into an
existing memory / skip. Runs in prepare, so its decisions are applied in the batch transaction.

A failed dedupe call degrades: the memories are added as extracted (logged and noticed), because a
possible duplicate is better than a lost memory.
"""

from __future__ import annotations

import logging

from ..graph.model import node_text
from ..graph.schema import NODE_TYPES
from ..llm.base import LLMError
from .batch import BatchContext
from .extract import CREATABLE
from .prompting import KeyMap, LLMStage, as_list, clean_fields, memory_line, norm_key

log = logging.getLogger("stbme.dedupe")


class DedupeStage(LLMStage):
    name = "dedupe"

    async def prepare(self, ctx: BatchContext) -> None:
        plan = ctx.data.get("extract")
        if not plan or not ctx.setting("dedupe.enabled"):
            return
        threshold = ctx.setting("dedupe.threshold")
        k = ctx.setting("dedupe.neighbors")
        creates = [op for op in plan["ops"] if op["op"] == "create" and op["type"] in CREATABLE
                   and not NODE_TYPES[op["type"]].latest_only]  # latest-only types merge by name anyway
        texts = [node_text(clean_fields(NODE_TYPES[op["type"]].columns, op["fields"])) for op in creates]
        candidates = [(op, t) for op, t in zip(creates, texts) if t]
        if not candidates:
            return
        vectors = await self.embeddings.embed_texts([t for _, t in candidates])
        keys = KeyMap("M")
        lines, asked = [], {}
        for i, ((op, text), vec) in enumerate(zip(candidates, vectors), 1):
            near = await self.nearest(ctx, vec, k)
            if not near or near[0][1] < threshold:
                continue
            new_key = f"N{i}"
            asked[new_key] = (op, {keys.add(n.id): n for n, _ in near})
            lines.append(f"## New memory {new_key} ({op['type']}): {text}")
            lines += [f"{memory_line(keys.add(n.id), n)} similarity {sim:.2f}" for n, sim in near]
            lines.append("")
        ctx.data["dedupe_checked"] = len(asked)
        if not asked:
            return
        try:
            value, _ = await self.ask(ctx, "dedupe", "\n".join(lines), language=ctx.data.get("language", "en"),
                                      salvage="decisions")
        except LLMError as exc:
            self.skip(ctx, exc, "duplicate check")
            return
        for decision in as_list(value, "decisions", "results"):
            if not isinstance(decision, dict):
                continue
            entry = asked.get(norm_key(decision.get("new") or decision.get("node_id") or decision.get("id")))
            if entry is None:
                continue
            op, shown = entry
            action = str(decision.get("action") or "").lower()
            if action == "skip":
                op["_skip"] = True
            elif action in ("merge", "update"):
                target_key = norm_key(decision.get("target") or decision.get("merge_target_id"))
                target = shown.get(target_key) if target_key else None  # only a memory shown for THIS one
                if target is None or target.locked:
                    continue  # an unusable answer keeps the memory
                merged = decision.get("fields") or decision.get("merged_fields")
                spec = NODE_TYPES[target.type]
                fields = clean_fields(spec.columns, merged) if isinstance(merged, dict) else {}
                if not fields:  # fill the target's empty fields from the new memory
                    fields = {k: v for k, v in clean_fields(spec.columns, op["fields"]).items()
                              if not target.fields.get(k)}
                op["fields"] = fields
                op["_merge_into"] = target.id
