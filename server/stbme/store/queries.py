"""Named read queries several modules share, written once so that each uses the right index.

Without table statistics SQLite prefers the `(chat_id, archived, type)` index for `chat_id = ? AND
id IN (…)` and reads the whole chat; `+chat_id` keeps it on the primary key. Counting a chat's messages
with count(*) reads every message (texts live in the key's pages); messages are numbered 0..n-1, so
max(idx) + 1 is an index seek.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from ..errors import NotFound

CHUNK = 500
# An index of what recall ranks its candidates by (migration m017): a read of only its columns (and the
# nodes' id, chat_id, archived) is answered from it; a column it lacks reads only the rows that need it.
RANKING_INDEX = "nodes_ranking"
# Every table that holds a chat's data, with the column naming the chat (deleted with the chat).
CHAT_TABLES = (("messages", "chat_id"), ("story_days", "chat_id"), ("nodes", "chat_id"), ("edges", "chat_id"),
               ("journal", "chat_id"), ("jobs", "chat_id"), ("mentions", "chat_id"), ("settings", "scope"),
               ("events", "chat_id"), ("repair_loops", "chat_id"), ("dna_state", "chat_id"))


def nodes_by_ids(conn: sqlite3.Connection, chat_id: str, ids: Iterable[str], *, columns: str = "*",
                 where: str = "", params: tuple = (), index: str | None = None) -> list[sqlite3.Row]:
    """Rows of these nodes of the chat (`where` adds conditions, e.g. "AND archived = 0"), read through
    `index` when given (RANKING_INDEX: SQLite would take the primary key's and read every row)."""
    ids = list(ids)
    rows: list[sqlite3.Row] = []
    source = f"nodes INDEXED BY {index}" if index else "nodes"
    for i in range(0, len(ids), CHUNK):
        part = ids[i:i + CHUNK]
        rows += conn.execute(
            f"SELECT {columns} FROM {source} WHERE id IN ({','.join('?' * len(part))}) AND +chat_id = ? {where}",
            (*part, chat_id, *params)).fetchall()
    return rows


def texts_with_question_mark(conn: sqlite3.Connection, chat_id: str, idxs: Iterable[int]) -> dict[int, str]:
    """The texts of these messages that hold a question mark (only those can be a question)."""
    idxs = sorted(set(idxs))
    texts: dict[int, str] = {}
    for i in range(0, len(idxs), CHUNK):
        part = idxs[i:i + CHUNK]
        texts.update(conn.execute(
            f"SELECT idx, text FROM messages WHERE chat_id = ? AND idx IN ({','.join('?' * len(part))})"
            " AND (instr(text, '?') > 0 OR instr(text, '？') > 0)", (chat_id, *part)).fetchall())
    return texts


def memories_of_turn(conn: sqlite3.Connection, chat_id: str, text: str, length: int, lookback: int = 8) -> list[str]:
    """The memories of the chat's newest message with this text among its last `lookback` (a turn the
    extension sends as recent), made of that message alone."""
    row = conn.execute("SELECT idx FROM messages WHERE chat_id = ? AND idx >= ? AND text = ? ORDER BY idx DESC"
                       " LIMIT 1", (chat_id, length - lookback, text)).fetchone()
    if row is None:
        return []
    return [r[0] for r in conn.execute("SELECT id FROM nodes WHERE chat_id = ? AND seq_to = ? AND seq_from = ?"
                                       " AND archived = 0", (chat_id, row[0], row[0]))]


def messages_by(conn: sqlite3.Connection, chat_id: str, name: str, idxs: Iterable[int]) -> set[int]:
    """Of these messages, those that `name` said (answered from the index of names)."""
    idxs = sorted(set(idxs))
    said: set[int] = set()
    for i in range(0, len(idxs), CHUNK):
        part = idxs[i:i + CHUNK]
        said.update(r[0] for r in conn.execute(
            f"SELECT idx FROM messages WHERE chat_id = ? AND name = ? AND idx IN ({','.join('?' * len(part))})",
            (chat_id, name, *part)))
    return said


def message_count(conn: sqlite3.Connection, chat_id: str) -> int:
    """How many messages of the chat are stored (they are always numbered 0..n-1)."""
    return conn.execute("SELECT coalesce(max(idx) + 1, 0) FROM messages WHERE chat_id = ?", (chat_id,)).fetchone()[0]


def chat_row(conn: sqlite3.Connection, chat_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()


def require_chat(conn: sqlite3.Connection, chat_id: str) -> sqlite3.Row:
    """The chat's row, or NotFound: the sidecar learns a chat from its first sync."""
    row = chat_row(conn, chat_id)
    if row is None:
        raise NotFound(f"no chat {chat_id!r} in the sidecar yet (sync it first)", field="chat_id")
    return row


def list_chats(conn: sqlite3.Connection) -> list[dict]:
    return [dict(r) for r in conn.execute(
        "SELECT c.chat_id, c.processed_upto, c.updated_at,"
        " (SELECT coalesce(max(idx) + 1, 0) FROM messages m WHERE m.chat_id = c.chat_id) AS messages,"
        " (SELECT count(*) FROM nodes n WHERE n.chat_id = c.chat_id AND n.archived = 0) AS nodes"
        " FROM chats c ORDER BY c.updated_at DESC")]


def recent_chats(conn: sqlite3.Connection, limit: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT chat_id FROM chats ORDER BY updated_at DESC LIMIT ?", (limit,))]


def count_active_nodes(conn: sqlite3.Connection, chat_id: str) -> int:
    return conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0", (chat_id,)).fetchone()[0]


def count_events(conn: sqlite3.Connection, chat_id: str, limit: int) -> int:
    """Active event memories of the chat, counted up to `limit` (an index range scan that stops there)."""
    return conn.execute("SELECT count(*) FROM (SELECT 1 FROM nodes WHERE chat_id = ? AND archived = 0"
                        " AND type = 'event' LIMIT ?)", (chat_id, limit)).fetchone()[0]


# Memories without a vector from the current embedder: those without any (a partial index holds just
# them), then those with another embedder's (an index of the embedder per memory). Named indexes: without
# ANALYZE statistics SQLite would rather walk every row of the chat, vectors and all (m015).
# The conditions are the partial indexes' own, so SQLite may use them.
_NO_VECTOR = "embedding IS NULL AND archived = 0"
_OTHER_VECTOR = "embedding IS NOT NULL AND archived = 0 AND embedder IS NOT ?"
_WITHOUT_VECTOR = f"FROM nodes INDEXED BY nodes_unembedded WHERE chat_id = ? AND {_NO_VECTOR}"
_OTHER_EMBEDDER = f"FROM nodes INDEXED BY nodes_by_embedder WHERE chat_id = ? AND {_OTHER_VECTOR}"


def count_unembedded(conn: sqlite3.Connection, chat_id: str, embedder_id: str) -> int:
    """Active nodes of the chat without a vector from this embedder."""
    return (conn.execute(f"SELECT count(*) {_WITHOUT_VECTOR}", (chat_id,)).fetchone()[0]
            + conn.execute(f"SELECT count(*) {_OTHER_EMBEDDER}", (chat_id, embedder_id)).fetchone()[0])


# The chats with any: from the two partial indexes of m015 (a scan of every node read each one's vector,
# 50 ms at 15k memories, and housekeeping asks every minute).
_CHATS_WITH_UNEMBEDDED = (f"SELECT chat_id FROM nodes INDEXED BY nodes_unembedded WHERE {_NO_VECTOR} UNION"
                          f" SELECT chat_id FROM nodes INDEXED BY nodes_by_embedder WHERE {_OTHER_VECTOR} ORDER BY 1")


def chats_with_unembedded(conn: sqlite3.Connection, embedder_id: str) -> list[str]:
    """The chats with active nodes lacking a vector from this embedder, sorted."""
    return [r[0] for r in conn.execute(_CHATS_WITH_UNEMBEDDED, (embedder_id,))]


def delete_chat_rows(conn: sqlite3.Connection, chat_id: str) -> dict[str, int]:
    """Delete everything the sidecar holds for the chat. Returns rows deleted per table ('chats': 0 or 1)."""
    counts = {table: conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (chat_id,)).rowcount
              for table, column in CHAT_TABLES}
    counts["chats"] = conn.execute("DELETE FROM chats WHERE chat_id = ?", (chat_id,)).rowcount
    return counts


def nodes_on_days(conn: sqlite3.Connection, chat_id: str, first_day: str,
                  last_day: str) -> list[tuple[str, str, bool]]:
    """Active nodes whose story time names a day from `first_day` to `last_day` (ISO days, both included):
    (node id, day, mentioned), where mentioned is False for the day the memory's message was sent and True
    for a day its text names ("yesterday"). Ordered by day, then node id. An index range scan (m006)."""
    return [(r[0], r[1], bool(r[2])) for r in conn.execute(
        "SELECT s.node_id, s.day, s.mentioned FROM story_days AS s JOIN nodes AS n ON n.id = s.node_id"
        " WHERE s.chat_id = ? AND s.day BETWEEN ? AND ? AND n.archived = 0 ORDER BY s.day, s.node_id, s.mentioned",
        (chat_id, first_day, last_day))]


def like_pattern(text: str) -> str:
    """A LIKE pattern (ESCAPE '\\') matching text anywhere."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def nodes_page(conn: sqlite3.Connection, chat_id: str, *, offset: int, limit: int, type_: str | None = None,
               contains: str | None = None, archived: bool | None = False) -> tuple[int, list[sqlite3.Row]]:
    """One page of a chat's nodes (pinned first, then newest), and how many match in all."""
    where, args = ["chat_id = ?"], [chat_id]
    if type_:
        where.append("type = ?")
        args.append(type_)
    if archived is not None:
        where.append("archived = ?")
        args.append(int(archived))
    if contains:
        where.append("fields LIKE ? ESCAPE '\\'")
        args.append(like_pattern(contains))
    sql_where = " AND ".join(where)
    total = conn.execute(f"SELECT count(*) FROM nodes WHERE {sql_where}", args).fetchone()[0]
    rows = conn.execute(f"SELECT * FROM nodes WHERE {sql_where} ORDER BY pinned DESC,"
                        f" coalesce(seq_to, -1) DESC, created_at DESC LIMIT ? OFFSET ?",
                        [*args, limit, offset]).fetchall()
    return total, rows


def type_counts(conn: sqlite3.Connection, chat_id: str, archived: bool | None = False) -> dict[str, int]:
    """How many memories of each type the chat has (archived ones, or active ones, or all)."""
    where, args = "chat_id = ?", [chat_id]
    if archived is not None:
        where += " AND archived = ?"
        args.append(int(archived))
    return {r[0]: r[1] for r in conn.execute(
        f"SELECT type, count(*) FROM nodes WHERE {where} GROUP BY type ORDER BY type", args)}


def ranges_covering(conn: sqlite3.Connection, chat_id: str, first: int, last: int) -> list[tuple[int, int]]:
    """The message ranges of the chat's active memories that reach into messages first..last."""
    return [(r[0], r[1]) for r in conn.execute(
        "SELECT seq_from, seq_to FROM nodes WHERE chat_id = ? AND seq_to >= ? AND seq_from <= ? AND archived = 0",
        (chat_id, first, last))]


def nodes_of_message(conn: sqlite3.Connection, chat_id: str, index: int, limit: int) -> list[sqlite3.Row]:
    """The chat's active memories whose message range holds message `index`: the message's own first, then
    those drawn from more messages (LLM extractions, summaries), in the order they were made."""
    return conn.execute(
        "SELECT * FROM nodes WHERE chat_id = ? AND seq_to >= ? AND seq_from <= ? AND archived = 0"
        " ORDER BY seq_to - seq_from, created_at, id LIMIT ?", (chat_id, index, index, limit)).fetchall()


def node_row(conn: sqlite3.Connection, chat_id: str, node_id: str) -> sqlite3.Row | None:
    return conn.execute("SELECT * FROM nodes WHERE id = ? AND chat_id = ?", (node_id, chat_id)).fetchone()


def require_node(conn: sqlite3.Connection, chat_id: str, node_id: str) -> sqlite3.Row:
    row = node_row(conn, chat_id, node_id)
    if row is None:
        raise NotFound(f"no memory {node_id!r} in chat {chat_id!r}", field="id")
    return row


def edges_of(conn: sqlite3.Connection, chat_id: str, node_id: str | None = None, limit: int = 5000):
    """The chat's edges (those touching node_id, if given), oldest first."""
    return conn.execute("SELECT * FROM edges WHERE chat_id = ? AND (? IS NULL OR from_id = ? OR to_id = ?)"
                        " ORDER BY created_at LIMIT ?", (chat_id, node_id, node_id, node_id, limit)).fetchall()


def chat_graph(conn: sqlite3.Connection, chat_id: str) -> tuple[list[sqlite3.Row], list[sqlite3.Row]]:
    """All node and edge rows of the chat in insertion order (export)."""
    nodes = conn.execute("SELECT * FROM nodes WHERE chat_id = ? ORDER BY rowid", (chat_id,)).fetchall()
    edges = conn.execute("SELECT * FROM edges WHERE chat_id = ? ORDER BY rowid", (chat_id,)).fetchall()
    return nodes, edges


def store_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {"chats": conn.execute("SELECT count(*) FROM chats").fetchone()[0],
            "nodes": conn.execute("SELECT count(*) FROM nodes WHERE archived = 0").fetchone()[0]}


def unembedded_nodes(conn: sqlite3.Connection, chat_id: str, embedder_id: str, limit: int) -> list[sqlite3.Row]:
    """(id, fields, rev) of active nodes of the chat without a vector from this embedder: those without any
    first, and of each kind the name anchors (no message) first, then the newest messages' memories, which
    matter most to the next recall. Each step reads index entries in that order, never the rows skipped."""
    steps = [(f"SELECT id, fields, rev {_WITHOUT_VECTOR} AND seq_to IS NULL LIMIT ?", (chat_id,)),
             (f"SELECT id, fields, rev {_WITHOUT_VECTOR} AND seq_to IS NOT NULL ORDER BY seq_to DESC LIMIT ?",
              (chat_id,)),
             # Rare (an embedder switch, a migration's re-embed): sorted, from the index entries alone.
             ("SELECT id, fields, rev FROM nodes WHERE rowid IN"
              f" (SELECT rowid {_OTHER_EMBEDDER} ORDER BY seq_to IS NOT NULL, seq_to DESC LIMIT ?)"
              " ORDER BY seq_to IS NOT NULL, seq_to DESC", (chat_id, embedder_id))]
    rows: list[sqlite3.Row] = []
    for sql, args in steps:
        if len(rows) < limit:
            rows += conn.execute(sql, (*args, limit - len(rows))).fetchall()
    return rows


def node_rev(conn: sqlite3.Connection, node_id: str) -> int | None:
    row = conn.execute("SELECT rev FROM nodes WHERE id = ?", (node_id,)).fetchone()
    return row[0] if row else None


def active_node_fields(conn: sqlite3.Connection) -> list[str]:
    """The fields (JSON) of every active node of every chat (a re-embed reads all texts)."""
    return [r[0] for r in conn.execute("SELECT fields FROM nodes WHERE archived = 0")]


def clear_chat_memories(conn: sqlite3.Connection, chat_id: str, processed_upto: int) -> None:
    """Delete the chat's memories and what derives from them (never its messages); set where processing is."""
    for table in ("story_days", "nodes", "edges", "journal", "mentions", "repair_loops"):
        conn.execute(f"DELETE FROM {table} WHERE chat_id = ?", (chat_id,))
    conn.execute("UPDATE chats SET processed_upto = ? WHERE chat_id = ?", (processed_upto, chat_id))


def latest_send_date(conn: sqlite3.Connection, chat_id: str):
    """The send_date of the chat's newest message (the chat's "now"), as stored; None when it has none."""
    row = conn.execute("SELECT send_date FROM messages WHERE chat_id = ? ORDER BY idx DESC LIMIT 1",
                       (chat_id,)).fetchone()
    return row[0] if row else None
