"""Writing an import into a chat, tied to the chat's messages when it can be.

Our exports carry the chat's messages and, for each memory, the messages it was made from (`derived_from`:
the range its journal entry had). When the chat holds those same messages (the prefix chains agree), or
holds none yet and gets them from the export, the imported memories are tied to their messages: they are
journaled with their ranges exactly as if the chat had made them, and the chat's processing resumes after
them. So a later sync from SillyTavern finds the chat already done (nothing redone, nothing doubled), and
an edit rolls back the imported memories of the edited message and after, like any others.

The chat's own message-derived memories give way to the imported ones (undone from the journal, processing
resumes after the tied range): two sets of memories of the same messages would be duplicates. Memories of
messages the chat has changed since the export (their batch reaches a changed message) are left out; the
chat's processing makes them from its own messages.

Anything that cannot be tied (another chat's memories, an export that predates messages in exports, a
graph from the ST-BME extension, manual memories) is added as separate memories that chat edits never undo,
except those the chat already has (same type and fields): importing the same file twice doubles nothing.
"""

from __future__ import annotations

import collections
import dataclasses
import sqlite3

import orjson

from ..graph.changes import ChangeSet, ensure_chat
from ..graph.model import edge_from_row, node_from_row
from ..hashing import chain_hash
from ..pipeline.heuristic import record_mentions
from ..pipeline.sync import load_messages, store_messages, stored_chains, undo_memories_from
from ..store.events import record_event
from ..store.jobs import JobKind, JobState, enqueue_job, has_open_job
from ..store.journal import inserted_ranges
from ..store.queries import chat_graph, chat_row, clear_chat_memories, message_count
from . import formats
from .formats import ImportedGraph


@dataclasses.dataclass
class ImportResult:
    nodes: int = 0
    edges: int = 0
    tied_upto: int = -1          # memories of messages 0..tied_upto are tied to them (-1: none)
    restored_messages: int = 0   # messages the chat got from the export (it had none)
    stale: int = 0               # memories of messages the chat changed since the export, left out
    queued: bool = False         # processing of the messages after the tied ones was queued
    unchanged: int = 0           # memories the chat already had as imported (not added again)
    nothing_changed: bool = False   # the chat already was what the import makes of it: nothing written


def read_export(conn: sqlite3.Connection, chat_id: str) -> tuple[list, list, formats.ChatSnapshot | None]:
    """What an export of the chat holds, read in one transaction: its nodes and edges (rows), and its
    messages with what each memory was made from (None for a chat the sidecar does not know)."""
    nodes, edges = chat_graph(conn, chat_id)
    chat = chat_row(conn, chat_id)
    snapshot = None
    if chat is not None:
        # A batch left unfinished is not part of what was processed.
        done = chat["processed_upto"] if chat["unfinished_from"] is None else chat["unfinished_from"] - 1
        snapshot = formats.ChatSnapshot(load_messages(conn, chat_id, 0), done, chat["degraded_from"],
                                        inserted_ranges(conn, chat_id), min(chat["llm_upto"], done))
    return nodes, edges, snapshot


def _signatures(graph: ImportedGraph) -> tuple[collections.Counter, collections.Counter]:
    """The graph's memories and links as the chat would hold them, ids aside (an import gives new ones)."""
    nodes = {}
    for node in graph.nodes:
        data = {k: v for k, v in node.to_json().items() if k not in ("id", "label", "embedder", "parent_id", "children")}
        nodes[node.id] = orjson.dumps([data, graph.derived.get(node.id)], option=orjson.OPT_SORT_KEYS).decode()
    edges = [orjson.dumps([nodes.get(e.from_id), nodes.get(e.to_id), e.relation, e.strength, e.inhibitory, e.created_at,
                           e.valid_at, e.invalid_at, e.expired_at, graph.derived.get(e.id)]).decode()
             for e in graph.edges]
    return collections.Counter(nodes.values()), collections.Counter(edges)


def _already_holds(conn: sqlite3.Connection, chat_id: str, graph: ImportedGraph) -> bool:
    """Whether the chat already is what this import would make of it: the same export imported again
    (its messages, how far they were processed, every memory and link)."""
    if graph.messages is None:
        return False
    nodes, edges, snapshot = read_export(conn, chat_id)
    if snapshot is None or not snapshot.messages:
        return False
    current = formats.from_export(formats.export_document(chat_id, [node_from_row(r) for r in nodes],
                                                          [edge_from_row(r) for r in edges], snapshot), chat_id)
    return ([m.hash for m in current.messages] == [m.hash for m in graph.messages]
            and (current.processed_upto, current.degraded_from, current.llm_upto)
            == (graph.processed_upto, graph.degraded_from, graph.llm_upto)
            and _signatures(current) == _signatures(graph))


