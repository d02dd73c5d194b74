"""Export formats and conversion of imported graphs into nodes and edges.

Two formats, both ways: our own (`stbme-sidecar` v1), and the graph of the original ST-BME browser extension
(graph versions 1-9: `nodes[]` with `seqRange`/`childIds`/`clusters`/`_evolutionHistory`, `edges[]` with
`fromId`/`toId`/`edgeType`, times in milliseconds). A-MEM evolution history travels in the seed's names
(`{triggeredBy, timestamp (ms), reason}`) in the extension's format. Embeddings are never imported: they may
come from another model, so memories are re-embedded with the sidecar's own.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..errors import BadRequest
from ..graph.model import Edge, Node, new_id
from ..graph.schema import NODE_TYPES, normalize_relation
from ..pipeline.sync import ROLES, Message

FORMAT = "stbme-sidecar"
FORMAT_VERSION = 1
MAX_IMPORT_NODES = 200_000
# Message indexes stored in SQLite INTEGER columns: beyond these an import is refused, not overflowed.
MIN_SEQ, MAX_SEQ = -(2**31), 2**31 - 1
LAYERS = ("working", "short_term", "long_term")


@dataclasses.dataclass
class ImportedGraph:
    nodes: list[Node]
    edges: list[Edge]
    skipped: list[str]
    processed_upto: int | None  # how far the source had processed the chat, when it says
    # Our exports also carry the chat's messages and, per memory, the messages it was made from, so an
    # import can tie the memories to the chat (interop/restore.py).
    messages: list[Message] | None = None
    derived: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)  # new node/edge id -> range
    degraded_from: int | None = None
    llm_upto: int = -1               # how far the memory LLM had read the chat (extract.every)


@dataclasses.dataclass
class ChatSnapshot:
    """What an export holds besides the memories: the messages, how far they were processed, and which
    messages each memory came from ((table, id) -> range)."""
    messages: list[Message]
    processed_upto: int
    degraded_from: int | None
    derived: dict[tuple[str, str], tuple[int, int]]
    llm_upto: int = -1


def export_document(chat_id: str, nodes: list[Node], edges: list[Edge], snapshot: ChatSnapshot | None = None) -> dict:
    derived = snapshot.derived if snapshot else {}

    def with_origin(table: str, item_id: str, data: dict) -> dict:
        origin = derived.get((table, item_id))
        return data | {"derived_from": list(origin) if origin else None}

    doc = {
        "format": FORMAT, "version": FORMAT_VERSION, "chat_id": chat_id, "exported_at": time.time(),
        "nodes": [with_origin("nodes", n.id, {k: v for k, v in n.to_json().items() if k not in ("label", "embedder")})
                  for n in nodes],
        "edges": [with_origin("edges", e.id, {k: v for k, v in e.to_json().items() if k not in ("active", "chat_id")})
                  for e in edges],
    }
    if snapshot is not None:
        doc["processed_upto"] = snapshot.processed_upto
        doc["degraded_from"] = snapshot.degraded_from
        doc["llm_upto"] = snapshot.llm_upto
        doc["messages"] = [dataclasses.asdict(m) for m in snapshot.messages]
    return doc


def detect_format(doc: Any) -> str:
    if not isinstance(doc, dict):
        raise BadRequest("the import must be a JSON object (an stbme export or an ST-BME graph)")
    if doc.get("format") == FORMAT:
        for key in ("nodes", "edges"):
            if not isinstance(doc.get(key, []), list):
                raise BadRequest(f"the stbme export's {key!r} must be a list", field=key)
        return "stbme"
    if isinstance(doc.get("graph"), dict) and "nodes" not in doc:  # some ST-BME exports wrap the graph
        detect_format(doc["graph"])
        return "st-bme-wrapped"
    if isinstance(doc.get("nodes"), list):
        edges = _list(doc.get("edges"))
        if any(isinstance(e, dict) and "fromId" in e for e in edges) or any(
                isinstance(n, dict) and ("seqRange" in n or "childIds" in n or "createdTime" in n)
                for n in doc["nodes"][:50]) or "lastProcessedSeq" in doc or "historyState" in doc:
            return "st-bme"
    raise BadRequest("unrecognised import: expected an stbme export (format 'stbme-sidecar') "
                     "or a graph exported by the ST-BME extension (nodes with seqRange, edges with fromId)")


def _list(value: Any) -> list:
    """A list from the document, or [] for anything else (a broken file must not crash the import)."""
    return value if isinstance(value, list) else []


def _whole(value: Any) -> int | None:
    """A whole number kept in JSON (a timestamp in a history entry), None for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _int(value: Any, field: str) -> int | None:
    """A whole number that goes into an INTEGER column (a message index), None for anything else; a 400
    naming `field` when it is out of the range SQLite and the chat can hold."""
    value = _whole(value)
    if value is not None and not MIN_SEQ <= value <= MAX_SEQ:
        raise BadRequest(f"'{field}' is {value}, outside {MIN_SEQ}..{MAX_SEQ}", field=field)
    return value


