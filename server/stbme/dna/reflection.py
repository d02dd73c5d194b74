"""Reflection: consolidate a chat's memory layers, then look for repair loops among its stored corrections
and errors and escalate them with the gene GEP picks (pin, lock, importance). One transaction."""

from __future__ import annotations

import sqlite3

from ..graph.changes import ChangeSet
from ..store.events import record_event
from . import assets, dynamics, repair
from .actions import apply_ops


def reflect_chat(conn: sqlite3.Connection, chat_id: str, *, now: float, strategy: str, max_short_term: int,
                 max_long_term: int, decay_days: float, embedder_id: str, detect_loops: bool,
                 gep: bool) -> dynamics.ReflectReport:
    report = dynamics.consolidate(conn, chat_id, now=now, strategy=strategy, max_short_term=max_short_term,
                                  max_long_term=max_long_term, decay_days=decay_days)
    if detect_loops:
        cs = ChangeSet(conn, chat_id, reason="reflect")
        escalation = None
        for first, second, sim, gap in repair.scan_loops(conn, chat_id, embedder_id, now=now):
            loop_type = conn.execute("SELECT type FROM nodes WHERE id = ?", (second,)).fetchone()[0]
            loop_id = repair.record_loop(cs, first, second, loop_type, sim, gap)
            if escalation is None:
                genes = assets.list_genes(conn, enabled_only=True) if gep else list(assets.BUILTIN_GENES)
                escalation = assets.select_gene(genes, [{"type": "repair_loop", "content": ""}])[0]
            if escalation is not None:
                for node_id in (first, second):
                    apply_ops(cs, node_id, escalation.ops("directive"))
            report.loops.append({"id": loop_id, "first_id": first, "second_id": second, "similarity": round(sim, 4)})
        report.touched |= cs.touched_nodes
    record_event(conn, chat_id, "reflect", **{k: v for k, v in report.to_json().items() if k != "chat_id"})
    return report