def _tie_point(conn: sqlite3.Connection, chat_id: str, graph: ImportedGraph, result: ImportResult) -> tuple[int, bool]:
    """Up to which message the export's memories can be tied to the chat (-1: none), and whether the export
    is of this chat at all (its first messages are the chat's)."""
    if graph.messages is None or not graph.derived:
        return -1, False
    chains, prev = [], ""
    for msg in graph.messages:
        prev = chain_hash(prev, msg.hash)
        chains.append(prev)
    stored = stored_chains(conn, chat_id)
    if not stored:
        result.restored_messages = store_messages(conn, chat_id, graph.messages, "")
        common = len(chains)
    else:
        common = 0
        while common < min(len(stored), len(chains)) and stored[common] == chains[common]:
            common += 1
    tie = min(common - 1, -1 if graph.processed_upto is None else graph.processed_upto)
    # Memories are made batch by batch, and a batch is undone whole: never tie part of one. Step back to
    # the start of any range the tie point cuts, so processing resumes at a batch boundary.
    while True:
        cut = [start for start, end in graph.derived.values() if start <= tie < end]
        if not cut:
            return tie, common > 0
        tie = min(cut) - 1


def _same(type_: str, fields: dict) -> tuple[str, bytes]:
    return type_, orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def write_import(conn: sqlite3.Connection, chat_id: str, graph: ImportedGraph, mode: str, *,
                 extract_enabled: bool) -> ImportResult:
    """The whole import as one transaction (runs on the writer thread)."""
    if _already_holds(conn, chat_id, graph):
        return ImportResult(tied_upto=graph.processed_upto, unchanged=len(graph.nodes), nothing_changed=True)
    ensure_chat(conn, chat_id)
    result = ImportResult()
    tie, same_chat = _tie_point(conn, chat_id, graph, result)
    result.tied_upto = tie
    if mode == "replace":
        length = message_count(conn, chat_id)
        if same_chat:        # processing resumes after what the export's memories cover
            upto = tie
        elif graph.messages is not None or graph.processed_upto is None:   # another chat's memories
            upto = length - 1
        else:                # an ST-BME graph says how far it had processed this chat
            upto = min(graph.processed_upto, length - 1)
        clear_chat_memories(conn, chat_id, upto)
        conn.execute("UPDATE chats SET degraded_from = NULL, unfinished_from = NULL, revision = revision + 1"
                     " WHERE chat_id = ?", (chat_id,))
    elif tie >= 0 and conn.execute("SELECT 1 FROM journal WHERE chat_id = ? LIMIT 1", (chat_id,)).fetchone():
        undo_memories_from(conn, chat_id, 0, reason="import ties memories to these messages")

    separate = ChangeSet(conn, chat_id, reason="import")
    tied: dict[tuple[int, int], ChangeSet] = {}
    left_out: set[str] = set()

    def change_set(item_id: str) -> ChangeSet | None:
        """Where an imported item goes: tied to its range, separate, or (stale) nowhere."""
        origin = graph.derived.get(item_id) if same_chat else None
        if origin is None:
            return separate
        if origin[1] > tie:
            return None   # made from messages the chat has changed since: processing makes them anew
        if origin not in tied:
            tied[origin] = ChangeSet(conn, chat_id, reason="import", msg_range=origin)
        return tied[origin]

    # A separate memory the chat already has (the same export imported twice) is the one it has.
    have = {_same(r["type"], orjson.loads(r["fields"])): r["id"]
            for r in conn.execute("SELECT id, type, fields FROM nodes WHERE chat_id = ?", (chat_id,))}
    known: dict[str, str] = {}
    for node in graph.nodes:
        cs = change_set(node.id)
        if cs is None:
            left_out.add(node.id)
            continue
        if cs is separate and _same(node.type, node.fields) in have:
            known[node.id] = have[_same(node.type, node.fields)]
            result.unchanged += 1
            continue
        node.parent_id = None if node.parent_id in left_out else known.get(node.parent_id, node.parent_id)
        node.children = [known.get(c, c) for c in node.children if c not in left_out]
        cs.insert_node(node)
        result.nodes += 1
    result.stale = len(left_out)
    existing = set(known.values())
    for edge in graph.edges:
        cs = None if edge.from_id in left_out or edge.to_id in left_out else change_set(edge.id)
        if cs is None:
            continue
        edge.from_id, edge.to_id = known.get(edge.from_id, edge.from_id), known.get(edge.to_id, edge.to_id)
        if edge.from_id in existing and edge.to_id in existing and conn.execute(
                "SELECT 1 FROM edges WHERE chat_id = ? AND from_id = ? AND to_id = ? AND relation = ?",
                (chat_id, edge.from_id, edge.to_id, edge.relation)).fetchone():
            continue
        cs.insert_edge(edge)
        result.edges += 1

    if tie >= 0:
        degraded = graph.degraded_from if graph.degraded_from is not None and graph.degraded_from <= tie else None
        conn.execute("UPDATE chats SET processed_upto = ?, degraded_from = ?, unfinished_from = NULL, llm_upto = ?"
                     " WHERE chat_id = ?", (tie, degraded, min(graph.llm_upto, tie), chat_id))
        record_mentions(conn, chat_id, load_messages(conn, chat_id, 0, tie))
    resumes = tie >= 0 or (mode == "replace" and same_chat)   # processing starts again after `tie`
    if (resumes and extract_enabled and tie < message_count(conn, chat_id) - 1
            and not has_open_job(conn, chat_id, states=(JobState.PENDING,))):
        enqueue_job(conn, chat_id, JobKind.PROCESS)
        result.queued = True
    record_event(conn, chat_id, "import", mode=mode, nodes=result.nodes, edges=result.edges,
                 tied_upto=tie, restored_messages=result.restored_messages, stale=result.stale)
    return result
