"""The signal stage of the batch pipeline: user signals become directive memories.

- `prepare`: find the signals in the batch's user messages, embed them, and decide each one against the
  directives made before it: a duplicate (same type, similar above 0.9, said within the hour, or the same
  words at any time) reinforces the old memory, under every strategy; a new signal the chat's strategy
  remembers goes to the best gene (GEP scoring), which usually creates a directive; a correction or error
  like one said within 7 days is a repair loop. "Said" is the messages' story time (`send_date`), the wall
  clock only without one (`repair`).
  A directive is used when the user says it: made or repeated, its `last_access` is when it was said and a
  repeat counts in `access_count` (recall shows directives in every reply and does not count that), so the
  strategy's decay and reinforce draws (dna/dynamics.py) follow what the user keeps saying.
- `apply`: write those decisions through the batch's ChangeSet, so a rollback undoes them exactly.
- `after`: corrections fix the memory they contradict (nearest neighbours that contain the corrected
  words, among memories of earlier messages, whichever batch made them). Journaled with the batch.

Every decision depends only on the messages and the memories of earlier messages, never on how the
messages were cut into batches, so reprocessing after a rollback ends where a fresh ingest ends.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Awaitable, Callable

import numpy as np

from ..graph.changes import ChangeSet
from ..graph.model import Node, node_from_row, node_text, stable_id
from ..graph.schema import MESSAGE_FIELDS, Strength
from ..hashing import text_hash
from ..policy import REINFORCE_STEP
from ..embed import EmbeddingService
from ..pipeline.batch import BaseStage, BatchContext
from ..store import Store
from ..store.events import record_event
from . import assets, repair
from .actions import apply_ops
from .dynamics import DIRECTIVE_START_WEIGHT
from .signals import SIGNAL_TYPES, Signal, best_per_unit, extract_signals
from .story_clock import send_date_seconds
from .strategy import Strategy

DEFAULT_IMPORTANCE = {"correction": 8.0, "error": 8.0, "decision": 7.0, "preference": 7.0, "workflow": 7.0}
# Without GEP (dna.gep_enabled = false): remember every signal; corrections fix what they contradict.
PLAIN_GENE = assets.Gene("none", "No GEP", "", [{"type": t, "pattern": ""} for t in SIGNAL_TYPES],
                         [{"op": "create_directive"}, {"op": "update_target"}])
MAX_TARGET_CANDIDATES = 200


@dataclasses.dataclass
class Plan:
    signal: Signal
    vector: np.ndarray
    outcome: str                      # created | reinforced | ignored
    moment: float                     # when it was said (story time, else the wall clock)
    node_id: str | None = None
    gene: assets.Gene | None = None
    score: float = 0.0
    similarity: float | None = None   # reinforced: similarity to the memory reinforced
    loop: tuple[str, float, float] | None = None   # (earlier memory id, similarity, time gap)


def directive_fields(sig: Signal) -> dict:
    fields = {"content": sig.content}
    if sig.type == "correction":
        if sig.wrong:
            fields["wrong"] = sig.wrong
        if sig.right:
            fields["right"] = sig.right
    return fields


def chat_signals(messages, *, min_confidence: float, scope: str) -> list[Signal]:
    """The signals of a batch's user messages, one per unit of text."""
    found = []
    for msg in messages:
        if msg.role == "user" and msg.text.strip():
            found += extract_signals(msg.text, min_confidence=min_confidence, scope=scope, index=msg.index)
    return best_per_unit(found)


