"""The audit log: what happened to a chat's memories, when and why."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson


def record_event(conn: sqlite3.Connection, chat_id: str | None, kind: str, /, **data: Any) -> int:
    """Append an event; its id (for `complete_event`)."""
    cur = conn.execute("INSERT INTO events (chat_id, at, kind, data) VALUES (?,?,?,?)",
                       (chat_id, time.time(), kind, orjson.dumps(data).decode()))
    return int(cur.lastrowid)


def complete_event(conn: sqlite3.Connection, event_id: int, **data: Any) -> None:
    """Fill in what an event could not know when it was written (a batch's evolution, which in
    `evolve.mode separate` runs after the batch's extraction was recorded)."""
    row = conn.execute("SELECT data FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is not None:
        conn.execute("UPDATE events SET data = ? WHERE id = ?",
                     (orjson.dumps({**orjson.loads(row["data"]), **data}).decode(), event_id))


def list_events(conn: sqlite3.Connection, *, chat_id: str | None = None, kind: str | None = None,
                since: float | None = None, limit: int = 100, oldest_first: bool = False,
                after_id: int | None = None) -> list[dict]:
    """Events matching every filter given, newest first (or oldest first; `after_id` pages through them)."""
    order = "ASC" if oldest_first else "DESC"
    rows = conn.execute(
        "SELECT id, chat_id, at, kind, data FROM events WHERE (? IS NULL OR chat_id = ?) AND"
        f" (? IS NULL OR kind = ?) AND (? IS NULL OR at >= ?) AND (? IS NULL OR id > ?) ORDER BY id {order} LIMIT ?",
        (chat_id, chat_id, kind, kind, since, since, after_id, after_id, limit)).fetchall()
    return [{"id": r["id"], "at": r["at"], "chat_id": r["chat_id"], "kind": r["kind"], "data": orjson.loads(r["data"])}
            for r in rows]


def has_event(conn: sqlite3.Connection, chat_id: str | None, at: float, kind: str, data: str) -> bool:
    """Whether this exact event is recorded already (an import of the same log twice adds nothing)."""
    return conn.execute("SELECT 1 FROM events WHERE kind = ? AND at = ? AND data = ? AND chat_id IS ? LIMIT 1",
                        (kind, at, data, chat_id)).fetchone() is not None


def insert_event(conn: sqlite3.Connection, chat_id: str | None, at: float, kind: str, data: str) -> None:
    """An event from elsewhere (an imported log), with its own time; `data` is its JSON."""
    conn.execute("INSERT INTO events (chat_id, at, kind, data) VALUES (?,?,?,?)", (chat_id, at, kind, data))
