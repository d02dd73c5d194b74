"""The HTTP part shared by the OpenAI-compatible clients (embeddings and chat completions): endpoint URL,
bearer key, one session, retries with exponential backoff on 429/5xx, timeouts and network errors,
`Retry-After` honoured, and the answer's body parsed as JSON."""

from __future__ import annotations

import asyncio
from typing import Callable

import aiohttp
import orjson

from .errors import StbmeError

RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
MAX_RETRY_AFTER_S = 60.0


class OpenAIEndpoint:
    """POSTs JSON to `<base url>/<path>`. `error` is the exception class raised, `what` names the API
    in messages ("embeddings API"), `names` maps url/key/model/timeout to the settings named in advice."""

    def __init__(self, url: str, path: str, key: str, *, timeout_s: float, retries: int, backoff_s: float,
                 error: type[StbmeError], what: str, names: dict[str, str]):
        self.url = url.rstrip("/")
        if not self.url.endswith("/" + path):
            self.url += "/" + path
        self.key = key
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.error = error
        self.what = what
        self.names = names
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    async def post(self, make_body: Callable[[], dict],
                   on_status: Callable[[int, str], bool] | None = None) -> object:
        """POST the body (rebuilt per attempt), retrying transient failures; the parsed JSON answer.

        `on_status(status, snippet)` may return True to retry at once, without counting an attempt
        (a server that rejects an optional feature the body asked for: the caller changes the body)."""
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
                    raw, status, retry_after = await resp.read(), resp.status, resp.headers.get("Retry-After")
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
                return orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise self.error(f"{self.what} at {self.url} answered with a body that is not JSON: "
                                 f"{raw[:200].decode('utf-8', 'replace')!r}; is {self.names['url']} the API's "
                                 "base URL (ending in /v1)?") from None
        raise self.error(f"{self.what} at {self.url} failed after {self.retries + 1} attempts: {last_error}")

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
