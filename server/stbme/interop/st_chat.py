"""SillyTavern chat files (`.jsonl`) read as the extension sees the same chat, and cut into sync requests.

A chat file holds one JSON value per line. A single-character chat starts with a header line (`user_name`,
`character_name`, `create_date`, `chat_metadata`) that ST drops when it loads the chat (script.js `getChat`:
`chat.shift()`); a group chat (ST 1.12: `group chats/<id>.jsonl`) has no header. ST skips lines that do not
parse and falsy values (chats.js: `lines.map(tryParse).filter(x => x)`), so this reader does too. The chat
id the extension uses is `getCurrentChatId()`: the character's `chat` or the group's `chat_id`, both the
file name without `.jsonl`.

Each message becomes what `st_extension/lib/hash.js` `messageParts` and `lib/sync.js` `wireMessage` make
of it (JavaScript's truthiness and `String()` included), so the hashes and chains are the extension's own
and a later sync from SillyTavern finds the chat already stored.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import orjson

from ..hashing import chain_hash, message_hash
from ..wire_limits import MAX_INDEX

SUFFIX = ".jsonl"
HEADER_KEYS = ("chat_metadata", "user_name", "character_name", "create_date")


@dataclasses.dataclass
class StChat:
    chat_id: str
    path: Path
    messages: list[dict]        # wire messages: {index, role, name, text, swipe_id, send_date}
    group: bool                 # no header line (a group chat)
    skipped_lines: int = 0      # lines ST would drop too (not JSON, or falsy)
    message_lines: int = 0      # lines that are ST messages (objects with `mes`)

    @property
    def looks_like_chat(self) -> bool:
        """A chat file: a header, or at least one message. (ST would load any JSON lines; a Python file or
        a CSV is not what anyone meant to bring in.)"""
        return not self.group or self.message_lines > 0


def _js_truthy(value: Any) -> bool:
    """JavaScript truthiness ([] and {} are true; 0, '', NaN, null and false are not)."""
    if value is None or value is False:
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value != 0 and not (isinstance(value, float) and math.isnan(value))
    if isinstance(value, str):
        return value != ""
    return True


def _js_number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:  # Python 1e-07 -> JavaScript 1e-7
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{'-' if exponent.startswith('-') else '+'}{int(exponent.lstrip('+-'))}"
    return text


def js_string(value: Any) -> str:
    """JavaScript's `String(value)` for JSON values."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _js_number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ",".join("" if v is None else js_string(v) for v in value)
    return "[object Object]"


def wire_message(message: Any, index: int) -> dict:
    """One ST chat message as the extension sends it (lib/hash.js messageParts + lib/sync.js wireMessage)."""
    msg = message if isinstance(message, dict) else {}
    role = "user" if _js_truthy(msg.get("is_user")) else "system" if _js_truthy(msg.get("is_system")) else "assistant"
    name = msg.get("name") if isinstance(msg.get("name"), str) else ""
    mes = msg.get("mes")
    text = mes if isinstance(mes, str) else js_string("" if mes is None else mes)
    swipe_id = msg.get("swipe_id")
    if isinstance(swipe_id, float) and swipe_id.is_integer():
        swipe_id = int(swipe_id)
    if isinstance(swipe_id, bool) or not isinstance(swipe_id, int):
        swipe_id = 0
    send_date = msg.get("send_date")
    return {"index": index, "role": role, "name": name, "text": text, "swipe_id": swipe_id,
            "send_date": "" if send_date is None else js_string(send_date)}


def _is_header(value: Any) -> bool:
    return isinstance(value, dict) and "mes" not in value and any(k in value for k in HEADER_KEYS)


def parse_chat(data: bytes, chat_id: str, path: Path | None = None) -> StChat:
    """The chat as `getContext().chat` holds it after ST loads this file."""
    values, skipped = [], 0
    for line in data.decode("utf-8", errors="replace").split("\n"):
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            skipped += bool(line.strip())
            continue
        if _js_truthy(value):
            values.append(value)
        else:
            skipped += 1
    group = not (values and _is_header(values[0]))
    if not group:
        values = values[1:]
    return StChat(chat_id, path or Path(chat_id + SUFFIX),
                  [wire_message(v, i) for i, v in enumerate(values)], group, skipped,
                  sum(isinstance(v, dict) and "mes" in v for v in values))


def fit_to_limits(messages: list[dict], max_chars: int) -> list[str]:
    """Make every wire message one the sidecar accepts, so one odd message does not refuse a whole chat:
    a text over `max_chars` (server.max_message_chars) is cut to it, a swipe id out of range becomes 0 (the
    hash has no swipe id, so the chain stays the extension's). Returns a note per message changed."""
    notes = []
    for m in messages:
        if len(m["text"]) > max_chars:
            notes.append(f"message {m['index']} has {len(m['text'])} characters: stored cut to the first {max_chars} "
                         "(server.max_message_chars)")
            m["text"] = m["text"][:max_chars]
        if not 0 <= m["swipe_id"] <= MAX_INDEX:
            notes.append(f"message {m['index']} has swipe_id {m['swipe_id']}, out of range: stored as 0")
            m["swipe_id"] = 0
    return notes


def read_chat(path: Path, chat_id: str | None = None) -> StChat:
    """Read one chat file; its chat id is the file name without `.jsonl` unless given."""
    return parse_chat(Path(path).read_bytes(), chat_id or chat_id_of(path), Path(path))


def chat_id_of(path: Path) -> str:
    name = Path(path).name
    return name[:-len(SUFFIX)] if name.lower().endswith(SUFFIX) else name


def chat_files(path: Path) -> list[Path]:
    """A chat file, or every `.jsonl` under a folder (ST's `chats/<character>/` and `group chats/`)."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and p.name.lower().endswith(SUFFIX))
    return [path]


def chains_of(messages: list[dict]) -> list[str]:
    """Prefix chains of wire messages (docs/api.md, "Message hashing")."""
    out, prev = [], ""
    for m in messages:
        prev = chain_hash(prev, message_hash(m["role"], m["name"], m["text"]))
        out.append(prev)
    return out


def anchor_indexes(length: int, slice_start: int) -> list[int]:
    """lib/sync.js anchorIndexes: `slice_start - 1`, and `length - 1 - 2^j` before the slice."""
    found = {slice_start - 1} if slice_start > 0 else set()
    step = 1
    while length - 1 - step >= 0:
        if length - 1 - step < slice_start:
            found.add(length - 1 - step)
        step *= 2
    return sorted(found, reverse=True)


def sync_body(messages: list[dict], chains: list[str], start: int, *, max_messages: int,
              max_bytes: int) -> tuple[dict, int]:
    """The sync request for the slice from `start` (lib/sync.js buildSyncRequest): at most `max_messages`
    messages and about `max_bytes` of text (one message always goes, however long). Returns the body and
    the end of the slice (exclusive)."""
    length = len(messages)
    end, size = start, 0
    while end < length and end - start < max_messages:
        size += len(messages[end]["text"].encode("utf-8")) + len(messages[end]["name"]) + 96
        if end > start and size > max_bytes:
            break
        end += 1
    return {"length": length, "messages": messages[start:end],
            "anchors": [{"index": i, "chain": chains[i]} for i in anchor_indexes(length, start)]}, end