def _range(value: Any, field: str) -> tuple[int | None, int | None]:
    """[a, b] of whole numbers (message indexes), else (None, None)."""
    if isinstance(value, list) and len(value) == 2 and all(_int(x, field) is not None for x in value):
        return min(value), max(value)
    return None, None


def _ref(id_map: dict[str, str], value: Any) -> str | None:
    return id_map.get(value) if isinstance(value, str) else None


def _seconds(value: Any, default: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return value / 1000.0 if value > 1e11 else float(value)  # ST-BME stores milliseconds
    return default


def _num(value: Any, default: float, lo: float, hi: float) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(lo, min(hi, float(value)))
    return default


def _clean_fields(fields: Any) -> dict:
    if not isinstance(fields, dict):
        return {}
    clean = {}
    for key, value in fields.items():
        if isinstance(key, str) and value not in (None, "", [], {}):
            clean[key[:64]] = value if isinstance(value, (str, int, float, bool, list, dict)) else str(value)
    return clean


def _check_size(doc: dict) -> None:
    if len(_list(doc.get("nodes"))) > MAX_IMPORT_NODES:
        raise BadRequest(f"the import has more than {MAX_IMPORT_NODES} nodes", field="nodes")


def _scope(value: Any) -> str:
    """ST-BME's scope object -> our scope string: its layer (objective or pov)."""
    layer = value.get("layer") if isinstance(value, dict) else None
    return layer if isinstance(layer, str) and layer else "objective"


def from_stbme_extension(doc: dict, chat_id: str) -> ImportedGraph:
    """Convert a graph exported by the original ST-BME extension."""
    if "graph" in doc and isinstance(doc["graph"], dict):
        doc = doc["graph"]
    _check_size(doc)
    now = time.time()
    nodes, skipped, id_map, pairs = [], [], {}, []
    for i, raw in enumerate(_list(doc.get("nodes"))):
        if not isinstance(raw, dict):
            skipped.append(f"nodes[{i}]: not an object")
            continue
        type_ = raw.get("type")
        if type_ not in NODE_TYPES:
            skipped.append(f"nodes[{i}]: unknown type {type_!r}")
            continue
        fields = _clean_fields(raw.get("fields"))
        if not fields:
            skipped.append(f"nodes[{i}]: no fields")
            continue
        seq_from, seq_to = _range(raw.get("seqRange"), f"nodes[{i}].seqRange")
        if seq_from is None and _int(raw.get("seq"), f"nodes[{i}].seq") is not None:
            seq_from = seq_to = raw["seq"]
        created = _seconds(raw.get("createdTime"), now)
        node = Node(
            id=new_id("n"), chat_id=chat_id, type=type_, fields=fields,
            importance=_num(raw.get("importance"), 5.0, 0, 10), seq_from=seq_from, seq_to=seq_to,
            level=int(_num(raw.get("level"), 0, 0, 100)), archived=bool(raw.get("archived")),
            tags=[str(c) for c in _list(raw.get("clusters")) if isinstance(c, (str, int))][:32],
            scope=_scope(raw.get("scope")),
            story_time=raw.get("storyTime") if isinstance(raw.get("storyTime"), dict) else None,
            access_count=int(_num(raw.get("accessCount"), 0, 0, 1e9)),
            last_access=_seconds(raw.get("lastAccessTime"), 0) or None,
            created_at=created, updated_at=_seconds(raw.get("updatedAt"), created),
            source="import",
        )
        if isinstance(raw.get("id"), str):
            id_map[raw["id"]] = node.id
        nodes.append(node)
        pairs.append((node, raw))
    for node, raw in pairs:
        node.parent_id = _ref(id_map, raw.get("parentId"))
        node.children = [id_map[c] for c in _list(raw.get("childIds")) if _ref(id_map, c)]
        node.evolution = _history_from_extension(raw, id_map)
    edges = _edges(_list(doc.get("edges")), id_map, chat_id, skipped, ("fromId", "toId"), now)
    # v9 summaries live outside the node list: keep the active ones as summary memories.
    summary_state = doc.get("summaryState") if isinstance(doc.get("summaryState"), dict) else {}
    for i, entry in enumerate(_list(summary_state.get("entries"))):
        if isinstance(entry, dict) and entry.get("status", "active") == "active" and entry.get("text"):
            seq_from, seq_to = _range(entry.get("messageRange"), f"summaryState.entries[{i}].messageRange")
            if seq_from is not None and seq_from < 0:  # ST-BME writes [-1, -1] for "unknown"
                seq_from = seq_to = None
            level = int(_num(entry.get("level"), 0, 0, 100))
            nodes.append(Node(id=new_id("n"), chat_id=chat_id, type="summary",
                              fields={"summary": str(entry["text"]), "level": level},
                              seq_from=seq_from, seq_to=seq_to, importance=7.0, source="import"))
    processed = _int(doc.get("lastProcessedSeq"), "lastProcessedSeq")
    if processed is None and isinstance(doc.get("historyState"), dict):
        processed = _int(doc["historyState"].get("lastProcessedAssistantFloor"),
                         "historyState.lastProcessedAssistantFloor")
    return ImportedGraph(nodes, edges, skipped, processed)


def _history_from_extension(raw: dict, id_map: dict[str, str]) -> list[dict]:
    """The seed's `_evolutionHistory` entries in our names (with the ids of this import), then our own
    history kept aside by an export to this format."""
    history = []
    for entry in _list(raw.get("_evolutionHistory"))[:100]:
        if isinstance(entry, dict):
            trigger = entry.get("triggeredBy")
            history.append({"triggered_by": id_map.get(trigger, trigger) if isinstance(trigger, str) else None,
                            "timestamp": _whole(entry.get("timestamp")), "reason": str(entry.get("reason") or "")})
    return history + [e for e in _list(raw.get("_stbmeHistory"))[:100] if isinstance(e, dict)]


def _ms(seconds: float | None) -> int | None:
    return int(seconds * 1000) if seconds else None


def to_stbme_extension(nodes: list[Node], edges: list[Edge], processed_upto: int) -> dict:
    """A graph the original ST-BME extension can load (version 9). Evolution history goes out in the seed's
    names; entries it has no place for (DNA history) ride in `_stbmeHistory`, so a round trip keeps them."""
    out_nodes = []
    for n in nodes:
        seeded = [h for h in n.evolution if "triggered_by" in h]
        out_nodes.append({
            "id": n.id, "type": n.type, "level": n.level, "parentId": n.parent_id, "childIds": n.children,
            "seq": n.seq_to, "seqRange": [n.seq_from, n.seq_to] if n.seq_from is not None else None,
            "archived": n.archived, "fields": n.fields, "embedding": None, "importance": n.importance,
            "accessCount": n.access_count, "updatedAt": _ms(n.updated_at), "lastAccessTime": _ms(n.last_access),
            "createdTime": _ms(n.created_at), "clusters": n.tags, "scope": {"layer": n.scope},
            "storyTime": n.story_time,
            "_evolutionHistory": [{"triggeredBy": h["triggered_by"],
                                   "timestamp": h.get("timestamp") or _ms(h.get("at")) or 0,
                                   "reason": h.get("reason") or ""} for h in seeded],
            "_stbmeHistory": [h for h in n.evolution if "triggered_by" not in h],
        })
    out_edges = [{"id": e.id, "fromId": e.from_id, "toId": e.to_id, "relation": e.relation, "strength": e.strength,
                  "edgeType": 255 if e.inhibitory else 0, "createdTime": _ms(e.created_at), "validAt": _ms(e.valid_at),
                  "invalidAt": _ms(e.invalid_at), "expiredAt": _ms(e.expired_at)} for e in edges]
    return {"version": 9, "lastProcessedSeq": processed_upto, "nodes": out_nodes, "edges": out_edges}


def _edges(raw_edges, id_map, chat_id, skipped, keys, now, on_edge=None) -> list[Edge]:
    edges = []
    for i, raw in enumerate(raw_edges):
        if not isinstance(raw, dict):
            skipped.append(f"edges[{i}]: not an object")
            continue
        src, dst = _ref(id_map, raw.get(keys[0])), _ref(id_map, raw.get(keys[1]))
        if not src or not dst or src == dst:
            skipped.append(f"edges[{i}]: endpoint missing")
            continue
        relation = normalize_relation(str(raw.get("relation") or "related"))
        created = _seconds(raw.get("createdTime", raw.get("created_at")), now)
        edges.append(Edge(
            id=new_id("e"), chat_id=chat_id, from_id=src, to_id=dst, relation=relation,
            strength=_num(raw.get("strength"), 0.8, 0, 1),
            inhibitory=raw.get("edgeType") == 255 or bool(raw.get("inhibitory")) or relation == "contradicts",
            created_at=created,
            valid_at=_seconds(raw.get("validAt", raw.get("valid_at")), created),
            invalid_at=_seconds(raw.get("invalidAt", raw.get("invalid_at")), 0) or None,
            expired_at=_seconds(raw.get("expiredAt", raw.get("expired_at")), 0) or None,
        ))
        if on_edge is not None:
            on_edge(edges[-1], raw, f"edges[{i}]")
    return edges


def from_export(doc: dict, chat_id: str) -> ImportedGraph:
    """Convert our own export."""
    if doc.get("version") != FORMAT_VERSION:
        raise BadRequest(f"unsupported stbme export version {doc.get('version')!r}", field="version")
    _check_size(doc)
    now = time.time()
    nodes, skipped, id_map, pairs, derived = [], [], {}, [], {}
    for i, raw in enumerate(_list(doc.get("nodes"))):
        if not isinstance(raw, dict) or raw.get("type") not in NODE_TYPES:
            skipped.append(f"nodes[{i}]: missing or unknown type")
            continue
        fields = _clean_fields(raw.get("fields"))
        if not fields:
            skipped.append(f"nodes[{i}]: no fields")
            continue
        seq_from, seq_to = _range(raw.get("seq_range"), f"nodes[{i}].seq_range")
        node = Node(
            id=new_id("n"), chat_id=chat_id, type=raw["type"], fields=fields,
            importance=_num(raw.get("importance"), 5, 0, 10), weight=_num(raw.get("weight"), 1, 0, 1),
            seq_from=seq_from, seq_to=seq_to,
            level=int(_num(raw.get("level"), 0, 0, 100)), archived=bool(raw.get("archived")),
            locked=bool(raw.get("locked")), pinned=bool(raw.get("pinned")),
            scope=raw["scope"] if isinstance(raw.get("scope"), str) and raw["scope"] else "objective",
            story_time=raw.get("story_time") if isinstance(raw.get("story_time"), dict) else None,
            tags=[str(t) for t in _list(raw.get("tags")) if isinstance(t, (str, int))][:32],
            access_count=int(_num(raw.get("access_count"), 0, 0, 1e9)),
            last_access=_seconds(raw.get("last_access"), 0) or None,
            created_at=_seconds(raw.get("created_at"), now), updated_at=_seconds(raw.get("updated_at"), now),
            evolution=[e for e in _list(raw.get("evolution")) if isinstance(e, dict)],
            source=raw["source"] if isinstance(raw.get("source"), str) and raw["source"] else "import",
            layer=raw["layer"] if raw.get("layer") in LAYERS else "working",
        )
        if isinstance(raw.get("id"), str):
            id_map[raw["id"]] = node.id
        nodes.append(node)
        pairs.append((node, raw))
        _origin(derived, node.id, raw, f"nodes[{i}]")
    for node, raw in pairs:
        node.parent_id = _ref(id_map, raw.get("parent_id"))
        node.children = [id_map[c] for c in _list(raw.get("children")) if _ref(id_map, c)]
    edges = _edges(_list(doc.get("edges")), id_map, chat_id, skipped, ("from_id", "to_id"), now,
                   on_edge=lambda edge, raw, where: _origin(derived, edge.id, raw, where))
    messages = _messages(doc["messages"]) if "messages" in doc else None
    processed = _int(doc.get("processed_upto"), "processed_upto")
    llm_upto = _int(doc.get("llm_upto"), "llm_upto")
    return ImportedGraph(nodes, edges, skipped, processed if messages is not None else None, messages,
                         derived if messages is not None else {}, _int(doc.get("degraded_from"), "degraded_from"),
                         llm_upto if llm_upto is not None else -1)


def _origin(derived: dict, item_id: str, raw: dict, where: str) -> None:
    start, end = _range(raw.get("derived_from"), f"{where}.derived_from")
    if start is not None and start >= 0:
        derived[item_id] = (start, end)


def _messages(raw: Any) -> list[Message]:
    """The export's messages, checked like a sync: 0..n-1 in order, known roles, text strings."""
    if not isinstance(raw, list):
        raise BadRequest("the export's 'messages' must be a list", field="messages")
    messages = []
    for i, m in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("index") != i:
            raise BadRequest(f"'{where}' must be an object with index {i}", field=where)
        if m.get("role") not in ROLES:
            raise BadRequest(f"'{where}.role' must be one of {', '.join(ROLES)}", field=f"{where}.role")
        for key in ("name", "text"):
            if not isinstance(m.get(key), str):
                raise BadRequest(f"'{where}.{key}' must be a string", field=f"{where}.{key}")
        swipe_id, send_date = m.get("swipe_id"), m.get("send_date")
        messages.append(Message(i, m["role"], m["name"], m["text"], _int(swipe_id, f"{where}.swipe_id"),
                                send_date if isinstance(send_date, str) else None))
    return messages


def convert(doc: Any, chat_id: str) -> ImportedGraph:
    kind = detect_format(doc)
    if kind == "st-bme-wrapped":
        return convert(doc["graph"], chat_id)
    return from_export(doc, chat_id) if kind == "stbme" else from_stbme_extension(doc, chat_id)
