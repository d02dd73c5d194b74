"""Any OpenAI-compatible /v1/chat/completions (OpenAI, OpenRouter, DeepSeek, llama.cpp, Ollama, KoboldCpp,
vLLM): JSON mode with a fallback when the server rejects it, backoff on 429/5xx, a concurrency limit."""

from __future__ import annotations

import asyncio
import logging

from ..openai_http import OpenAIEndpoint
from .base import LLMAnswerError, LLMError, LLMResult, answer_byte_limit, measure
from .usage import UsageMeter

log = logging.getLogger("stbme.llm")


class OpenAIChat:
    def __init__(self, url: str, model: str, key: str = "", *, temperature: float = 0.2, max_tokens: int = 1200,
                 timeout_s: float = 120.0, concurrency: int = 2, retries: int = 2, backoff_s: float = 1.0,
                 usage: UsageMeter | None = None):
        if not url:
            raise LLMError("llm.url is empty: set the base URL of an OpenAI-compatible API "
                           "(for example https://api.openai.com/v1 or http://127.0.0.1:11434/v1)", field="llm.url")
        self.http = OpenAIEndpoint(url, "chat/completions", key, timeout_s=timeout_s, retries=retries,
                                   backoff_s=backoff_s, error=LLMError, answer_error=LLMAnswerError, what="LLM API",
                                   names={"url": "llm.url", "key": "llm.key", "model": "llm.model",
                                          "timeout": "llm.timeout_s"})
        self.url = self.http.url
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.id = f"openai:{self.url}#{model}"
        self.usage = usage or UsageMeter()
        self.json_mode_supported = True   # turned off when the server rejects response_format
        self._gate = asyncio.Semaphore(max(1, concurrency))

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
                text, finish_reason = await self._call(messages, json_mode, max_tokens)
            except LLMError:
                await asyncio.to_thread(measure, self.usage, task, messages, "", failed=True)
                raise
        # Token counting of a long prompt or answer takes a while: off the event loop.
        usage = await asyncio.to_thread(measure, self.usage, task, messages, text)
        return LLMResult(text, usage, truncated=finish_reason == "length")

    async def _call(self, messages: list[dict], json_mode: bool, max_tokens: int | None) -> tuple[str, str | None]:
        def rejects_json_mode(status: int, snippet: str) -> bool:
            if status == 400 and json_mode and self.json_mode_supported and _rejects_json_mode(snippet):
                log.info("%s rejects JSON mode; asking without it from now on", self.url)
                self.json_mode_supported = False
                return True  # not the server's fault: asking again without it is free
            return False

        data = await self.http.post(lambda: self._body(messages, json_mode, max_tokens), rejects_json_mode,
                                    max_bytes=answer_byte_limit(max_tokens or self.max_tokens))
        return self._parse(data)

    def _parse(self, data: object) -> tuple[str, str | None]:
        """The answer's text and finish_reason."""
        try:
            choice = data["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            error = data.get("error") if isinstance(data, dict) else None
            raise LLMAnswerError(f"LLM API at {self.url} returned an unexpected body "
                           f"({'error: ' + str(error)[:200] if error else 'no choices[0].message'})") from None
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        return (content if isinstance(content, str) else ""), (finish if isinstance(finish, str) else None)

    async def close(self) -> None:
        await self.http.close()


def _rejects_json_mode(body: str) -> bool:
    low = body.lower()
    return "response_format" in low or "json_object" in low or "json mode" in low
