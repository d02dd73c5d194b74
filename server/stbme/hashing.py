"""Message hashes and prefix chains, shared bit for bit with the ST extension (docs/api.md).

SHA-256 because both sides have it fast and synchronous (the extension ships a small pure-JS copy,
since crypto.subtle is missing on plain-http LAN origins), truncated to 16 hex chars.
"""

from __future__ import annotations

import hashlib


def _sha16(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def message_hash(role: str, name: str, text: str) -> str:
    """Hash of one chat message as the extension computes it."""
    return _sha16(f"{role}\n{name}\n{text}")


def chain_hash(previous_chain: str, message_hash_: str) -> str:
    """Prefix chain: equal chains at index i prove messages 0..i are equal."""
    return _sha16(previous_chain + message_hash_)


def text_hash(text: str) -> str:
    """Key for the embedding cache."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def chat_file_key(chat_id: str) -> str:
    """A file-name-safe key for a chat id (ST chat ids are arbitrary strings)."""
    return hashlib.sha256(chat_id.encode("utf-8")).hexdigest()[:32]
