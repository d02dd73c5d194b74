"""The message hash and prefix chain must match the extension's bit for bit (shared vectors)."""

import hashlib
import json
from pathlib import Path

from stbme.hashing import chain_hash, chat_file_key, message_hash

VECTORS = json.loads((Path(__file__).parent / "fixtures" / "hash_vectors.json").read_text("utf-8"))


def test_message_hashes_match_shared_vectors():
    assert len(VECTORS["messages"]) >= 5
    for m in VECTORS["messages"]:
        assert message_hash(m["role"], m["name"], m["text"]) == m["hash"], m


def test_chain_matches_shared_vectors():
    prev, chain = "", []
    for m in VECTORS["messages"]:
        prev = chain_hash(prev, m["hash"])
        chain.append(prev)
    assert chain == VECTORS["chain"]


def test_sha256_vectors():
    for v in VECTORS["sha256"]:
        assert hashlib.sha256(v["input"].encode("utf-8")).hexdigest() == v["hex"]


def test_chat_file_key_is_safe_for_any_id():
    for chat_id in ["../../etc/passwd", "Elena - 2026-11-29@23h40m", "群聊 🐉", "a/b\\c:d*?", "x" * 512]:
        key = chat_file_key(chat_id)
        assert len(key) == 32 and key.isalnum()
    assert chat_file_key("a") != chat_file_key("b")
