"""HTTP bodies parsed and validated into the typed requests the use cases take. Every problem is a 400 that
names the field; nothing is stored before a body is known to be good."""

from __future__ import annotations

from typing import Any

from .. import config
from ..dna.assets import TRIGGER_TYPES
from ..errors import BadRequest
from ..graph.schema import NODE_TYPES
from ..pipeline.sync import ROLES, Message, SyncRequest
from ..tokens import last_tokens
from ..usecases.memories import MemoryEdit, NewMemory
from ..usecases.recall import RecallRequest
from ..wire_limits import MAX_INDEX

MAX_FIELD_NAME = 64
MAX_TAGS, MAX_TAG_CHARS = 32, 64
MAX_RECENT = 20  # recent turns a recall may send (recall.recent_turns is at most 20)


def _int(value: Any, field: str, minimum: int = 0, maximum: int = MAX_INDEX) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{field}' must be a whole number", field=field)
    if not minimum <= value <= maximum:
        raise BadRequest(f"'{field}' must be from {minimum} to {maximum}", field=field)
    return value


def parse_sync_request(body: Any, *, max_messages: int, max_chars: int) -> SyncRequest:
    """Validate a sync body; every problem is a 400 naming the field."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with 'length', 'messages' and 'anchors'")
    length = _int(body.get("length"), "length")
    raw_messages = body.get("messages", [])
    if not isinstance(raw_messages, list):
        raise BadRequest("'messages' must be a list", field="messages")
    if len(raw_messages) > max_messages:
        raise BadRequest(f"{len(raw_messages)} messages in one sync; the limit is {max_messages} "
                         "(server.max_sync_messages): send them in chunks", field="messages")
    messages = []
    for i, raw in enumerate(raw_messages):
        where = f"messages[{i}]"
        if not isinstance(raw, dict):
            raise BadRequest(f"'{where}' must be an object", field=where)
        index = _int(raw.get("index"), f"{where}.index")
        role = raw.get("role")
        if role not in ROLES:
            raise BadRequest(f"'{where}.role' must be one of user, assistant, system (got {role!r})",
                             field=f"{where}.role")
        name = raw.get("name") or ""
        text = raw.get("text")
        if not isinstance(name, str):
            raise BadRequest(f"'{where}.name' must be a string", field=f"{where}.name")
        if not isinstance(text, str):
            raise BadRequest(f"'{where}.text' must be a string", field=f"{where}.text")
        if len(text) > max_chars:
            raise BadRequest(f"'{where}.text' has {len(text)} characters; the limit is {max_chars} "
                             "(server.max_message_chars)", field=f"{where}.text")
        swipe_id = raw.get("swipe_id")
        if swipe_id is not None:
            swipe_id = _int(swipe_id, f"{where}.swipe_id")
        send_date = raw.get("send_date")
        if send_date is not None and not isinstance(send_date, (str, int, float)):
            raise BadRequest(f"'{where}.send_date' must be a string", field=f"{where}.send_date")
        messages.append(Message(index, role, name, text, swipe_id, None if send_date is None else str(send_date)))
    for prev, cur in zip(messages, messages[1:]):
        if cur.index != prev.index + 1:
            raise BadRequest(f"message indexes must be contiguous: {prev.index} is followed by {cur.index}",
                             field="messages")
    if messages and messages[-1].index >= length:
        raise BadRequest(f"message index {messages[-1].index} is not below length {length}", field="messages")
    raw_anchors = body.get("anchors", [])
    if not isinstance(raw_anchors, list):
        raise BadRequest("'anchors' must be a list of {index, chain}", field="anchors")
    anchors = {}
    for i, raw in enumerate(raw_anchors[:256]):
        if not isinstance(raw, dict) or not isinstance(raw.get("chain"), str):
            raise BadRequest(f"'anchors[{i}]' must be an object with 'index' and 'chain'", field=f"anchors[{i}]")
        anchors[_int(raw.get("index"), f"anchors[{i}].index")] = raw["chain"]
    return SyncRequest(length, messages, anchors)


def parse_recall(body: Any, *, max_chars: int, max_query_tokens: int | None = None) -> RecallRequest:
    """{query, recent?, budget_tokens?, max_memories?, reinforce?}. The query and each recent text are cut to their
    last `max_query_tokens` (recall.max_query_tokens): only that much is embedded and searched."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with 'query'")
    query = body.get("query", "")
    if not isinstance(query, str):
        raise BadRequest("'query' must be a string", field="query")
    if len(query) > max_chars:
        raise BadRequest(f"'query' has {len(query)} characters; the limit is {max_chars} "
                         "(server.max_message_chars)", field="query")
    recent = body.get("recent") or []
    if not isinstance(recent, list) or not all(isinstance(m, dict) for m in recent):
        raise BadRequest("'recent' must be a list of {role, name, text}", field="recent")
    recent = recent[-MAX_RECENT:]
    for i, message in enumerate(recent):
        if message.get("text") is not None and not isinstance(message["text"], str):
            raise BadRequest(f"'recent[{i}].text' must be a string", field=f"recent[{i}].text")
    if max_query_tokens is not None:
        query = last_tokens(query, max_query_tokens)
        recent = [{**m, "text": last_tokens(m["text"], max_query_tokens)} if isinstance(m.get("text"), str) else m
                  for m in recent]
    budget = config.setting("recall.budget_tokens").validate(body["budget_tokens"]) if "budget_tokens" in body else None
    limit = config.setting("recall.max_memories").validate(body["max_memories"]) if "max_memories" in body else None
    reinforce = body.get("reinforce", True)
    if not isinstance(reinforce, bool):
        raise BadRequest("'reinforce' must be true or false", field="reinforce")
    return RecallRequest(query, recent, budget, limit, reinforce)


