"""Any OpenAI-compatible /v1/chat/completions (OpenAI, OpenRouter, DeepSeek, llama.cpp, Ollama, KoboldCpp,
vLLM): JSON mode with a fallback when the server rejects it, backoff on 429/5xx, a concurrency limit."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import orjson

from .base import LLMError, LLMResult, measure
from .usage import UsageMeter

log = logging.getLogger("stbme.llm")
RETRY_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 60.0


class OpenAIChat:
    def __init__(self, url: str, model: str, key: str = "", *, temperature: float = 0.2, max_tokens: int = 1200,
                 timeout_s: float = 120.0, concurrency: int = 2, retries: int = 2, backoff_s: float = 1.0,
                 usage: UsageMeter | None = None):
        if not url:
            raise LLMError("llm.url is empty: set the base URL of an OpenAI-compatible API "
                           "(for example https://api.openai.com/v1 or http://127.0.0.1:11434/v1)", field="llm.url")
        self.url = url.rstrip("/")
        if not self.url.endswith("/chat/completions"):
            self.url += "/chat/completions"
        self.model = model
        self.key = key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.id = f"openai:{self.url}#{model}"
        self.usage = usage or UsageMeter()
        self.json_mode_supported = True   # turned off when the server rejects response_format
        self._gate = asyncio.Semaphore(max(1, concurrency))
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        return self._session

    def _body(self, messages: list[dict], json_mode: bool, max_tokens: int | None) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": max_tokens or self.max_tokens, "stream": False}
        if json_mode and self.json_mode_supported:
            body["response_format"] = {"type": "json_object"}
        return body

    async def complete(self, messages: list[dict], *, task: str, json_mode: bool = True,
                       max_tokens: int | None = None) -> LLMResult:
        async with self._gate:
            try:
                text = await self._call(messages, json_mode, max_tokens)
            except LLMError:
                measure(self.usage, task, messages, "", failed=True)
                raise
        return LLMResult(text, measure(self.usage, task, messages, text))

    async def _call(self, messages: list[dict], json_mode: bool, max_tokens: int | None) -> str:
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        last_error = "no attempt made"
        attempt = 0
        delay = 0.0
        while attempt <= self.retries:
            if delay:
                await asyncio.sleep(delay)
            delay = self.backoff_s * (2 ** attempt)
            attempt += 1
            body = self._body(messages, json_mode, max_tokens)
            try:
                async with self._client().post(self.url, data=orjson.dumps(body), headers=headers) as resp:
                    raw = await resp.read()
                    status = resp.status
                    retry_after = resp.headers.get("Retry-After")
            except asyncio.TimeoutError:  # before ClientError: aiohttp's timeouts are both
                last_error = f"no answer within {self.timeout.total:g} s (llm.timeout_s)"
                continue
            except aiohttp.ClientError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                continue
            snippet = raw[:300].decode("utf-8", "replace")
            if status == 400 and "response_format" in body and _rejects_json_mode(snippet):
                log.info("%s rejects JSON mode; asking without it from now on", self.url)
                self.json_mode_supported = False
                attempt -= 1  # not the server's fault: this retry is free
                delay = 0.0
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
                hint = {401: "check llm.key", 403: "check llm.key", 404: "check llm.url and llm.model"}.get(
                    status, "check llm.url, llm.key and llm.model")
                raise LLMError(f"LLM API at {self.url} answered HTTP {status}: {snippet}; {hint}")
            return self._parse(raw)
        raise LLMError(f"LLM API at {self.url} failed after {self.retries + 1} attempts: {last_error}")

    def _parse(self, raw: bytes) -> str:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise LLMError(f"LLM API at {self.url} answered with a body that is not JSON: "
                           f"{raw[:200].decode('utf-8', 'replace')!r}; is llm.url the API's base URL "
                           "(ending in /v1)?") from None
        try:
            message = data["choices"][0]["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            error = data.get("error") if isinstance(data, dict) else None
            raise LLMError(f"LLM API at {self.url} returned an unexpected body "
                           f"({'error: ' + str(error)[:200] if error else 'no choices[0].message'})") from None
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else ""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def _rejects_json_mode(body: str) -> bool:
    low = body.lower()
    return "response_format" in low or "json_object" in low or "json mode" in low
