"""Memory dynamics (DNA Memory): weight, decay, archiving and the working -> short-term -> long-term layers.

Every memory has a weight (0-1). Recall reinforces what it injects (+0.1, see recall/read_path.py); a
decay pass lowers the weight of memories unused for more than `decay_days`, by `decay_rate` per day since
the chat's previous pass, for the memories the strategy's draw picks; under `forget_threshold` a memory is
archived, never deleted. Reflection consolidates the layers. Pinned and locked memories and rules are
exempt from decay and from being archived.

These are synchronous functions of a connection (one transaction each, on the store's writer thread).
The time is a parameter (`now`), so tests run them over simulated days. Archiving goes through a
ChangeSet with no message range: not message-derived, so a chat rollback never undoes it.
"""

from __future__ import annotations

import dataclasses
import random
import sqlite3

from ..graph.changes import ChangeSet, ensure_chat
from ..policy import REINFORCE_STEP
from ..store.events import record_event
from .strategy import DAY, REINFORCE_MIN_ACCESS, Strategy, chat_rng

# Where a directive made from a user signal starts. Below 1 so that what the seed adds to it shows: a
# repeated signal, a recall injection or the strategy's reinforce draw (+0.1 each, capped at 1) needs five
# uses to reach full weight. Above `dna.forget_threshold` (0.2) by three `dna.decay_rate` (0.1) days, so an
# unused directive is archived on its fourth decayed pass after `dna.decay_days`: at the strategies'
# decay weights that is on average 7 + 4/0.8 = 12 idle days (cleanup), 17 (conservative), 27 (balanced)
# or 87 (aggressive); at 1.0 it would take nine passes and every repeat in the first hour would be lost.
DIRECTIVE_START_WEIGHT = 0.5
LAYERS = ("working", "short_term", "long_term")
EXEMPT_TYPES = ("rule",)
# The raw per-message events are the chat's own record: they lose weight (and rank) when unused, but
# forgetting never archives them, and they do not count against the long-term capacity.
RAW_SOURCES = ("heuristic",)


@dataclasses.dataclass
class DnaState:
    chat_id: str
    rng_counter: int = 0
    last_decay_at: float | None = None
    last_reflect_at: float | None = None
    reflect_rev: int = -1


def load_state(conn: sqlite3.Connection, chat_id: str) -> DnaState:
    row = conn.execute("SELECT * FROM dna_state WHERE chat_id = ?", (chat_id,)).fetchone()
    return DnaState(**dict(row)) if row else DnaState(chat_id)


def save_state(conn: sqlite3.Connection, state: DnaState) -> None:
    conn.execute("INSERT OR REPLACE INTO dna_state (chat_id, rng_counter, last_decay_at, last_reflect_at, reflect_rev)"
                 " VALUES (?,?,?,?,?)", (state.chat_id, state.rng_counter, state.last_decay_at,
                                         state.last_reflect_at, state.reflect_rev))


def next_rng(state: DnaState) -> random.Random:
    """The chat's generator for this pass; the counter moves on so the next pass draws anew."""
    rng = chat_rng(state.chat_id, state.rng_counter)
    state.rng_counter += 1
    return rng


def is_exempt(row: sqlite3.Row) -> bool:
    return bool(row["pinned"]) or bool(row["locked"]) or row["type"] in EXEMPT_TYPES


@dataclasses.dataclass
class DecayReport:
    chat_id: str
    strategy: str
    step_days: float
    checked: int = 0
    decayed: int = 0
    archived: list[str] = dataclasses.field(default_factory=list)
    touched: set[str] = dataclasses.field(default_factory=set)

    def to_json(self) -> dict:
        return {"chat_id": self.chat_id, "strategy": self.strategy, "step_days": round(self.step_days, 4),
                "checked": self.checked, "decayed": self.decayed, "archived": self.archived}


