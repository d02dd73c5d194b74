"""Any OpenAI-compatible /v1/chat/completions (OpenAI, OpenRouter, DeepSeek, llama.cpp, Ollama, KoboldCpp,
vLLM): JSON mode with a fallback when the server rejects it, backoff on 429/5xx, a concurrency limit."""

from __future__ import annotations

import asyncio
import logging
import math
import re

from ..openai_http import OpenAIEndpoint
from .base import LLMAnswerError, LLMContextError, LLMError, LLMResult, answer_byte_limit, measure
from .usage import UsageMeter, count_messages

log = logging.getLogger("stbme.llm")

# A request past the model's context: HTTP 400 with OpenAI's code (OpenAI, vLLM, llama-cpp-python's server
# all send it) or llama.cpp's own server's words. The numbers come from the message or llama.cpp's fields.
_CONTEXT_ERROR = re.compile(r"context_length_exceeded|exceed_context_size|exceeds the available context size|"
                            r"maximum context length|context window", re.I)
_CONTEXT_SIZE = (re.compile(r"maximum context length is (\d+)", re.I), re.compile(r'"n_ctx"\s*:\s*(\d+)'),
                 re.compile(r"context window of (\d+)", re.I))
_PROMPT_SIZE = (re.compile(r"\((\d+) in the messages", re.I), re.compile(r'"n_prompt_tokens"\s*:\s*(\d+)'),
                re.compile(r"messages resulted in (\d+) tokens", re.I), re.compile(r"Requested tokens \((\d+)\)"))
CONTEXT_MARGIN_TOKENS = 16   # our count of the prompt and the server's differ by a few tokens of framing
MIN_ANSWER_TOKENS = 64       # less room than this for the answer: the prompt itself is the problem


def context_limit(snippet: str) -> tuple[int | None, int | None] | None:
    """(context size, prompt tokens) from a server's context-length error, each None when it did not say;
    None when the error is not about the context."""
    if not _CONTEXT_ERROR.search(snippet):
        return None

    def first(patterns) -> int | None:
        for pattern in patterns:
            m = pattern.search(snippet)
            if m:
                return int(m.group(1))
        return None
    return first(_CONTEXT_SIZE), first(_PROMPT_SIZE)


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
        # Learned from the first context-length 400: the model's context and how many of the server's tokens
        # one of ours is (its tokenizer and chat template are not ours); every later max_tokens fits in it.
        self.context_tokens: int | None = None
        self.prompt_token_ratio = 1.0
        self._gate = asyncio.Semaphore(max(1, concurrency))

    def _body(self, messages: list[dict], json_mode: bool, max_tokens: int) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": max_tokens, "stream": False}
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

    def _room(self, our_prompt_tokens: int) -> int:
        """The answer's room left in the learned context by a prompt of our_prompt_tokens."""
        prompt = math.ceil(our_prompt_tokens * self.prompt_token_ratio)
        return self.context_tokens - prompt - CONTEXT_MARGIN_TOKENS

    async def _call(self, messages: list[dict], json_mode: bool, max_tokens: int | None) -> tuple[str, str | None]:
        wanted = max_tokens or self.max_tokens
        our_prompt = None
        if self.context_tokens:  # a doubled retry's max_tokens must not pass the context a 400 taught us
            our_prompt = await asyncio.to_thread(count_messages, messages)
            wanted = min(wanted, max(MIN_ANSWER_TOKENS, self._room(our_prompt)))
        fit = {"max_tokens": wanted, "refitted": False}

        def on_status(status: int, snippet: str) -> bool:
            if status == 400 and json_mode and self.json_mode_supported and _rejects_json_mode(snippet):
                log.info("%s rejects JSON mode; asking without it from now on", self.url)
                self.json_mode_supported = False
                return True  # not the server's fault: asking again without it is free
            limit = context_limit(snippet) if status == 400 else None
            if limit is None or fit["refitted"]:
                return False
            context, server_prompt = limit
            if context is None:
                return False   # no size to fit: the HTTP 400 fails the call with the server's words
            prompt = our_prompt if our_prompt is not None else count_messages(messages)
            if server_prompt:
                self.prompt_token_ratio = max(1.0, server_prompt / max(1, prompt))
            self.context_tokens = context
            room = self._room(prompt)
            if room < MIN_ANSWER_TOKENS:
                raise LLMContextError(
                    f"LLM API at {self.url}: the prompt ({server_prompt or prompt} tokens) leaves no room for an "
                    f"answer in the model's context of {context} tokens; give the model a larger context "
                    "(llama.cpp: --ctx-size / n_ctx) or lower extract.every and the maintenance fan-in")
            log.info("%s: the model's context is %d tokens; asking again with max_tokens %d instead of %d "
                     "(and fitting every later request in it)", self.url, context, room, fit["max_tokens"])
            fit.update(max_tokens=min(fit["max_tokens"], room), refitted=True)
            return True   # once: the same request, with an answer that fits

        data = await self.http.post(lambda: self._body(messages, json_mode, fit["max_tokens"]), on_status,
                                    max_bytes=answer_byte_limit(wanted))
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
