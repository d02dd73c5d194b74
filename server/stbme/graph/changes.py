"""Graph changes inside one write transaction, journaled when they derive from messages.

Every node or edge write goes through a ChangeSet so that (1) message-derived changes can be undone
exactly by a rollback and (2) the index learns which nodes changed.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from typing import Any

import numpy as np

from ..store import journal
from .model import Edge, Node, edge_from_row, edge_to_row, node_from_row, node_to_row, new_id
from .schema import INHIBITORY_RELATIONS, normalize_relation


def ensure_chat(conn: sqlite3.Connection, chat_id: str) -> None:
    now = time.time()
    conn.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES (?,?,?)"
                 " ON CONFLICT (chat_id) DO NOTHING", (chat_id, now, now))


def bump_node_rev(conn: sqlite3.Connection, chat_id: str) -> int:
    return conn.execute("UPDATE chats SET node_rev = node_rev + 1, updated_at = ? WHERE chat_id = ?"
                        " RETURNING node_rev", (time.time(), chat_id)).fetchone()[0]


class ChangeSet:
    """Journaled node/edge writes for one chat. `msg_range=None` means a manual change (not undone by
    rollbacks)."""

    def __init__(self, conn: sqlite3.Connection, chat_id: str, *, reason: str,
                 msg_range: tuple[int, int] | None = None):
        self.conn = conn
        self.chat_id = chat_id
        self.reason = reason
        self.msg_range = msg_range
        self.batch = uuid.uuid4().hex[:16]
        self.touched_nodes: set[str] = set()
        self.created_nodes: list[str] = []
        ensure_chat(conn, chat_id)

    def _journal(self, table: str, row_id: str, before: sqlite3.Row | None) -> None:
        if self.msg_range is not None:
            journal.record(self.conn, self.chat_id, self.batch, self.msg_range[0], self.msg_range[1],
                           table, row_id, before, self.reason)

    def _rev(self) -> int:
        return bump_node_rev(self.conn, self.chat_id)

    # -- nodes ----------------------------------------------------------------------------------
    def insert_node(self, node: Node) -> Node:
        node.chat_id = self.chat_id
        node.rev = self._rev()
        row = node_to_row(node)
        insert = f"INSERT INTO nodes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})"
        try:
            self.conn.execute(insert, list(row.values()))
        except sqlite3.IntegrityError:
            if self.conn.execute("SELECT 1 FROM nodes WHERE id = ?", (node.id,)).fetchone() is None:
                raise
            # A stable id (model.stable_id) already in use: the memory is kept under a random one.
            node.id = row["id"] = new_id(node.id.partition("_")[0])
            self.conn.execute(insert, list(row.values()))
        self._journal("nodes", node.id, None)
        self.touched_nodes.add(node.id)
        self.created_nodes.append(node.id)
        return node

    def get_node(self, node_id: str) -> Node | None:
        row = self.conn.execute("SELECT * FROM nodes WHERE id = ? AND chat_id = ?",
                                (node_id, self.chat_id)).fetchone()
        return node_from_row(row) if row else None

    def update_node(self, node_id: str, *, touch: bool = True, **changes: Any) -> Node:
        """Change columns of a node (fields=…, archived=…, embedding=…). Returns the node after.
        `touch=False` keeps `updated_at` (bookkeeping such as storing a vector is not an edit)."""
        before = self.conn.execute("SELECT * FROM nodes WHERE id = ? AND chat_id = ?",
                                   (node_id, self.chat_id)).fetchone()
        if before is None:
            raise KeyError(node_id)
        node = node_from_row(before)
        for key, value in changes.items():
            if not hasattr(node, key) or key in ("id", "chat_id", "rev"):
                raise AttributeError(key)
            setattr(node, key, value)
        if touch:
            node.updated_at = time.time()
        node.rev = self._rev()
        row = node_to_row(node)
        cols = [c for c in row if c != "id"]
        self.conn.execute(f"UPDATE nodes SET {', '.join(f'{c} = ?' for c in cols)} WHERE id = ?",
                          [row[c] for c in cols] + [node_id])
        self._journal("nodes", node_id, before)
        self.touched_nodes.add(node_id)
        return node

    def set_embedding(self, node_id: str, vector: np.ndarray, embedder: str, text_hash: str) -> None:
        self.update_node(node_id, touch=False, embedding=np.asarray(vector, dtype=np.float32),
                         embedder=embedder, text_hash=text_hash)

    # -- edges ----------------------------------------------------------------------------------
    def add_edge(self, from_id: str, to_id: str, relation: str, strength: float = 0.8) -> Edge | None:
        """Add an edge; a currently valid edge with the same ends and relation is merged instead
        (strength = max), as ST-BME does. Self-loops are refused (None)."""
        if from_id == to_id:
            return None
        relation = normalize_relation(relation)
        strength = max(0.0, min(1.0, float(strength)))
        now = time.time()
        existing = self.conn.execute(
            "SELECT * FROM edges WHERE chat_id = ? AND from_id = ? AND to_id = ? AND relation = ?"
            " AND invalid_at IS NULL AND expired_at IS NULL",
            (self.chat_id, from_id, to_id, relation)).fetchone()
        if existing is not None:
            edge = edge_from_row(existing)
            if strength > edge.strength:
                self.conn.execute("UPDATE edges SET strength = ? WHERE id = ?", (strength, edge.id))
                self._journal("edges", edge.id, existing)
                edge.strength = strength
            return edge
        edge = Edge(id=new_id("e"), chat_id=self.chat_id, from_id=from_id, to_id=to_id, relation=relation,
                    strength=strength, inhibitory=relation in INHIBITORY_RELATIONS, created_at=now, valid_at=now)
        row = edge_to_row(edge)
        self.conn.execute(f"INSERT INTO edges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          list(row.values()))
        self._journal("edges", edge.id, None)
        return edge

    def insert_edge(self, edge: Edge) -> Edge:
        """Insert an edge as it is (an import); add_edge is for edges the pipeline makes."""
        edge.chat_id = self.chat_id
        row = edge_to_row(edge)
        self.conn.execute(f"INSERT INTO edges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                          list(row.values()))
        self._journal("edges", edge.id, None)
        return edge

    def invalidate_edge(self, edge_id: str) -> None:
        before = self.conn.execute("SELECT * FROM edges WHERE id = ?", (edge_id,)).fetchone()
        if before is None or before["invalid_at"] is not None:
            return
        self.conn.execute("UPDATE edges SET invalid_at = ? WHERE id = ?", (time.time(), edge_id))
        self._journal("edges", edge_id, before)
