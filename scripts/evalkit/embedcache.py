"""The bundled model (multilingual-e5-small, the product's own local embedder, passages clipped as the
product clips them) for the vector baseline, with an on-disk cache.

Embedding a few thousand messages costs minutes of CPU here, so every vector is kept in a SQLite file
keyed by the model id, the kind (query or passage: e5 embeds them with different prefixes) and a hash of
the text. The cache directory is gitignored; delete it to start over.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_DIR = Path(__file__).resolve().parent.parent.parent / ".eval-cache"
BATCH = 64


def model_id() -> str:
    from stbme.embed.local import LocalEmbedder

    return f"{LocalEmbedder.id}-clip128"


class EmbeddingCache:
    """Vectors of texts under the local model, computed once."""

    def __init__(self, directory: Path = DEFAULT_DIR):
        directory.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(directory / "embeddings.sqlite")
        self.db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT, kind TEXT, hash TEXT, vec BLOB,"
                        " PRIMARY KEY (model, kind, hash))")
        self.model_id = model_id()
        self._model = None
        self.computed = 0

    def _get_model(self):
        if self._model is None:
            # On a shared machine, OpenMP threads that spin while waiting cost more than they save.
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
            from stbme.embed.local import LocalEmbedder

            self._model = LocalEmbedder()
        return self._model

    def _run(self, texts: list[str], kind: str) -> np.ndarray:
        model = self._get_model()

        async def embed():
            if kind == "passage":
                return await model.embed_passages(texts)
            return np.vstack([await model.embed_query(t) for t in texts])

        return np.asarray(asyncio.run(embed()), dtype=np.float32).reshape(len(texts), -1)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def seed_from_product(self, db_path: Path) -> int:
        """Take the passage vectors the product already stored for the same texts (its memories of a message
        are embedded as "Speaker: text", clipped as here): the speaker-attributed baseline costs no model
        time then. Returns how many were taken."""
        import sqlite3 as _sqlite3

        from stbme.embed.local import LocalEmbedder

        conn = _sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
        try:
            self._product = {h: v for h, v in conn.execute(
                "SELECT text_hash, embedding FROM nodes WHERE embedder = ? AND embedding IS NOT NULL"
                " AND text_hash IS NOT NULL", (LocalEmbedder.id,))}
        finally:
            conn.close()
        return len(self._product)

    def embed(self, texts: list[str], kind: str, label: str = "") -> np.ndarray:
        """Unit vectors of `texts` (kind 'query' or 'passage'), from the cache where possible."""
        keys = [self.key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), 500):
            part = unique[i:i + 500]
            rows = self.db.execute(f"SELECT hash, vec FROM vectors WHERE model = ? AND kind = ? AND hash IN"
                                   f" ({','.join('?' * len(part))})", [self.model_id, kind, *part]).fetchall()
            found.update({h: np.frombuffer(v, dtype=np.float32) for h, v in rows})
        if kind == "passage" and getattr(self, "_product", None):
            from stbme.hashing import text_hash

            for k, t in dict(zip(keys, texts)).items():
                blob = self._product.get(text_hash(t)) if k not in found else None
                if blob is not None:
                    found[k] = np.frombuffer(blob, dtype=np.float32)
        missing = [(k, t) for k, t in dict(zip(keys, texts)).items() if k not in found]
        started = time.monotonic()
        for i in range(0, len(missing), BATCH):
            batch = missing[i:i + BATCH]
            vecs = self._run([t for _, t in batch], kind)
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
            self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)",
                                [(self.model_id, kind, k, v.tobytes()) for (k, _), v in zip(batch, vecs)])
            self.db.commit()
            found.update({k: v for (k, _), v in zip(batch, vecs)})
            self.computed += len(batch)
            done = min(i + BATCH, len(missing))
            elapsed = time.monotonic() - started
            print(f"\r  e5 {label} {kind}: {done}/{len(missing)} new vectors,"
                  f" {elapsed:.0f} s, eta {elapsed / done * (len(missing) - done):.0f} s   ",
                  end="", file=sys.stderr, flush=True)
        if missing:
            print(file=sys.stderr)
        return np.vstack([found[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)
