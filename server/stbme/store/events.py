"""The audit log: what happened to a chat's memories, when and why."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

import orjson


def record_event(conn: sqlite3.Connection, chat_id: str | None, kind: str, /, **data: Any) -> None:
    conn.execute("INSERT INTO events (chat_id, at, kind, data) VALUES (?,?,?,?)",
                 (chat_id, time.time(), kind, orjson.dumps(data).decode()))


def list_events(conn: sqlite3.Connection, chat_id: str | None, limit: int = 100) -> list[dict]:
    rows = conn.execute(
        "SELECT id, chat_id, at, kind, data FROM events WHERE (? IS NULL OR chat_id = ?)"
        " ORDER BY id DESC LIMIT ?", (chat_id, chat_id, limit)).fetchall()
    return [dict(r) | {"data": orjson.loads(r["data"])} for r in rows]
