"""The operations an extraction answer asks for, read tolerantly (container keys, aliases, a lone operation),
and applied in the batch transaction: creates (latest-only types merged by name), updates with state-change
events, deletes (archive), links, contradictions that invalidate the old fact, and the A-MEM evolution a
created memory carries."""

from __future__ import annotations

import collections
import itertools
import re
from typing import Any

import orjson

from ..graph.changes import ChangeSet
from ..graph.model import Node, field_text, new_id, node_from_row
from ..graph.schema import NAMED_TYPES, NODE_TYPES, RELATIONS, Strength
from ..store.events import record_event
from .batch import BatchContext
from .evolve import EvolutionCounts, add_counts, apply_evolution
from .prompting import KeyMap, as_list, clean_fields, norm_key

CREATABLE = ("event", "character", "location", "rule", "thread")
MAX_OPS = 24
# What a small model held to the answer schema writes when it has nothing to say: keys ("M1, M2"),
# brackets, "...", or the prompt's own message lines (SmolLM2-135M, issue 20 item 9). Such a text is no memory.
_KEY_TOKENS = re.compile(r"\b[MNGR]\d+\b")
_PROMPT_ECHO = re.compile(r"#\d+ \[(?:user|assistant|system)\b")


def says_nothing(text: str) -> bool:
    """True for a field text that holds no words of its own (fewer than two letters once keys are left out,
    or an echo of the prompt's message lines)."""
    if _PROMPT_ECHO.search(text):
        return True
    return sum(ch.isalpha() for ch in _KEY_TOKENS.sub("", text)) < 2


def _meaningful(fields: dict) -> dict:
    """The fields without the texts that say nothing."""
    return {k: v for k, v in fields.items() if not (isinstance(v, str) and says_nothing(v))}


_OP_ALIASES = {"create": "create", "add": "create", "new": "create", "insert": "create",
               "update": "update", "edit": "update", "modify": "update", "merge": "update",
               "delete": "delete", "remove": "delete", "archive": "delete"}
# Common synonyms of the schema's types, for a model that names a type in its own words. A guess, not yet
# seen from a real model: the 135M model's drops were answers with no operation in them at all. The prompt
# still asks for the schema's own names; these only keep an operation named otherwise.
_TYPE_ALIASES = {
    "person": "character", "people": "character", "npc": "character", "char": "character",
    "persona": "character", "protagonist": "character", "actor": "character", "player": "character",
    "place": "location", "area": "location", "room": "location", "setting": "location", "region": "location",
    "scene": "event", "action": "event", "happening": "event", "incident": "event", "episode": "event",
    "fact": "event", "memory": "event", "moment": "event",
    "plot": "thread", "plotline": "thread", "plot_line": "thread", "storyline": "thread", "story_line": "thread",
    "quest": "thread", "goal": "thread", "mystery": "thread", "arc": "thread",
    "law": "rule", "constraint": "rule", "world_rule": "rule", "lore": "rule",
}


def canonical_type(value: Any) -> str:
    """The schema type an operation's `type` means: case, spaces and hyphens, a plural, or a common synonym
    ("Person" -> character); what matches nothing stays as written, to be counted as unknown_type."""
    text = "_".join(str(value or "").strip().lower().replace("-", " ").split())
    for candidate in (text, text[:-1] if text.endswith("s") else None, text[:-2] if text.endswith("es") else None):
        if candidate and (candidate in NODE_TYPES or candidate in _TYPE_ALIASES):
            return _TYPE_ALIASES.get(candidate, candidate)
    return text


_ID_KEYS = ("id", "key", "nodeId", "node_id", "target_node_id", "targetNodeId", "target")
_LINK_TARGET_KEYS = ("target", "targetNodeId", "target_node_id", "targetRef", "target_ref", "to", "id", "ref", "key")


