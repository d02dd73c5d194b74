"""Any OpenAI-compatible /v1/embeddings API (OpenAI, Ollama, llama.cpp, vLLM, LM Studio)."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import numpy as np
import orjson

from .base import Embedder, EmbedError, normalize_rows

log = logging.getLogger("stbme.embed")
RETRY_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIEmbedder(Embedder):
    def __init__(self, url: str, model: str, key: str = "", *, batch_size: int = 32, timeout_s: float = 30,
                 retries: int = 3, backoff_s: float = 0.5):
        if not url:
            raise EmbedError("embed.openai_url is empty: set the base URL of your embeddings API "
                             "(for example http://127.0.0.1:11434/v1)", field="embed.openai_url")
        self.url = url.rstrip("/")
        if not self.url.endswith("/embeddings"):
            self.url += "/embeddings"
        self.model = model
        self.key = key
        self.batch_size = batch_size
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.id = f"openai:{self.url}#{model}"
        self.dim = 0  # learned from the first answer
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def _call(self, texts: list[str]) -> np.ndarray:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        body = {"model": self.model, "input": texts}
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * (2 ** (attempt - 1)))
            try:
                async with self._client().post(self.url, json=body, headers=headers) as resp:
                    if resp.status in RETRY_STATUSES:
                        last_error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                        continue
                    if resp.status != 200:
                        raise EmbedError(f"embeddings API at {self.url} answered HTTP {resp.status}: "
                                         f"{(await resp.text())[:300]}; check embed.openai_url, key and model")
                    raw = await resp.read()
            except asyncio.TimeoutError:  # before ClientError: aiohttp's timeouts are both
                last_error = f"no answer within {self.timeout.total:g} s (embed.timeout_s)"
                continue
            except aiohttp.ClientError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise EmbedError(f"embeddings API at {self.url} answered with a body that is not JSON: "
                                 f"{raw[:200].decode('utf-8', 'replace')!r}; is embed.openai_url the API's "
                                 "base URL (ending in /v1)?") from None
            return self._parse(data, len(texts))
        raise EmbedError(f"embeddings API at {self.url} failed after {self.retries + 1} attempts: {last_error}")

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
        if self._session is not None:
            await self._session.close()
