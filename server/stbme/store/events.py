"""The audit log: what happened to a chat's memories, when and why."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson


def record_event(conn: sqlite3.Connection, chat_id: str | None, kind: str, /, **data: Any) -> None:
    conn.execute("INSERT INTO events (chat_id, at, kind, data) VALUES (?,?,?,?)",
                 (chat_id, time.time(), kind, orjson.dumps(data).decode()))


def list_events(conn: sqlite3.Connection, *, chat_id: str | None = None, kind: str | None = None,
                since: float | None = None, limit: int = 100, oldest_first: bool = False) -> list[dict]:
    """Events matching every filter given, newest first (or oldest first)."""
    order = "ASC" if oldest_first else "DESC"
    rows = conn.execute(
        "SELECT id, chat_id, at, kind, data FROM events WHERE (? IS NULL OR chat_id = ?) AND"
        f" (? IS NULL OR kind = ?) AND (? IS NULL OR at >= ?) ORDER BY id {order} LIMIT ?",
        (chat_id, chat_id, kind, kind, since, since, limit)).fetchall()
    return [{"id": r["id"], "at": r["at"], "chat_id": r["chat_id"], "kind": r["kind"], "data": orjson.loads(r["data"])}
            for r in rows]
