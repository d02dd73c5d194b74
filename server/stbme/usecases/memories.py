"""A chat's memories as the user sees and edits them: list, read, remember by hand, edit, pin/lock/archive,
and link. Manual changes have no message range: a chat rollback never undoes them."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import BadRequest, Conflict, NotFound
from ..graph.changes import ChangeSet
from ..graph.model import Node, edge_from_row, new_id, node_from_row
from ..graph.schema import NODE_TYPES, RELATIONS, Strength
from ..index import ChatIndexes
from ..store import Store
from ..store.events import record_event
from ..store.queries import (chat_row, edges_of, node_row, nodes_of_message, nodes_page, ranges_covering,
                             require_node, type_counts)
from .embedding import Embedding

# Most messages one "which messages are remembered" read covers (the extension asks for the messages ST shows).
MAX_MESSAGE_SPAN = 2000
# Most memories listed for one message (a long message is several events; LLM memories and summaries add a few).
MAX_MESSAGE_MEMORIES = 50

NODE_ACTIONS: dict[str, dict[str, bool]] = {
    "pin": {"pinned": True}, "unpin": {"pinned": False}, "lock": {"locked": True},
    "unlock": {"locked": False}, "archive": {"archived": True}, "restore": {"archived": False},
}


@dataclasses.dataclass
class NewMemory:
    type: str
    fields: dict[str, Any]
    importance: float = 6.0
    pinned: bool = False
    locked: bool = False
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class MemoryEdit:
    """What to change; None leaves it as it is. A None value inside `fields` removes that field."""
    fields: dict[str, Any] | None = None
    importance: float | None = None
    tags: list[str] | None = None
    unlock: bool = False


def merged_fields(type_: str, fields: dict[str, Any], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields after applying `fields` on top of `base`; the type's required fields must be there."""
    merged = dict(base or {})
    for key, value in fields.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    missing = [r for r in NODE_TYPES[type_].required if not str(merged.get(r) or "").strip()]
    if missing:
        raise BadRequest(f"a {type_} memory needs the field {missing[0]!r}", field=f"fields.{missing[0]}")
    return merged