def _strict_bool(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{name!r} must be true or false", field=name)
    return value


def _importance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
        raise BadRequest("'importance' must be a number from 0 to 10", field="importance")
    return float(value)


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise BadRequest("'tags' must be a list of strings", field="tags")
    return [t[:MAX_TAG_CHARS] for t in value][:MAX_TAGS]


def _fields(value: Any, max_chars: int, *, removable: bool) -> dict:
    """Memory fields: text, numbers or lists of them; None removes a field in an edit."""
    if not isinstance(value, dict) or not value:
        raise BadRequest("'fields' must be a non-empty object", field="fields")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_FIELD_NAME:
            raise BadRequest(f"field names must be 1-{MAX_FIELD_NAME} characters", field="fields")
        if item is None and removable:
            continue
        if isinstance(item, bool) or not isinstance(item, (str, int, float, list)):
            raise BadRequest(f"field {key!r} must be text, a number or a list", field=f"fields.{key}")
        if len(str(item)) > max_chars:
            raise BadRequest(f"field {key!r} is too long", field=f"fields.{key}")
    return dict(value)


def parse_new_memory(body: Any, *, max_chars: int) -> NewMemory:
    """{type, fields, importance?, pinned?, locked?, tags?}, or {text} for a plain event."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with 'type' and 'fields' (or 'text')")
    if "fields" not in body and isinstance(body.get("text"), str):
        body = {**body, "type": body.get("type", "event"), "fields": {"summary": body["text"]}}
    type_ = body.get("type")
    if type_ not in NODE_TYPES:
        raise BadRequest(f"'type' must be one of {', '.join(NODE_TYPES)}", field="type")
    return NewMemory(type_, _fields(body.get("fields"), max_chars, removable=False),
                     importance=_importance(body.get("importance", 6.0)), pinned=_strict_bool(body, "pinned"),
                     locked=_strict_bool(body, "locked"), tags=_tags(body.get("tags")))


EDIT_KEYS = ("fields", "importance", "tags", "unlock")


def parse_memory_edit(body: Any, *, max_chars: int) -> MemoryEdit:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(body) - set(EDIT_KEYS))
    if unknown:
        raise BadRequest(f"unknown key {unknown[0]!r}", field=unknown[0])
    return MemoryEdit(
        fields=_fields(body["fields"], max_chars, removable=True) if "fields" in body else None,
        importance=_importance(body["importance"]) if "importance" in body else None,
        tags=_tags(body["tags"]) if "tags" in body else None,
        unlock=_strict_bool(body, "unlock"))


def parse_settings(body: Any) -> dict:
    if not isinstance(body, dict) or "settings" not in body:
        raise BadRequest("send {\"settings\": {name: value}}", field="settings")
    if not isinstance(body["settings"], dict):
        raise BadRequest("'settings' must be an object of {name: value}", field="settings")
    return body["settings"]


def parse_signals(body: Any) -> list[dict]:
    """{signals: [{type, content}]} for gene selection."""
    signals = body.get("signals") if isinstance(body, dict) else None
    if not isinstance(signals, list) or not signals or not all(
            isinstance(s, dict) and s.get("type") in TRIGGER_TYPES and isinstance(s.get("content", ""), str)
            for s in signals):
        raise BadRequest("'signals' must be a non-empty list of {type, content}", field="signals")
    return [{"type": s["type"], "content": s.get("content", "")} for s in signals]


def parse_text(body: Any, *, max_chars: int) -> str:
    """{text} with a non-empty user message (signal preview)."""
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("'text' must be a non-empty string", field="text")
    if len(text) > max_chars:
        raise BadRequest("'text' is too long", field="text")
    return text
