"""The journal: the before-image of every row a message-derived change touched, so a rollback can
undo exactly the changes derived from messages at or after an index, newest first."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import orjson

_TABLES = {"nodes": "id", "edges": "id", "repair_loops": "id"}  # repair_loops: DNA layer (m003)


def record(conn: sqlite3.Connection, chat_id: str, batch: str, msg_from: int, msg_to: int,
           table: str, row_id: str, before: sqlite3.Row | None, reason: str) -> None:
    """Journal one row change. `before` is the row as it was (None: the change inserted it)."""
    before_json = before_vec = None
    if before is not None:
        data = dict(before)
        before_vec = data.pop("embedding", None)
        before_json = orjson.dumps(data).decode()
    conn.execute(
        "INSERT INTO journal (chat_id, batch, msg_from, msg_to, tbl, row_id, before, before_vec, reason,"
        " created_at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (chat_id, batch, msg_from, msg_to, table, row_id, before_json, before_vec, reason, time.time()),
    )


@dataclasses.dataclass
class Rollback:
    entries: int = 0
    batches: int = 0
    reprocess_from: int | None = None   # lowest message index whose memories were undone
    touched_nodes: set[str] = dataclasses.field(default_factory=set)


def rollback_from(conn: sqlite3.Connection, chat_id: str, index: int, bump_rev) -> Rollback:
    """Undo every journaled change derived from a message range that reaches `index` or beyond.

    A batch that started before `index` is undone whole (it read the changed messages), so the
    result says where processing must start again. And since processing restarts there, every change
    derived from a range reaching that earlier message is undone too (an LLM extraction covers several
    earlier batches): the cut moves back until no kept change reads a message at or after it.
    `bump_rev()` gives a fresh node revision.
    """
    cut = index
    while True:
        earliest = conn.execute("SELECT min(msg_from) FROM journal WHERE chat_id = ? AND msg_to >= ?",
                                (chat_id, cut)).fetchone()[0]
        if earliest is None or earliest >= cut:
            break
        cut = earliest
    rows = conn.execute(
        "SELECT id, batch, msg_from, tbl, row_id, before, before_vec FROM journal"
        " WHERE chat_id = ? AND msg_to >= ? ORDER BY id DESC",
        (chat_id, cut),
    ).fetchall()
    result = Rollback()
    if not rows:
        return result
    batches = set()
    for row in rows:
        batches.add(row["batch"])
        table, pk = row["tbl"], _TABLES[row["tbl"]]
        if row["before"] is None:
            conn.execute(f"DELETE FROM {table} WHERE {pk} = ?", (row["row_id"],))
        else:
            data = orjson.loads(row["before"])
            if table == "nodes":
                data["embedding"] = row["before_vec"]
                data["rev"] = bump_rev()
            cols = [c for c in data if c != pk]
            # UPDATE in place keeps the row's rowid, so anything ordered by insertion reads the same after
            # a rollback as on a fresh ingest; INSERT only if the row is gone.
            updated = conn.execute(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in cols)} WHERE {pk} = ?",
                                   [data[c] for c in cols] + [data[pk]]).rowcount
            if not updated:
                cols.append(pk)
                conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                             [data[c] for c in cols])
        if table == "nodes":
            result.touched_nodes.add(row["row_id"])
        result.reprocess_from = (row["msg_from"] if result.reprocess_from is None
                                 else min(result.reprocess_from, row["msg_from"]))
    conn.executemany("DELETE FROM journal WHERE id = ?", [(r["id"],) for r in rows])
    result.entries = len(rows)
    result.batches = len(batches)
    result.reprocess_from = min(result.reprocess_from, index)
    return result


def inserted_ranges(conn: sqlite3.Connection, chat_id: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(table, row id) -> the message range of the journal entry that inserted the row: what each
    message-derived node and edge of the chat came from (manual ones have none)."""
    return {(r[0], r[1]): (r[2], r[3]) for r in conn.execute(
        "SELECT tbl, row_id, msg_from, msg_to FROM journal WHERE chat_id = ? AND before IS NULL"
        " AND tbl IN ('nodes', 'edges')", (chat_id,))}
