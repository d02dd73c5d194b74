"""The HTTP part shared by the OpenAI-compatible clients (embeddings and chat completions): endpoint URL,
bearer key, one session, retries with exponential backoff on 429/5xx, timeouts and network errors,
`Retry-After` honoured, the answer's body read up to a size its request can need (a server that sends more
fails the call: a 200 MB answer once froze the sidecar, issue 20) and parsed as JSON off the event loop."""

from __future__ import annotations

import asyncio
from typing import Callable

import aiohttp
import orjson

from .errors import StbmeError

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0
DEFAULT_MAX_ANSWER_BYTES = 16 * 1024 * 1024
PARSE_INLINE_BYTES = 64 * 1024   # smaller bodies are parsed on the loop (a thread hop costs more)


class AnswerTooLarge(Exception):
    """The body went past the size its request can need."""


async def read_capped(resp: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The response body, or AnswerTooLarge as soon as it is longer than max_bytes (it is never held whole)."""
    if resp.content_length is not None and resp.content_length > max_bytes:
        raise AnswerTooLarge(f"{resp.content_length} bytes announced")
    body = bytearray()
    async for chunk in resp.content.iter_chunked(256 * 1024):
        body += chunk
        if len(body) > max_bytes:
            raise AnswerTooLarge(f"more than {max_bytes} bytes")
    return bytes(body)


class OpenAIEndpoint:
    """POSTs JSON to `<base url>/<path>`. `error` is the exception class raised (`answer_error` when the server
    answered, but with a body that cannot be used: too large, not JSON), `what` names the API in messages
    ("embeddings API"), `names` maps url/key/model/timeout to the settings named in advice."""

    def __init__(self, url: str, path: str, key: str, *, timeout_s: float, retries: int, backoff_s: float,
                 error: type[StbmeError], what: str, names: dict[str, str],
                 answer_error: type[StbmeError] | None = None):
        self.url = url.rstrip("/")
        if not self.url.endswith("/" + path):
            self.url += "/" + path
        self.key = key
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.error = error
        self.answer_error = answer_error or error
        self.what = what
        self.names = names
        self._session: aiohttp.ClientSession | None = None
        # A client replaced after an llm.* change may still be asked by a batch that holds it: its calls in
        # flight finish on their connection, and the last one out closes the session (none is left open).
        self._in_flight = 0
        self._closing = False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def post(self, make_body: Callable[[], dict],
                   on_status: Callable[[int, str], bool] | None = None,
                   max_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> object:
        """POST the body (rebuilt per attempt), retrying transient failures; the parsed JSON answer.

        `on_status(status, snippet)` may return True to retry at once, without counting an attempt
        (a server that rejects an optional feature the body asked for: the caller changes the body).
        `max_bytes`: the most the answer can need; a longer one fails the call (not retried)."""
        self._in_flight += 1
        try:
            return await self._post(make_body, on_status, max_bytes)
        finally:
            self._in_flight -= 1
            if self._closing and not self._in_flight:
                await self._close_session()

    async def _post(self, make_body: Callable[[], dict], on_status: Callable[[int, str], bool] | None,
                    max_bytes: int) -> object:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        last_error, attempt, delay = "no attempt made", 0, 0.0
        while attempt <= self.retries:
            if delay:
                await asyncio.sleep(delay)
            delay = self.backoff_s * (2 ** attempt)
            attempt += 1
            try:
                async with self._client().post(self.url, data=orjson.dumps(make_body()), headers=headers) as resp:
                    status, retry_after = resp.status, resp.headers.get("Retry-After")
                    raw = await read_capped(resp, max_bytes)
            except AnswerTooLarge as exc:
                raise self.answer_error(f"{self.what} at {self.url} sent an answer larger than this request can need "
                                 f"({exc}; at most {max_bytes} expected): is {self.names['url']} an OpenAI-compatible "
                                 f"API that honours max_tokens?") from None
            except asyncio.TimeoutError:  # before ClientError: aiohttp's timeouts are both
                last_error = f"no answer within {self.timeout.total:g} s ({self.names['timeout']})"
                continue
            except aiohttp.ClientError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            snippet = raw[:300].decode("utf-8", "replace")
            if on_status and status != 200 and on_status(status, snippet):
                attempt, delay = attempt - 1, 0.0
                continue
            if status in RETRY_STATUSES:
                last_error = f"HTTP {status}: {snippet[:200]}"
                if retry_after:
                    try:
                        delay = min(MAX_RETRY_AFTER_S, max(delay, float(retry_after)))
                    except ValueError:
                        pass
                continue
            if status != 200:
                n = self.names
                hint = {401: f"check {n['key']}", 403: f"check {n['key']}",
                        404: f"check {n['url']} and {n['model']}"}.get(
                    status, f"check {n['url']}, {n['key']} and {n['model']}")
                raise self.error(f"{self.what} at {self.url} answered HTTP {status}: {snippet}; {hint}")
            try:
                return orjson.loads(raw) if len(raw) <= PARSE_INLINE_BYTES else await asyncio.to_thread(orjson.loads, raw)
            except orjson.JSONDecodeError:
                raise self.answer_error(f"{self.what} at {self.url} answered with a body that is not JSON: "
                                 f"{raw[:200].decode('utf-8', 'replace')!r}; is {self.names['url']} the API's "
                                 "base URL (ending in /v1)?") from None
        raise self.error(f"{self.what} at {self.url} failed after {self.retries + 1} attempts: {last_error}")

    async def close(self) -> None:
        """Close now, or (with calls in flight) when the last of them ends; a call made after close still
        works and closes what it opened."""
        self._closing = True
        if not self._in_flight:
            await self._close_session()

    async def _close_session(self) -> None:
        if self._session is not None:
            await self._session.close()