class SignalStage(BaseStage):
    name = "dna"

    def __init__(self, *, store: Store, embeddings: EmbeddingService,
                 embed_pending: Callable[[str], Awaitable[int]] | None = None):
        self.store = store
        self.embeddings = embeddings
        self.embed_pending = embed_pending   # embeds a chat's memories whose embedding was deferred

    def cuts_batch(self, msg, setting) -> bool:
        """A correction changes memories already made (`after`): the batch must end with its group, so the
        groups after it are read corrected, as when each group is its own batch."""
        if msg.role != "user" or not setting("dna.signals") or not msg.text.strip():
            return False
        return any(s.type == "correction" and s.wrong for s in chat_signals(
            [msg], min_confidence=setting("dna.signal_confidence_threshold"), scope=setting("dna.signal_scope")))

    async def prepare(self, ctx: BatchContext) -> None:
        ctx.data["dna"] = []
        if not ctx.setting("dna.signals"):
            return
        signals = chat_signals(ctx.messages, min_confidence=ctx.setting("dna.signal_confidence_threshold"),
                               scope=ctx.setting("dna.signal_scope"))
        if not signals:
            return
        now = time.time()
        embedder_id = self.embeddings.id
        said = {m.index: send_date_seconds(m.send_date) for m in ctx.messages}
        types = {s.type for s in signals} | set(repair.LOOP_TYPES)

        def read(conn):
            genes, capsule_strategy = assets.genes_for_chat(conn, ctx.setting("dna.capsule"))
            known = repair.load_directives(conn, ctx.chat_id, embedder_id, types=tuple(sorted(types)),
                                           before_index=ctx.start)
            return genes, capsule_strategy, known

        genes, capsule_strategy, known = await self.store.read(read)
        strategy = Strategy(capsule_strategy or ctx.setting("dna.evolution_strategy"))
        vectors = await self.embeddings.embed_texts([node_text(directive_fields(s)) for s in signals])
        gep = ctx.setting("dna.gep_enabled")
        loops = ctx.setting("dna.repair_loop_detection")
        plans = []
        for sig, vec in zip(signals, vectors):
            moment = now if said.get(sig.index) is None else said[sig.index]  # story time, else the wall clock
            dup = repair.find_duplicate(sig.type, vec, sig.content, known, moment, loops=loops)
            if dup is not None:  # not a new memory: the strategy's remember threshold is for new ones
                plans.append(Plan(sig, vec, "reinforced", moment, dup[0].id, similarity=dup[1]))
                continue
            if not strategy.should_remember(sig.confidence):
                continue
            gene, score = assets.select_gene(genes, [sig.to_json()]) if gep else (PLAIN_GENE, 1.0)
            plan = Plan(sig, vec, "ignored", moment, gene=gene, score=score)
            if gene is not None and gene.has("create_directive"):
                # Made of its message and words, as a message's memories are: rankings break ties by id, so a
                # random one ranked the same chat differently after each ingest (docs/evaluation.md).
                plan.outcome = "created"
                plan.node_id = stable_id("n", ctx.chat_id, "directive", sig.index, sig.type, sig.content)
                partner = repair.find_loop_partner(sig.type, vec, sig.content, known, moment) if loops else None
                if partner is not None:
                    plan.loop = (partner[0].id, partner[1], moment - partner[0].moment)
                    partner[0].in_loop = True
                known.append(repair.Directive(plan.node_id, sig.type, vec, moment, sig.index, sig.content,
                                              in_loop=partner is not None))
            plans.append(plan)
        escalation = None
        if any(p.loop for p in plans):
            escalation = (assets.select_gene(genes, [{"type": "repair_loop", "content": ""}])[0] if gep else
                          next(g for g in assets.BUILTIN_GENES if g.id == "gene_repair_escalate"))
        ctx.data["dna"] = plans
        ctx.data["dna_escalation"] = escalation

    def apply(self, ctx: BatchContext, cs: ChangeSet) -> None:
        plans: list[Plan] = ctx.data.get("dna") or []
        corrections = ctx.data["dna_corrections"] = []
        embedder_id = self.embeddings.id
        now = time.time()
        for plan in plans:
            sig = plan.signal
            cs.msg_range = ctx.range_of(sig.index)
            event = {"type": sig.type, "confidence": sig.confidence, "message": sig.index, "ooc": sig.ooc,
                     "source": sig.source, "outcome": plan.outcome, "node_id": plan.node_id}
            if plan.outcome == "reinforced":
                node = cs.get_node(plan.node_id)
                if node is not None:  # the plan's +0.1, and a use: said again now
                    cs.update_node(node.id, weight=round(min(1.0, node.weight + REINFORCE_STEP), 6),
                                   access_count=node.access_count + 1,
                                   last_access=max(node.last_access or 0.0, plan.moment))
                record_event(cs.conn, cs.chat_id, "reinforce", node_id=plan.node_id, reason="duplicate signal",
                             similarity=round(plan.similarity or 0, 4), message=sig.index)
                continue
            if plan.gene is not None:
                event.update(gene_id=plan.gene.id, score=plan.score)
                if plan.gene is not PLAIN_GENE:
                    assets.mark_used(cs.conn, plan.gene.id, now)
                    record_event(cs.conn, cs.chat_id, "gene_use", gene_id=plan.gene.id, score=plan.score,
                                 signal_type=sig.type, node_id=plan.node_id, message=sig.index)
            record_event(cs.conn, cs.chat_id, "signal", **event)
            if plan.outcome != "created":
                continue
            fields = directive_fields(sig)
            text = node_text(fields)
            importance = next((a["importance"] for a in plan.gene.actions
                               if a["op"] == "create_directive" and "importance" in a), DEFAULT_IMPORTANCE[sig.type])
            plan.node_id = cs.insert_node(Node(   # a random id if that one is taken (ChangeSet.insert_node)
                id=plan.node_id, chat_id=cs.chat_id, type=sig.type, fields=fields, importance=importance,
                weight=DIRECTIVE_START_WEIGHT, last_access=plan.moment,
                seq_from=sig.index, seq_to=sig.index, tags=["dna"] + (["ooc"] if sig.ooc else []),
                embedding=np.asarray(plan.vector, dtype=np.float32), embedder=embedder_id, text_hash=text_hash(text),
                evolution=[{"kind": "signal", "confidence": sig.confidence, "pattern": sig.pattern,
                            "gene": plan.gene.id, "score": plan.score}], source="dna")).id
            apply_ops(cs, plan.node_id, plan.gene.ops("directive"))
            if plan.loop is not None:
                partner_id, similarity, gap = plan.loop
                repair.record_loop(cs, partner_id, plan.node_id, sig.type, similarity, gap)
                escalation = ctx.data.get("dna_escalation")
                if escalation is not None:
                    for node_id in (partner_id, plan.node_id):
                        apply_ops(cs, node_id, escalation.ops("directive"))
                    if escalation is not PLAIN_GENE:
                        assets.mark_used(cs.conn, escalation.id, now)
                        record_event(cs.conn, cs.chat_id, "gene_use", gene_id=escalation.id, signal_type="repair_loop",
                                     node_id=plan.node_id, partner_id=partner_id)
            if sig.type == "correction" and sig.wrong and (plan.gene.has("update_target") or plan.gene.ops("target")):
                corrections.append(plan)

    async def after(self, ctx: BatchContext) -> None:
        plans = ctx.data.get("dna_corrections") or []
        if plans and self.embed_pending is not None:
            await self.embed_pending(ctx.chat_id)  # the target is chosen by similarity: it needs its vector
        for plan in plans:
            await ctx.write(lambda cs, plan=plan: correct_target(
                cs, directive_id=plan.node_id, wrong=plan.signal.wrong, right=plan.signal.right,
                vector=plan.vector, before_index=plan.signal.index, update=plan.gene.has("update_target"),
                target_ops=plan.gene.ops("target")), reason="dna:correct", msg_range=ctx.range_of(plan.signal.index))


