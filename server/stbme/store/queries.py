"""Read queries several modules share, written once so that each uses the right index.

Without table statistics SQLite prefers the `(chat_id, archived, type)` index for `chat_id = ? AND
id IN (…)` and reads the whole chat; `+chat_id` keeps it on the primary key. Counting a chat's messages
with count(*) reads every message (texts live in the key's pages); messages are numbered 0..n-1, so
max(idx) + 1 is an index seek.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

CHUNK = 500


def nodes_by_ids(conn: sqlite3.Connection, chat_id: str, ids: Iterable[str], *, columns: str = "*",
                 where: str = "", params: tuple = ()) -> list[sqlite3.Row]:
    """Rows of these nodes of the chat (`where` adds conditions, e.g. "AND archived = 0")."""
    ids = list(ids)
    rows: list[sqlite3.Row] = []
    for i in range(0, len(ids), CHUNK):
        part = ids[i:i + CHUNK]
        rows += conn.execute(
            f"SELECT {columns} FROM nodes WHERE id IN ({','.join('?' * len(part))}) AND +chat_id = ? {where}",
            (*part, chat_id, *params)).fetchall()
    return rows


def message_count(conn: sqlite3.Connection, chat_id: str) -> int:
    """How many messages of the chat are stored (they are always numbered 0..n-1)."""
    return conn.execute("SELECT coalesce(max(idx) + 1, 0) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()[0]
