"""What the API accepts of a chat, checked by the API and by the CLI before it sends: chat ids (arbitrary
strings from SillyTavern's `getCurrentChatId()`, within limits), message indexes and swipe ids."""

from __future__ import annotations

from typing import Any

from .errors import BadRequest

MAX_CHAT_ID = 512
MAX_INDEX = 2**31 - 1  # message indexes, lengths and swipe ids: far above any chat, far below SQLite's 2^63


def check_chat_id(chat_id: Any) -> str:
    """Chat ids are arbitrary strings from SillyTavern, within limits."""
    if not isinstance(chat_id, str) or not chat_id.strip():
        raise BadRequest("chat id is empty", field="chat_id")
    if len(chat_id) > MAX_CHAT_ID:
        raise BadRequest(f"chat id is longer than {MAX_CHAT_ID} characters", field="chat_id")
    if "\x00" in chat_id:
        raise BadRequest("chat id contains a NUL character", field="chat_id")
    return chat_id
