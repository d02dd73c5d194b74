"""Any OpenAI-compatible /v1/embeddings API (OpenAI, Ollama, llama.cpp, vLLM, LM Studio)."""

from __future__ import annotations

import numpy as np

from ..openai_http import OpenAIEndpoint
from .base import Embedder, EmbedError, normalize_rows

# One vector of up to 8192 floats as JSON text, and the rest of the body: more means a broken server.
MAX_BYTES_PER_VECTOR = 256 * 1024
MAX_BYTES_OVERHEAD = 1024 * 1024


class OpenAIEmbedder(Embedder):
    def __init__(self, url: str, model: str, key: str = "", *, batch_size: int = 32, timeout_s: float = 30,
                 retries: int = 3, backoff_s: float = 0.5):
        if not url:
            raise EmbedError("embed.openai_url is empty: set the base URL of your embeddings API "
                             "(for example http://127.0.0.1:11434/v1)", field="embed.openai_url")
        self.http = OpenAIEndpoint(url, "embeddings", key, timeout_s=timeout_s, retries=retries,
                                   backoff_s=backoff_s, error=EmbedError, what="embeddings API",
                                   names={"url": "embed.openai_url", "key": "embed.openai_key",
                                          "model": "embed.openai_model", "timeout": "embed.timeout_s"})
        self.url = self.http.url
        self.model = model
        self.batch_size = batch_size
        self.id = f"openai:{self.url}#{model}"
        self.dim = 0  # learned from the first answer

    async def _call(self, texts: list[str]) -> np.ndarray:
        data = await self.http.post(lambda: {"model": self.model, "input": texts},
                                    max_bytes=MAX_BYTES_OVERHEAD + len(texts) * MAX_BYTES_PER_VECTOR)
        return self._parse(data, len(texts))

    def _parse(self, data: object, count: int) -> np.ndarray:
        """The vectors of an OpenAI-style answer, in input order, checked for count, shape and dimension."""
        rows = data.get("data") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            error = data.get("error") if isinstance(data, dict) else None
            detail = f"error: {str(error)[:200]}" if error else "expected {\"data\": [{\"embedding\": [...]}]}"
            raise EmbedError(f"embeddings API at {self.url} returned an unexpected body ({detail})")
        if len(rows) != count:
            raise EmbedError(f"embeddings API returned {len(rows)} vectors for {count} texts")
        rows = sorted(rows, key=lambda r: r["index"] if isinstance(r.get("index"), int) else 0)
        try:
            matrix = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbedError(f"embeddings API at {self.url} returned an unexpected body "
                             f"(each item needs an 'embedding' list of numbers: {exc})") from None
        if matrix.ndim != 2 or matrix.shape[1] == 0 or not np.isfinite(matrix).all():
            raise EmbedError(f"embeddings API at {self.url} returned an unexpected body "
                             "(embeddings must be non-empty lists of finite numbers, all of one length)")
        if self.dim and matrix.shape[1] != self.dim:
            raise EmbedError(f"embeddings API changed dimension from {self.dim} to {matrix.shape[1]}; "
                             "another model is answering; check embed.openai_model")
        self.dim = matrix.shape[1]
        return normalize_rows(matrix)

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        parts = [await self._call(texts[i:i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.vstack(parts) if parts else np.zeros((0, max(self.dim, 1)), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        return (await self._call([text]))[0]

    async def close(self) -> None:
        await self.http.close()
