"""DNA numbers read from the store: a chat's layers, weights and directives, and the sidecar's totals
(the totals are all a hub heartbeat may carry: never chat content)."""

from __future__ import annotations

import sqlite3

from . import dynamics, repair
from .signals import SIGNAL_TYPES


def chat_stats(conn: sqlite3.Connection, chat_id: str) -> dict:
    directives = dict(conn.execute(
        f"SELECT type, count(*) FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
        f" ({','.join('?' * len(SIGNAL_TYPES))}) GROUP BY type", (chat_id, *SIGNAL_TYPES)).fetchall())
    weights = conn.execute(
        "SELECT count(*), avg(weight), min(weight), sum(weight < 0.5), sum(pinned), sum(locked)"
        " FROM nodes WHERE chat_id = ? AND archived = 0", (chat_id,)).fetchone()
    state = dynamics.load_state(conn, chat_id)
    return {
        "chat_id": chat_id,
        "layers": dynamics.layer_counts(conn, chat_id),
        "archived": conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 1",
                                 (chat_id,)).fetchone()[0],
        "directives": {t: directives.get(t, 0) for t in SIGNAL_TYPES},
        "weight": {"memories": weights[0], "average": round(weights[1] or 0, 4),
                   "min": round(weights[2] or 0, 4), "below_half": weights[3] or 0},
        "pinned": weights[4] or 0, "locked": weights[5] or 0,
        "open_repair_loops": repair.list_loops(conn, chat_id, "open"),
        "last_decay_at": state.last_decay_at, "last_reflect_at": state.last_reflect_at,
        "events": conn.execute("SELECT count(*) FROM events WHERE chat_id = ?", (chat_id,)).fetchone()[0],
    }


def global_stats(conn: sqlite3.Connection) -> dict:
    return {
        "chats": conn.execute("SELECT count(*) FROM chats").fetchone()[0],
        "memories": conn.execute("SELECT count(*) FROM nodes WHERE archived = 0").fetchone()[0],
        "archived": conn.execute("SELECT count(*) FROM nodes WHERE archived = 1").fetchone()[0],
        "directives": conn.execute(
            f"SELECT count(*) FROM nodes WHERE archived = 0 AND type IN ({','.join('?' * len(SIGNAL_TYPES))})",
            SIGNAL_TYPES).fetchone()[0],
        "genes": conn.execute("SELECT count(*) FROM genes").fetchone()[0],
        "capsules": conn.execute("SELECT count(*) FROM capsules").fetchone()[0],
        "open_repair_loops": len(repair.list_loops(conn, None, "open")),
        "events": conn.execute("SELECT count(*) FROM events").fetchone()[0],
    }