class Memories:
    def __init__(self, store: Store, indexes: ChatIndexes, embedding: Embedding):
        self.store = store
        self.indexes = indexes
        self.embedding = embedding

    async def list(self, chat_id: str, *, offset: int = 0, limit: int = 50, type_: str | None = None,
                   contains: str | None = None, archived: bool | None = False) -> dict:
        def read(conn):
            total, rows = nodes_page(conn, chat_id, offset=offset, limit=limit, type_=type_, contains=contains,
                                     archived=archived)
            return total, [node_from_row(r).to_json() for r in rows], type_counts(conn, chat_id, archived)

        total, nodes, types = await self.store.read(read)
        # `types`: what the chat holds by type (same archived filter, before the type and text filters).
        return {"nodes": nodes, "total": total, "offset": offset, "limit": limit, "types": types}

    async def remembered(self, chat_id: str, first: int, last: int) -> dict:
        """Which of messages first..last have memories, and how many: the chat's per-message marker.
        `processed_upto` tells the messages not processed yet from those with nothing remembered."""
        if last < first:
            raise BadRequest("'to' must not be below 'from'", field="to")
        if last - first >= MAX_MESSAGE_SPAN:
            raise BadRequest(f"at most {MAX_MESSAGE_SPAN} messages at once", field="to")

        def read(conn):
            row = chat_row(conn, chat_id)
            return (row["processed_upto"] if row else -1), ranges_covering(conn, chat_id, first, last)

        processed_upto, ranges = await self.store.read(read)
        counts = [0] * (last - first + 2)  # a difference array: a summary of a thousand messages is two steps
        for seq_from, seq_to in ranges:
            counts[max(seq_from, first) - first] += 1
            counts[min(seq_to, last) - first + 1] -= 1
        messages, running = [], 0
        for offset in range(last - first + 1):
            running += counts[offset]
            if running:
                messages.append({"index": first + offset, "memories": running})
        return {"processed_upto": processed_upto, "from": first, "to": last, "messages": messages}

    async def of_message(self, chat_id: str, index: int) -> dict:
        """The memories behind message `index`: its own, then those drawn from it and other messages."""
        rows = await self.store.read(lambda conn: nodes_of_message(conn, chat_id, index, MAX_MESSAGE_MEMORIES))
        return {"index": index, "memories": [node_from_row(r).to_json() for r in rows]}

    @staticmethod
    def types() -> list[dict]:
        """The memory types and their fields (graph/schema.py), for filters and editors."""
        return [{"name": t.name, "columns": list(t.columns), "required": list(t.required), "section": t.section}
                for t in NODE_TYPES.values()]

    async def get(self, chat_id: str, node_id: str) -> dict:
        return node_from_row(await self.store.read(lambda conn: require_node(conn, chat_id, node_id))).to_json()

    async def create(self, chat_id: str, memory: NewMemory) -> dict:
        if memory.type not in NODE_TYPES:
            raise BadRequest(f"'type' must be one of {', '.join(NODE_TYPES)}", field="type")
        node = Node(id=new_id("n"), chat_id=chat_id, type=memory.type, fields=merged_fields(memory.type, memory.fields),
                    importance=memory.importance, pinned=memory.pinned, locked=memory.locked, source="manual",
                    tags=list(memory.tags))

        def write(conn):
            cs = ChangeSet(conn, chat_id, reason="manual")
            cs.insert_node(node)
            record_event(conn, chat_id, "remember", node_id=node.id, type=memory.type)
            return cs.touched_nodes

        touched = await self.store.write(write)
        await self.indexes.lexical.apply(chat_id, touched)
        # The chat's vector index is loaded now (built, for a new chat), so the memory goes into it once
        # embedded: else the next recall may find the index still loading and answer from keywords alone,
        # which a chat of one memory scores below the keyword floor.
        await self.indexes.vectors.get(chat_id)
        await self.embedding.embed_quietly(chat_id)
        return await self.get(chat_id, node.id)

    async def edit(self, chat_id: str, node_id: str, edit: MemoryEdit) -> dict:
        current = await self.get(chat_id, node_id)
        if current["locked"] and not edit.unlock:
            raise Conflict("this memory is locked; unlock it first (or send \"unlock\": true)", field="locked")
        changes: dict[str, Any] = {}
        if edit.fields is not None:
            changes["fields"] = merged_fields(current["type"], edit.fields, current["fields"])
            changes["embedding"] = None
        if edit.importance is not None:
            changes["importance"] = edit.importance
        if edit.tags is not None:
            changes["tags"] = list(edit.tags)
        if edit.unlock:
            changes["locked"] = False
        return await self._change(chat_id, node_id, "edit", changes)

    async def act(self, chat_id: str, node_id: str, action: str) -> dict:
        """pin, unpin, lock, unlock, archive or restore."""
        if action not in NODE_ACTIONS:
            raise NotFound(f"unknown action {action!r}; use one of {', '.join(NODE_ACTIONS)}", field="action")
        await self.get(chat_id, node_id)
        return await self._change(chat_id, node_id, action, NODE_ACTIONS[action])

    async def _change(self, chat_id: str, node_id: str, reason: str, changes: dict) -> dict:
        def write(conn):
            cs = ChangeSet(conn, chat_id, reason=reason)
            cs.update_node(node_id, **changes)
            record_event(conn, chat_id, reason, node_id=node_id)
            return cs.touched_nodes

        touched = await self.store.write(write)
        await self.indexes.apply(chat_id, touched)
        if "embedding" in changes or changes.get("archived") is False:
            await self.embedding.embed_quietly(chat_id)
        return await self.get(chat_id, node_id)

    async def edges(self, chat_id: str, node_id: str | None = None) -> list[dict]:
        rows = await self.store.read(lambda conn: edges_of(conn, chat_id, node_id))
        return [edge_from_row(r).to_json() for r in rows]

    async def link(self, chat_id: str, from_id: str, to_id: str, relation: str = "related",
                   strength: float = Strength.LINK) -> dict:
        """A manual edge between two memories (not undone by chat rollbacks)."""
        if relation not in RELATIONS:
            raise BadRequest(f"'relation' must be one of {', '.join(sorted(RELATIONS))}", field="relation")
        if not 0 <= strength <= 1:
            raise BadRequest("'strength' must be from 0 to 1", field="strength")

        def write(conn):
            for node_id in (from_id, to_id):
                if node_row(conn, chat_id, node_id) is None:
                    raise NotFound(f"no memory {node_id!r} in chat {chat_id!r}", field="id")
            cs = ChangeSet(conn, chat_id, reason="link")
            edge = cs.add_edge(from_id, to_id, relation, strength)
            if edge is None:
                raise BadRequest("a memory cannot be linked to itself", field="id")
            record_event(conn, chat_id, "link", edge_id=edge.id, from_id=from_id, to_id=to_id, relation=relation)
            return edge.to_json()
        return await self.store.write(write)
