"""Chat sync with exact rollback. The chat in SillyTavern is the truth (protocol in docs/api.md).

The client sends the chat length, a contiguous slice of messages and prefix-chain anchors. The sidecar
proves the part before the slice equal via the anchors (or asks for more), finds the first index whose
stored copy differs, undoes every memory change derived from messages at or after it (journal, newest
first), stores the new messages, and leaves the rest to the job queue.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from ..graph.changes import bump_node_rev, ensure_chat
from ..hashing import chain_hash, message_hash
from ..store import journal
from ..store.events import record_event
from ..store.jobs import JobKind, JobState, enqueue_job, has_open_job
from ..store.queries import message_count

ROLES = ("user", "assistant", "system")


@dataclasses.dataclass
class Message:
    index: int
    role: str
    name: str
    text: str
    swipe_id: int | None = None
    send_date: str | None = None

    @property
    def hash(self) -> str:
        return message_hash(self.role, self.name, self.text)


@dataclasses.dataclass
class SyncRequest:
    length: int
    messages: list[Message]
    anchors: dict[int, str]


@dataclasses.dataclass
class SyncResult:
    status: str
    stored_length: int
    diverged_at: int | None
    need_from: int | None
    processed_upto: int
    queued: bool
    rolled_back: int
    touched_nodes: set[str] = dataclasses.field(default_factory=set)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        data.pop("touched_nodes")
        return data


def _stored_chains(conn: sqlite3.Connection, chat_id: str, indexes: list[int]) -> dict[int, tuple[str, str]]:
    out = {}
    for i in range(0, len(indexes), 500):
        part = indexes[i:i + 500]
        for row in conn.execute(
                f"SELECT idx, hash, chain FROM messages WHERE chat_id = ? AND idx IN ({','.join('?' * len(part))})",
                (chat_id, *part)):
            out[row[0]] = (row[1], row[2])
    return out


def apply_sync(conn: sqlite3.Connection, chat_id: str, req: SyncRequest, *, extract_enabled: bool) -> SyncResult:
    """The whole sync as one transaction (runs on the writer thread)."""
    ensure_chat(conn, chat_id)
    chat = conn.execute("SELECT processed_upto FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
    processed_upto = chat["processed_upto"]
    stored_length = message_count(conn, chat_id)
    start = req.messages[0].index if req.messages else req.length
    end = req.messages[-1].index if req.messages else req.length - 1

    # 1. Prove the prefix before the slice equal (chain anchors), or ask for more.
    wanted = sorted(i for i in req.anchors if i < stored_length)
    stored = _stored_chains(conn, chat_id, sorted(set(wanted) | set(range(max(start - 1, 0), min(end + 1, stored_length)))))
    proven = -1
    for i in wanted:
        if stored[i][1] == req.anchors[i]:
            proven = max(proven, i)
        else:
            break  # chains past a mismatch cannot match
    if start > 0 and proven < start - 1:
        need_from = proven + 1
        return SyncResult("need_more", stored_length, None, need_from, processed_upto,
                          has_open_job(conn, chat_id), 0)

    # 2. First index whose stored copy differs.
    diverged = None
    for msg in req.messages:
        if msg.index >= stored_length or stored[msg.index][0] != msg.hash:
            diverged = msg.index
            break
    whole_chat = end >= req.length - 1
    if diverged is None and whole_chat and stored_length > req.length:
        diverged = req.length  # messages were deleted at the end
    if diverged is not None and diverged == stored_length and stored_length <= req.length:
        cut = None  # a plain append: nothing stored differs
    else:
        cut = diverged

    # 3. Undo memories derived from messages >= the cut, then replace the messages.
    rolled_back = 0
    touched: set[str] = set()
    if cut is not None:
        conn.execute("UPDATE chats SET revision = revision + 1, process_through = min(process_through, ?)"
                     " WHERE chat_id = ?", (cut - 1, chat_id))
        if cut <= processed_upto:
            undo, processed_upto = undo_memories_from(conn, chat_id, cut, reason="chat changed")
            rolled_back = undo.entries
            touched = undo.touched_nodes
        conn.execute("DELETE FROM messages WHERE chat_id = ? AND idx >= ?", (chat_id, cut))
        stored_length = min(stored_length, cut)
    if diverged is not None:
        prev_chain = stored[diverged - 1][1] if diverged > 0 else ""
        added = store_messages(conn, chat_id, [m for m in req.messages if m.index >= diverged], prev_chain)
        stored_length = max(stored_length, diverged + added)
    conn.execute("UPDATE chats SET processed_upto = ?, updated_at = ? WHERE chat_id = ?",
                 (processed_upto, time.time(), chat_id))

    queued = has_open_job(conn, chat_id)
    # A running job may already be past its last look at the messages: queue another behind it.
    if extract_enabled and processed_upto < stored_length - 1 and not has_open_job(conn, chat_id, states=(JobState.PENDING,)):
        enqueue_job(conn, chat_id, JobKind.PROCESS)
        queued = True
    status = "synced" if whole_chat else "need_more"
    need_from = None if whole_chat else end + 1
    return SyncResult(status, stored_length, diverged if cut is not None else None, need_from, processed_upto,
                      queued, rolled_back, touched)


def store_messages(conn: sqlite3.Connection, chat_id: str, messages: list[Message], prev_chain: str) -> int:
    """Insert contiguous messages after the stored ones (`prev_chain`: the chain of the message before the
    first, '' at index 0), with their hashes and prefix chains. Returns how many."""
    rows = []
    for msg in messages:
        prev_chain = chain_hash(prev_chain, msg.hash)
        rows.append((chat_id, msg.index, msg.hash, prev_chain, msg.role, msg.name, msg.text, msg.swipe_id,
                     msg.send_date))
    conn.executemany("INSERT INTO messages (chat_id, idx, hash, chain, role, name, text, swipe_id, send_date)"
                     " VALUES (?,?,?,?,?,?,?,?,?)", rows)
    return len(rows)


def stored_chains(conn: sqlite3.Connection, chat_id: str) -> list[str]:
    """The prefix chain of every stored message of the chat, in order."""
    return [r[0] for r in conn.execute("SELECT chain FROM messages WHERE chat_id = ? ORDER BY idx", (chat_id,))]


def undo_memories_from(conn: sqlite3.Connection, chat_id: str, index: int, *, reason: str):
    """Undo every memory change derived from messages >= index (whole batches), so processing starts
    again where the first undone batch started. Returns the undo and the new processed_upto."""
    undo = journal.rollback_from(conn, chat_id, index, lambda: bump_node_rev(conn, chat_id))
    restart = min(index, undo.reprocess_from if undo.reprocess_from is not None else index)
    processed_upto = restart - 1
    conn.execute("DELETE FROM mentions WHERE chat_id = ? AND idx >= ?", (chat_id, restart))
    # Batches made without the LLM (or left unfinished) that are now undone will be redone; earlier ones
    # stay marked.
    conn.execute("UPDATE chats SET processed_upto = min(processed_upto, ?), revision = revision + 1,"
                 " degraded_from = CASE WHEN degraded_from >= ? THEN NULL ELSE degraded_from END,"
                 " unfinished_from = CASE WHEN unfinished_from >= ? THEN NULL ELSE unfinished_from END,"
                 " llm_upto = min(llm_upto, ?) WHERE chat_id = ?",
                 (processed_upto, restart, restart, processed_upto, chat_id))
    record_event(conn, chat_id, "rollback", diverged_at=index, entries=undo.entries, batches=undo.batches,
                 reprocess_from=restart, reason=reason)
    return undo, processed_upto


def load_messages(conn: sqlite3.Connection, chat_id: str, start: int, end: int | None = None) -> list[Message]:
    rows = conn.execute(
        "SELECT idx, role, name, text, swipe_id, send_date FROM messages WHERE chat_id = ? AND idx >= ?"
        " AND (? IS NULL OR idx <= ?) ORDER BY idx", (chat_id, start, end, end)).fetchall()
    return [Message(r["idx"], r["role"], r["name"], r["text"], r["swipe_id"], r["send_date"]) for r in rows]