# -- corrections ----------------------------------------------------------------------------------------
def _term_regex(term: str) -> re.Pattern:
    escaped = re.escape(term)
    if term.isascii():
        return re.compile(rf"(?<![\w]){escaped}(?![\w])", re.I)
    return re.compile(escaped)


def _replace(value, pattern: re.Pattern, right: str):
    if isinstance(value, str):
        return pattern.sub(lambda m: right[:1].upper() + right[1:] if m.group(0)[:1].isupper() else right, value)
    if isinstance(value, list):
        return [_replace(v, pattern, right) for v in value]
    if isinstance(value, dict):
        # The names ST gives the chat's speakers are as the user set them: only the memory's own words change.
        return {k: v if k == "name" or k in MESSAGE_FIELDS else _replace(v, pattern, right) for k, v in value.items()}
    return value


def correct_target(cs: ChangeSet, *, directive_id: str, wrong: str, right: str | None, vector: np.ndarray,
                   before_index: int | None, update: bool, target_ops: list[dict]) -> dict | None:
    """Find the memory a correction contradicts and fix it: rewrite the wrong words into the right ones,
    or, when that is impossible, invalidate it (archive, restorable). A locked memory is only linked."""
    wrong_re = _term_regex(wrong)
    right_re = _term_regex(right) if right else None
    like = "%" + wrong.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = cs.conn.execute(
        f"SELECT * FROM nodes WHERE chat_id = ? AND archived = 0 AND id != ? AND type NOT IN"
        f" ({','.join('?' * len(SIGNAL_TYPES))}) AND (? IS NULL OR seq_to IS NULL OR seq_to < ?)"
        " AND fields LIKE ? ESCAPE '\\' ORDER BY coalesce(seq_to, -1) DESC, rowid DESC LIMIT ?",
        (cs.chat_id, directive_id, *SIGNAL_TYPES, before_index, before_index, like, MAX_TARGET_CANDIDATES)).fetchall()
    best, best_key = None, None
    for row in rows:
        node = node_from_row(row)
        text = node_text(node.fields)
        if not wrong_re.search(text) or (right_re is not None and right_re.search(text)):
            continue  # must say the wrong thing, and not already the right one (that is the correction itself)
        sim = repair.cosine(vector, node.embedding) if node.embedding is not None else 0.0
        key = (sim, node.seq_to if node.seq_to is not None else -1)
        if best_key is None or key > best_key:
            best, best_key = node, key
    if best is None:
        return None
    action = "linked"
    if update:
        new_fields = _replace(best.fields, wrong_re, right) if right else best.fields
        if best.locked:
            cs.add_edge(directive_id, best.id, "contradicts", Strength.STATE_CHANGE)
            action = "kept (locked)"
        elif new_fields != best.fields:
            evolution = best.evolution + [{"kind": "dna_correction", "by": directive_id, "wrong": wrong,
                                           "right": right, "at": time.time(), "before": best.fields}]
            cs.update_node(best.id, fields=new_fields, embedding=None, evolution=evolution)
            cs.add_edge(directive_id, best.id, "updates", Strength.STATE_CHANGE)
            action = "updated"
        else:
            cs.update_node(best.id, archived=True)
            cs.add_edge(directive_id, best.id, "contradicts", Strength.STATE_CHANGE)
            action = "invalidated"
    if target_ops:
        apply_ops(cs, best.id, target_ops)
    result = {"directive_id": directive_id, "target_id": best.id, "action": action, "wrong": wrong, "right": right,
              "similarity": round(best_key[0], 4)}
    record_event(cs.conn, cs.chat_id, "correct", **result)
    return result