def parse_operations(value: Any, dropped: collections.Counter | None = None) -> list[dict]:
    """Operations from a tolerant reading of the answer (container keys, aliases, a lone operation).
    `dropped` counts the items left out, by reason (a real model's answer may follow no schema: issue 20)."""
    raw = as_list(value, "operations", "ops", "nodes", "items", "entries", "memories", "results", "data", "actions")
    dropped = collections.Counter() if dropped is None else dropped
    if len(raw) > MAX_OPS:
        dropped["over_limit"] += len(raw) - MAX_OPS
    ops = []
    for item in raw[:MAX_OPS]:
        if not isinstance(item, dict):
            dropped["not_an_object"] += 1
            continue
        action = str(item.get("op") or item.get("operation") or item.get("action") or "").strip().lower()
        action = _OP_ALIASES.get(action, "")
        target = next((item[k] for k in _ID_KEYS if k in item and norm_key(item[k])), None)
        if not action:
            action = "update" if target and norm_key(target) and norm_key(target)[0] == "M" else "create"
        type_ = canonical_type(item.get("type") or item.get("node_type"))
        fields = dict(item.get("fields")) if isinstance(item.get("fields"), dict) else {}
        spec = NODE_TYPES.get(type_)
        if spec:  # schema columns given at the top level belong in fields
            for column in spec.columns:
                if column in item and column not in fields and column != "type":
                    fields[column] = item[column]
        links = item.get("links") or item.get("relations") or item.get("edges") or []
        ops.append({
            "op": action, "type": type_, "fields": fields, "ref": norm_key(item.get("ref")),
            "target": norm_key(target) if action != "create" else None,
            "importance": item.get("importance"),
            "tags": item.get("tags") or item.get("clusters") or [],
            "source": norm_key(item.get("source") or item.get("sourceNodeId") or item.get("source_node_id")
                               or item.get("sourceRef")),
            "links": [_parse_link(link) for link in links if isinstance(link, dict)][:12]
            if isinstance(links, list) else [],
            "evolve": item.get("evolve") if isinstance(item.get("evolve"), dict) else None,
        })
    return ops


def _parse_link(link: dict) -> dict:
    target = next((link[k] for k in _LINK_TARGET_KEYS if k in link and norm_key(link[k])), None)
    relation = str(link.get("relation") or link.get("type") or "related").strip().lower()
    action = str(link.get("action") or "").lower()
    try:
        strength = float(link.get("strength", Strength.LINK))
    except (TypeError, ValueError):
        strength = Strength.LINK
    return {"target": norm_key(target), "relation": relation if relation in RELATIONS else "related",
            "strength": strength, "remove": bool(link.get("remove")) or action in ("remove", "unlink", "invalidate")}


def _importance(value: Any, default: float) -> float:
    try:
        return max(1.0, min(10.0, float(value)))
    except (TypeError, ValueError):
        return default