def archive_node(cs: ChangeSet, node_id: str, reason: str, **data) -> None:
    cs.update_node(node_id, archived=True)
    record_event(cs.conn, cs.chat_id, "archive", node_id=node_id, reason=reason, **data)


def decay_chat(conn: sqlite3.Connection, chat_id: str, *, now: float, strategy: str, decay_days: float,
               decay_rate: float, forget_threshold: float, max_step_days: float = 1.0) -> DecayReport:
    """One decay pass. The step is the time since the chat's previous pass in days, at most
    `max_step_days` (the scheduler's interval), so a chat left alone for a month is not wiped at once."""
    ensure_chat(conn, chat_id)
    state = load_state(conn, chat_id)
    elapsed = (now - state.last_decay_at) / DAY if state.last_decay_at is not None else max_step_days
    step = max(0.0, min(elapsed, max_step_days))
    report = DecayReport(chat_id, strategy, step)
    chooser = Strategy(strategy, next_rng(state))
    cs = ChangeSet(conn, chat_id, reason="decay")
    rows = conn.execute("SELECT id, type, source, weight, pinned, locked, access_count, last_access, created_at FROM nodes"
                        " WHERE chat_id = ? AND archived = 0 ORDER BY rowid", (chat_id,)).fetchall()
    for row in rows:
        if is_exempt(row):
            continue
        report.checked += 1
        last_used = row["last_access"] or row["created_at"]
        if step <= 0 or not chooser.should_decay(last_used, now, decay_days):
            continue
        weight = max(0.0, round(row["weight"] - decay_rate * step, 6))
        report.decayed += 1
        conn.execute("UPDATE nodes SET weight = ? WHERE id = ?", (weight, row["id"]))
        if weight < forget_threshold and row["source"] not in RAW_SOURCES:
            archive_node(cs, row["id"], "decay", weight=weight, idle_days=round((now - last_used) / DAY, 2))
            report.archived.append(row["id"])
    state.last_decay_at = now
    save_state(conn, state)
    report.touched = cs.touched_nodes
    if report.decayed:
        record_event(conn, chat_id, "decay", **{k: v for k, v in report.to_json().items() if k != "chat_id"})
    return report


@dataclasses.dataclass
class ReflectReport:
    chat_id: str
    to_short_term: int = 0
    to_long_term: int = 0
    reinforced: int = 0
    archived: list[str] = dataclasses.field(default_factory=list)
    layers: dict[str, int] = dataclasses.field(default_factory=dict)
    touched: set[str] = dataclasses.field(default_factory=set)
    loops: list[dict] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict:
        return {"chat_id": self.chat_id, "to_short_term": self.to_short_term, "to_long_term": self.to_long_term,
                "reinforced": self.reinforced, "archived": self.archived, "layers": self.layers,
                "repair_loops": self.loops}


def layer_counts(conn: sqlite3.Connection, chat_id: str) -> dict[str, int]:
    counts = dict(conn.execute("SELECT layer, count(*) FROM nodes WHERE chat_id = ? AND archived = 0 GROUP BY layer",
                               (chat_id,)).fetchall())
    return {layer: counts.get(layer, 0) for layer in LAYERS}


