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
from ..store.queries import edges_of, node_row, nodes_page, require_node
from .embedding import Embedding

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
            return total, [node_from_row(r).to_json() for r in rows]

        total, nodes = await self.store.read(read)
        return {"nodes": nodes, "total": total, "offset": offset, "limit": limit}

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
