"""Real chat text as the bundled model's vectors, for measuring HNSW on what users store (bench_recall.py).

The texts: every message of the generated recall set (English and Chinese roleplay) and every turn of
Topical-Chat (Amazon's public human-human chats, read from a git checkout of alexa/Topical-Chat: its
conversations/*.json; train.json is not needed), each whole and, when long, also cut into its sentences
(what a memory holds is a message or a part of one). Duplicates are dropped, the order shuffled with a
fixed seed. The first `n_queries` texts (not in the stored set) are embedded as queries.

Vectors are made by the product's LocalEmbedder at its default weights (embed.local_weights, int8) and
cached in .eval-cache/hnsw-real/ (git-ignored); a later run reuses them (delete the folder after the
default changes). Embedding 100k texts (85 characters mean) took 6.5 minutes on the 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT / "scripts"))

CACHE = ROOT / ".eval-cache" / "hnsw-real"
TOPICAL_CHAT = Path("/work/.mirror/alexa+Topical-Chat/repo")
TOPICAL_FILES = ("conversations/test_freq.json", "conversations/test_rare.json",
                 "conversations/valid_freq.json", "conversations/valid_rare.json")
_SENTENCE = re.compile(r"(?<=[.!?。！？…])\s*")
SEED = 11
SHARD = 25_000          # stored texts per cache file: shards can be embedded by separate processes


def _pieces(text: str) -> list[str]:
    text = " ".join(text.split())
    if not text:
        return []
    out = [text]
    parts = [p for p in _SENTENCE.split(text) if len(p) >= 12]
    if len(parts) > 1:
        out += parts
    return out


def texts(topical_chat: Path = TOPICAL_CHAT) -> tuple[list[str], dict[str, int]]:
    """The shuffled unique texts and how many came from each source."""
    from evalkit import evalset

    seen: dict[str, None] = {}
    counts = {"recall set": 0, "Topical-Chat": 0}
    for chat in evalset.load()["chats"]:
        for message in chat["messages"]:
            for piece in _pieces(message["text"]):
                if piece not in seen:
                    seen[piece] = None
                    counts["recall set"] += 1
    if (topical_chat / "HEAD").exists() or (topical_chat / ".git").exists():
        for name in TOPICAL_FILES:
            raw = subprocess.run(["git", "-C", str(topical_chat), "show", f"HEAD:{name}"], capture_output=True,
                                 check=True).stdout
            for conversation in json.loads(raw).values():
                for turn in conversation["content"]:
                    for piece in _pieces(turn["message"]):
                        if piece not in seen:
                            seen[piece] = None
                            counts["Topical-Chat"] += 1
    out = list(seen)
    np.random.default_rng(SEED).shuffle(out)
    return out, counts


def load(size: int, n_queries: int = 500, *, topical_chat: Path = TOPICAL_CHAT, progress=print,
         only_shard: int | None = None, cached_only: bool = False) -> tuple[np.ndarray, np.ndarray, dict]:
    """(stored vectors [<= size, 384], query vectors [n_queries, 384], facts about them). `cached_only`:
    no embedding, the stored vectors are what earlier runs cached of each shard (a random sample of
    the pool all the same: the texts are shuffled)."""
    all_texts, counts = texts(topical_chat)
    queries, stored = all_texts[:n_queries], all_texts[n_queries:n_queries + size]
    CACHE.mkdir(parents=True, exist_ok=True)
    shards, texts_used = [], []
    for k, start in enumerate(range(0, len(stored), SHARD)):
        if only_shard is not None and k != only_shard:
            continue
        path, part = CACHE / f"passages-{SEED}-{k}.npy", stored[start:start + SHARD]
        if cached_only:
            vectors = np.load(path) if path.exists() else np.zeros((0, 384), np.float32)
        else:
            vectors = _cached(path, part, False, progress)
        shards.append(vectors[:len(part)])
        texts_used += part[:len(shards[-1])]
    stored_vectors = np.vstack(shards)
    query_vectors = _cached(CACHE / f"queries-{SEED}-{n_queries}.npy", queries, True, progress)
    facts = {"texts": len(stored_vectors), "available": len(all_texts) - n_queries, "sources": counts,
             "mean_chars": round(float(np.mean([len(t) for t in texts_used])), 1) if texts_used else 0.0}
    return stored_vectors, query_vectors, facts


def _cached(path: Path, items: list[str], is_query: bool, progress) -> np.ndarray:
    """Vectors of `items`, from `path` as far as an earlier run got (it is extended, never recomputed)."""
    have = np.load(path) if path.exists() else np.zeros((0, 384), np.float32)
    if len(have) >= len(items):
        return have
    from stbme.embed.local import LocalEmbedder

    embedder = LocalEmbedder(bulk_nice=0)
    parts = [have]
    done, started, step = len(have), time.monotonic(), 2000

    async def run(chunk):
        if is_query:
            return np.vstack([await embedder.embed_query(t) for t in chunk])
        return await embedder.embed_passages(chunk)

    try:
        while done < len(items):
            chunk = items[done:done + step]
            parts.append(asyncio.run(run(chunk)).astype(np.float32))
            done += len(chunk)
            np.save(path.with_suffix(".part.npy"), np.vstack(parts))
            path.with_suffix(".part.npy").replace(path)
            rate = (done - len(have)) / max(1e-9, time.monotonic() - started)
            progress(f"  real-text vectors: {done}/{len(items)} ({rate:.0f}/s)")
    finally:
        asyncio.run(embedder.close())
    return np.vstack(parts)


if __name__ == "__main__":
    # _real_vectors.py [SIZE [SHARD]]: SHARD -1 embeds only the queries.
    shard = int(sys.argv[2]) if len(sys.argv) > 2 else None
    stored, queries, facts = load(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000,
                                  only_shard=shard if shard != -1 else None, cached_only=shard == -1)
    print(stored.shape, queries.shape, facts)