def consolidate(conn: sqlite3.Connection, chat_id: str, *, now: float, strategy: str, max_short_term: int,
                max_long_term: int, decay_days: float) -> ReflectReport:
    """Move memories through the layers: working -> short-term (everything since the last reflection);
    the strategy's reinforce draw for each memory used more than 3 times and used again since the last
    reflection (+0.1 weight; a short-term one moves to long-term); short-term -> long-term also when the
    layer is over capacity (oldest first); over long-term capacity, archive the weakest memories idle for
    more than decay_days (exempt ones never).

    "Used again since": recalled since (its `last_access`) or changed since (a directive said again; its
    `rev` past the last reflection's). Every pass draws for those only, so a memory used often long ago is
    not reinforced for ever, and the draw is not spent only once, at promotion, as before."""
    ensure_chat(conn, chat_id)
    state = load_state(conn, chat_id)
    chooser = Strategy(strategy, next_rng(state))
    report = ReflectReport(chat_id)
    report.to_short_term = conn.execute(
        "UPDATE nodes SET layer = 'short_term' WHERE chat_id = ? AND archived = 0 AND layer = 'working'",
        (chat_id,)).rowcount
    used = conn.execute(
        "SELECT id, access_count, layer FROM nodes WHERE chat_id = ? AND archived = 0 AND access_count > ? AND"
        " (? IS NULL OR coalesce(last_access, 0) > ? OR rev > ?) ORDER BY created_at, rowid",
        (chat_id, REINFORCE_MIN_ACCESS, state.last_reflect_at, state.last_reflect_at or 0.0,
         state.reflect_rev)).fetchall()
    promoted = set()
    for row in used:
        if chooser.should_reinforce(row["access_count"]):
            conn.execute("UPDATE nodes SET layer = 'long_term', weight = min(1.0, round(weight + ?, 6))"
                         " WHERE id = ?", (REINFORCE_STEP, row["id"]))
            promoted |= {row["id"]} if row["layer"] == "short_term" else set()
            report.reinforced += 1
    short = conn.execute("SELECT id FROM nodes WHERE chat_id = ? AND archived = 0 AND layer = 'short_term'"
                         " ORDER BY created_at, rowid", (chat_id,)).fetchall()
    remaining = short  # those the draw promoted are long-term now
    overflow = remaining[:max(0, len(remaining) - max_short_term)]
    conn.executemany("UPDATE nodes SET layer = 'long_term' WHERE id = ?", [(r["id"],) for r in overflow])
    report.to_long_term = len(promoted) + len(overflow)
    long_count = conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0 AND layer = 'long_term'"
                              f" AND source NOT IN ({','.join('?' * len(RAW_SOURCES))})",
                              (chat_id, *RAW_SOURCES)).fetchone()[0]
    excess = long_count - max_long_term
    if excess > 0:
        cs = ChangeSet(conn, chat_id, reason="consolidate")
        idle_before = now - decay_days * DAY
        weakest = conn.execute(
            "SELECT id, weight FROM nodes WHERE chat_id = ? AND archived = 0 AND layer = 'long_term' AND pinned = 0"
            f" AND locked = 0 AND type NOT IN ({','.join('?' * len(EXEMPT_TYPES))})"
            f" AND source NOT IN ({','.join('?' * len(RAW_SOURCES))})"
            " AND coalesce(last_access, created_at) < ? ORDER BY weight, importance, coalesce(last_access, created_at),"
            " rowid LIMIT ?", (chat_id, *EXEMPT_TYPES, *RAW_SOURCES, idle_before, excess)).fetchall()
        for row in weakest:
            archive_node(cs, row["id"], "consolidation", weight=row["weight"])
            report.archived.append(row["id"])
        report.touched = cs.touched_nodes
    state.last_reflect_at = now
    state.reflect_rev = conn.execute("SELECT node_rev FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()[0]
    save_state(conn, state)
    report.layers = layer_counts(conn, chat_id)
    return report


def schedule_rows(conn: sqlite3.Connection) -> list[dict]:
    """Per chat, what the DNA scheduler decides on: when it last changed and was used, its last decay and
    reflection, and how many memories are new since."""
    return [dict(r) for r in conn.execute(
        "SELECT c.chat_id, c.updated_at, c.node_rev, s.last_decay_at, s.last_reflect_at, s.reflect_rev,"
        " (SELECT max(last_access) FROM nodes n WHERE n.chat_id = c.chat_id) AS last_access,"
        " (SELECT count(*) FROM nodes n WHERE n.chat_id = c.chat_id AND n.archived = 0 AND"
        "  n.created_at > coalesce(s.last_reflect_at, 0)) AS new_nodes"
        " FROM chats c LEFT JOIN dna_state s ON s.chat_id = c.chat_id ORDER BY c.chat_id")]
