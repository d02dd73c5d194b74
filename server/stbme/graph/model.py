"""Node and Edge records and their SQLite row / JSON forms."""

from __future__ import annotations

import dataclasses
import hashlib
import sqlite3
import time
import uuid
from typing import Any

import numpy as np
import orjson

from .attribution import attributed_text
from .schema import MESSAGE_FIELDS, NODE_TYPES, TEXT_FIELD_ORDER


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def stable_id(prefix: str, *parts: object) -> str:
    """An id made of what the node comes from (its chat, its message, its text): the same chat brought in
    twice gets the same ids, and every ranking breaks its ties by id, so it ranks the same way (with
    random ids two ingests of one chat gave 328 of 494 evaluation questions a different top 10). If the id
    is taken, ChangeSet.insert_node stores the node under a random one."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=10).hexdigest()
    return f"{prefix}_{digest}"


@dataclasses.dataclass
class Node:
    id: str
    chat_id: str
    type: str
    fields: dict[str, Any]
    importance: float = 5.0
    weight: float = 1.0
    seq_from: int | None = None
    seq_to: int | None = None
    level: int = 0
    parent_id: str | None = None
    children: list[str] = dataclasses.field(default_factory=list)
    archived: bool = False
    locked: bool = False
    pinned: bool = False
    scope: str = "objective"
    story_time: dict | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    embedding: np.ndarray | None = None
    embedder: str | None = None
    text_hash: str | None = None
    access_count: int = 0
    last_access: float | None = None
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)
    evolution: list[dict] = dataclasses.field(default_factory=list)
    source: str = "heuristic"
    rev: int = 0
    layer: str = "working"  # DNA Memory: working -> short_term -> long_term (set by stbme.dna.dynamics)

    @property
    def label(self) -> str:
        return node_label(self.type, self.fields)

    def text(self) -> str:
        return node_text(self.fields)

    def to_json(self) -> dict:
        return {
            "id": self.id, "type": self.type, "fields": self.fields, "label": self.label,
            "importance": self.importance, "weight": self.weight,
            "seq_range": [self.seq_from, self.seq_to] if self.seq_from is not None else None,
            "level": self.level, "parent_id": self.parent_id, "children": self.children,
            "archived": self.archived, "locked": self.locked, "pinned": self.pinned, "scope": self.scope,
            "story_time": self.story_time, "tags": self.tags, "access_count": self.access_count,
            "last_access": self.last_access, "created_at": self.created_at, "updated_at": self.updated_at,
            "evolution": self.evolution, "source": self.source, "embedder": self.embedder, "layer": self.layer,
        }


NODE_COLUMNS = (
    "id", "chat_id", "type", "fields", "importance", "weight", "seq_from", "seq_to", "level", "parent_id",
    "children", "archived", "locked", "pinned", "scope", "story_time", "tags", "embedding", "embedder",
    "text_hash", "access_count", "last_access", "created_at", "updated_at", "evolution", "source", "rev",
    "layer",
)
_JSON_NODE = {"fields", "children", "tags", "evolution", "story_time"}
_BOOL_NODE = {"archived", "locked", "pinned"}


def node_to_row(node: Node) -> dict[str, Any]:
    row = {}
    for col in NODE_COLUMNS:
        value = getattr(node, col)
        if col in _JSON_NODE:
            value = None if value is None else orjson.dumps(value).decode()
        elif col in _BOOL_NODE:
            value = int(bool(value))
        elif col == "embedding":
            value = None if value is None else np.asarray(value, dtype=np.float32).tobytes()
        row[col] = value
    return row


def node_from_row(row: sqlite3.Row | dict) -> Node:
    data = dict(row)
    for col in _JSON_NODE:
        if data.get(col) is not None:
            data[col] = orjson.loads(data[col])
    for col in _BOOL_NODE:
        data[col] = bool(data[col])
    if data.get("embedding") is not None:
        data["embedding"] = np.frombuffer(data["embedding"], dtype=np.float32)
    return Node(**{k: data[k] for k in NODE_COLUMNS if k in data})


@dataclasses.dataclass
class Edge:
    id: str
    chat_id: str
    from_id: str
    to_id: str
    relation: str
    strength: float = 0.8
    inhibitory: bool = False
    created_at: float = dataclasses.field(default_factory=time.time)
    valid_at: float | None = None
    invalid_at: float | None = None
    expired_at: float | None = None

    def is_active(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        return not ((self.invalid_at is not None and self.invalid_at <= now)
                    or (self.expired_at is not None and self.expired_at <= now))

    def to_json(self) -> dict:
        return dataclasses.asdict(self) | {"active": self.is_active()}


EDGE_COLUMNS = tuple(f.name for f in dataclasses.fields(Edge))


def edge_to_row(edge: Edge) -> dict[str, Any]:
    # Not dataclasses.asdict: its deep copy of every field cost more than the INSERT in a bulk ingest.
    row = {col: getattr(edge, col) for col in EDGE_COLUMNS}
    row["inhibitory"] = int(edge.inhibitory)
    return row


def edge_from_row(row: sqlite3.Row | dict) -> Edge:
    data = dict(row)
    data["inhibitory"] = bool(data["inhibitory"])
    return Edge(**{k: data[k] for k in EDGE_COLUMNS})


def field_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(field_text(v) for v in value if v not in (None, ""))
    if isinstance(value, dict):
        return "; ".join(f"{k}: {field_text(v)}" for k, v in value.items())
    return str(value).strip()


def _names(value: Any) -> list[str]:
    return [str(v) for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def node_text(fields: dict[str, Any]) -> str:
    """The text a node is embedded and searched by: known fields in ST-BME's order, then the rest. A
    message's memory (it has a speaker) reads "Speaker: what they said" (graph/attribution.py); its
    participants are the speaker and names its text already holds, so they are not repeated."""
    parts = []
    seen = set()
    speaker = field_text(fields.get("speaker"))
    for key in TEXT_FIELD_ORDER:
        if key in fields:
            seen.add(key)
            if key == "participants" and speaker:
                continue
            text = field_text(fields[key])
            if key == "summary" and speaker and text:
                text = attributed_text(speaker, text, tuple(_names(fields.get("addressed"))))
            if text:
                parts.append(text if key in ("summary", "insight", "content") else f"{key}: {text}")
    for key, value in fields.items():
        if key not in seen and key not in MESSAGE_FIELDS:
            text = field_text(value)
            if text:
                parts.append(f"{key}: {text}")
    return " | ".join(parts)


def node_label(type_name: str, fields: dict[str, Any]) -> str:
    spec = NODE_TYPES.get(type_name)
    keys = spec.label_fields if spec else ("name", "title", "summary", "content", "insight")
    for key in keys:
        text = field_text(fields.get(key))
        if text:
            return text if len(text) <= 80 else text[:79] + "…"
    return type_name