class OpApplier:
    """Applies parsed operations: creates (latest-only types merged by name), updates with state-change
    events, deletes (archive), links; contradictions invalidate the old fact."""

    def __init__(self, ctx: BatchContext, cs: ChangeSet, keys: KeyMap):
        self.ctx, self.cs, self.keys = ctx, cs, keys
        self.seq_from, self.seq_to = ctx.msg_range  # the messages the extraction read
        self.refs: dict[str, str] = {}
        self.created: list[str] = []
        self.updated: list[str] = []
        self.touched: list[str] = []
        self.dropped: collections.Counter = collections.Counter()   # operations (and links) left out, by reason
        self.language = ctx.data.get("language", "en")
        self._removed_pairs: set[frozenset] = set()

    @property
    def skipped(self) -> int:
        return sum(n for reason, n in self.dropped.items() if reason != "bad_link_target")

    def _drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def resolve(self, key: str | None) -> str | None:
        if not key:
            return None
        node_id = self.refs.get(key) or self.keys.resolve(key)
        if node_id is None:
            return None
        node = self.cs.get_node(node_id)
        return node_id if node is not None and not node.archived else None

    def run(self, ops: list[dict]) -> None:
        pending_links: list[tuple[str, dict]] = []
        evolutions: list[tuple[str, dict]] = []
        for op in ops:
            if op.get("_skip"):
                self._drop("duplicate")
                continue
            node_id = {"create": self._create, "update": self._update, "delete": self._delete}[op["op"]](op)
            if node_id is None:
                continue
            if op["op"] != "delete":
                if node_id not in self.touched:
                    self.touched.append(node_id)
                pending_links += [(node_id, link) for link in op["links"]]
                if op["op"] == "create" and op.get("evolve") and node_id in self.created:
                    evolutions.append((node_id, op))
        for from_id, link in pending_links:
            self._link(from_id, link)
        self._default_edges()
        self._evolve([(node_id, op["evolve"]) for node_id, op in evolutions])

    def _touch(self, node_id: str) -> None:
        if node_id not in self.updated and node_id not in self.created:
            self.updated.append(node_id)

    def _find_named(self, type_: str, name: str) -> Node | None:
        family = (type_, "entity") if type_ in ("character", "location") else (type_,)
        rows = self.cs.conn.execute(
            f"SELECT * FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN ({','.join('?' * len(family))})"
            " ORDER BY coalesce(seq_to, -1) DESC, fields, id", (self.cs.chat_id, *family)).fetchall()
        key = name.casefold().strip()
        matches = [node_from_row(r) for r in rows if field_text(orjson_fields(r).get("name")).casefold() == key]
        matches.sort(key=lambda n: n.type != type_)  # the same type before an entity anchor
        return matches[0] if matches else None

    def _create(self, op: dict) -> str | None:
        type_ = op["type"]
        spec = NODE_TYPES.get(type_)
        if type_ not in CREATABLE or spec is None:
            self._drop("unknown_type")
            return None
        if op.get("_merge_into"):  # dedupe decided: this corrects or completes an existing memory
            node_id = self._merge(op["_merge_into"], op["fields"], op, state_event=False)
            if node_id and op["ref"]:
                self.refs[op["ref"]] = node_id
            return node_id
        given = clean_fields(spec.columns, op["fields"])
        fields = _meaningful(given)
        if type_ == "event" and not fields.get("title") and fields.get("summary"):
            fields["title"] = fields["summary"][:24]
        if any(not field_text(fields.get(r)) for r in spec.required):
            said = any(field_text(given.get(r)) for r in spec.required)
            self._drop("empty_fields" if not given else "says_nothing" if said else "missing_field")
            return None
        if spec.latest_only and fields.get("name"):
            existing = self._find_named(type_, fields["name"])
            if existing is not None:
                if existing.type != type_ and not existing.locked:  # an entity anchor learns its type
                    self.cs.update_node(existing.id, type=type_)
                node_id = self._merge(existing.id, fields, op, state_event=False)
                if op["ref"]:
                    self.refs[op["ref"]] = node_id
                return node_id
        tags = [str(t)[:64] for t in op["tags"] if isinstance(t, (str, int))][:8] if isinstance(op["tags"], list) else []
        node = self.cs.insert_node(Node(
            id=new_id("n"), chat_id=self.cs.chat_id, type=type_, fields=fields,
            importance=_importance(op["importance"], 5.0), seq_from=self.seq_from, seq_to=self.seq_to,
            tags=tags, source="llm"))
        self.created.append(node.id)
        if op["ref"]:
            self.refs[op["ref"]] = node.id
        return node.id

    def _update(self, op: dict) -> str | None:
        target = op.get("_target_id") or self.resolve(op["target"])
        if target is None or self.cs.get_node(target) is None:
            self._drop("bad_reference")
            return None
        return self._merge(target, op["fields"], op, state_event=True)

    def _merge(self, target: str, raw_fields: dict, op: dict, *, state_event: bool) -> str | None:
        node = self.cs.get_node(target)
        if node is None or node.archived:
            self._drop("bad_reference")
            return None
        if node.locked:  # locked memories are never rewritten
            self._drop("locked")
            return node.id
        spec = NODE_TYPES.get(node.type)
        fields = _meaningful(clean_fields(spec.columns if spec else tuple(raw_fields), raw_fields))
        diffs = [(k, field_text(node.fields.get(k)), field_text(v)) for k, v in fields.items()
                 if field_text(node.fields.get(k)) != field_text(v) and k not in ("name",)]
        changes: dict[str, Any] = {}
        if diffs:
            changes["fields"] = {**node.fields, **{k: fields[k] for k, _, _ in diffs}}
            changes["embedding"] = None
        seq_from = self.seq_from if node.seq_from is None else min(node.seq_from, self.seq_from)
        seq_to = self.seq_to if node.seq_to is None else max(node.seq_to, self.seq_to)
        if diffs or (seq_from, seq_to) != (node.seq_from, node.seq_to):
            changes.update(seq_from=seq_from, seq_to=seq_to)
        if op.get("importance") is not None:
            importance = _importance(op["importance"], node.importance)
            if importance != node.importance:
                changes["importance"] = importance
        if changes:
            self.cs.update_node(target, **changes)
            self._touch(target)
        if not state_event:
            return target
        # A state change: old "updates" edges into the target stop being current.
        source = self.resolve(op.get("source"))
        for row in self.cs.conn.execute(
                "SELECT id, from_id, relation FROM edges WHERE chat_id = ? AND to_id = ? AND invalid_at IS NULL"
                " AND (relation = 'updates' OR (relation = 'temporal_update' AND from_id = ?))",
                (self.cs.chat_id, target, source or "")).fetchall():
            if diffs or row["relation"] == "temporal_update":
                self.cs.invalidate_edge(row["id"])
        if source and source != target:
            self.cs.add_edge(source, target, "temporal_update", Strength.TEMPORAL)
        if diffs:
            label = node.label
            zh = self.language == "zh"
            empty = "空" if zh else "(empty)"
            changed = "; ".join(f"{k}: {a or empty} -> {b or empty}" for k, a, b in diffs[:3])
            event = self.cs.insert_node(Node(
                id=new_id("n"), chat_id=self.cs.chat_id, type="event",
                fields={"title": f"{label} 状态更新" if zh else f"{label}: state update",
                        "summary": (f"{node.type} 状态更新：" if zh else f"{node.type} state update: ") + changed,
                        "participants": [label], "status": "resolved"},
                importance=max(4.0, min(8.0, node.importance)), seq_from=self.seq_from, seq_to=self.seq_to,
                source="llm"))
            self.created.append(event.id)
            self.cs.add_edge(event.id, target, "updates", Strength.STATE_CHANGE)
        return target

    def _delete(self, op: dict) -> str | None:
        target = self.resolve(op["target"])
        node = self.cs.get_node(target) if target else None
        if node is None or node.locked or node.pinned:
            self._drop("bad_reference" if node is None else "locked")
            return None
        self.cs.update_node(target, archived=True)
        record_event(self.cs.conn, self.cs.chat_id, "archive", node_id=target, reason="extraction deleted it")
        return target

    def _link(self, from_id: str, link: dict) -> None:
        to_id = self.resolve(link["target"])
        if to_id is None or to_id == from_id:
            if to_id is None:
                self._drop("bad_link_target")
            return
        if link["remove"]:
            self._removed_pairs.add(frozenset((from_id, to_id)))
            for row in self.cs.conn.execute(
                    "SELECT id FROM edges WHERE chat_id = ? AND invalid_at IS NULL AND relation = ? AND"
                    " ((from_id = ? AND to_id = ?) OR (from_id = ? AND to_id = ?))",
                    (self.cs.chat_id, link["relation"], from_id, to_id, to_id, from_id)).fetchall():
                self.cs.invalidate_edge(row["id"])
            return
        self.cs.add_edge(from_id, to_id, link["relation"], max(0.05, min(1.0, link["strength"])))
        if link["relation"] == "contradicts":
            self._invalidate_fact(to_id, from_id)

    def _invalidate_fact(self, old_id: str, new_id_: str) -> None:
        """The contradicted fact stops being current: archived (restorable; the inhibitory edge keeps the
        history). Characters and places are not facts; locked and pinned memories stay."""
        node = self.cs.get_node(old_id)
        if node is None or node.archived or node.locked or node.pinned or node.type in NAMED_TYPES:
            return
        if old_id in self.created or old_id in self.touched:
            return  # both sides new in this batch: keep both, the LLM was unsure
        self.cs.update_node(old_id, archived=True)
        record_event(self.cs.conn, self.cs.chat_id, "contradicted", node_id=old_id, by=new_id_)

    def _evolve(self, evolutions: list[tuple[str, dict]]) -> None:
        """A-MEM evolution answered with the extraction: each new memory may re-colour the existing memories
        the LLM was shown (M keys) and link to them or to other new ones (N refs)."""
        counts = EvolutionCounts()
        for node_id, decision in evolutions:
            counts += apply_evolution(self.cs, node_id, decision, self.resolve)
        add_counts(self.ctx, counts)

    def _default_edges(self) -> None:
        """New and updated memories of one batch belong together: weak `related` edges between pairs
        that have no edge yet (ST-BME's default batch edges), over the first few."""
        nodes = [n for n in self.touched if self.cs.get_node(n) and not self.cs.get_node(n).archived][:6]
        for a, b in itertools.combinations(nodes, 2):
            if frozenset((a, b)) in self._removed_pairs:
                continue
            exists = self.cs.conn.execute(
                "SELECT 1 FROM edges WHERE chat_id = ? AND invalid_at IS NULL AND"
                " ((from_id = ? AND to_id = ?) OR (from_id = ? AND to_id = ?)) LIMIT 1",
                (self.cs.chat_id, a, b, b, a)).fetchone()
            if not exists:
                self.cs.add_edge(a, b, "related", Strength.BATCH)


def orjson_fields(row) -> dict:
    return orjson.loads(row["fields"])
