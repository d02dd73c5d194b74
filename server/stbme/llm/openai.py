"""Any OpenAI-compatible /v1/chat/completions (OpenAI, OpenRouter, DeepSeek, llama.cpp, Ollama, KoboldCpp,
vLLM): the answer's JSON Schema (structured output), else JSON mode, else plain text, each step down taken when
the server rejects the one before; backoff on 429/5xx, a concurrency limit."""

from __future__ import annotations

import asyncio
import logging
import math
import re

from ..openai_http import OpenAIEndpoint
from .answer_schemas import ANSWER_FORMATS, response_format
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
        # The answer formats this server may accept, best first: each is dropped when the server rejects it.
        self.answer_formats = list(ANSWER_FORMATS)
        # Learned from the first context-length 400: the model's context and how many of the server's tokens
        # one of ours is (its tokenizer and chat template are not ours); every later max_tokens fits in it.
        self.context_tokens: int | None = None
        self.prompt_token_ratio = 1.0
        self._gate = asyncio.Semaphore(max(1, concurrency))

    def _answer_format(self, task: str, json_mode: bool, schema: dict | None) -> tuple[str, dict] | None:
        """(kind, response_format) of the best format left, or None for plain text."""
        for kind in self.answer_formats if json_mode else ():
            if kind == "json_object" or schema:
                return kind, response_format(kind, task, schema)
        return None

    def _body(self, messages: list[dict], answer_format: tuple[str, dict] | None, max_tokens: int) -> dict:
        body = {"model": self.model, "messages": messages, "temperature": self.temperature,
                "max_tokens": max_tokens, "stream": False}
        if answer_format:
            body["response_format"] = answer_format[1]
        return body

    async def complete(self, messages: list[dict], *, task: str, json_mode: bool = True,
                       max_tokens: int | None = None, schema: dict | None = None) -> LLMResult:
        async with self._gate:
            try:
                text, finish_reason = await self._call(messages, task, json_mode, schema, max_tokens)
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

    async def _call(self, messages: list[dict], task: str, json_mode: bool, schema: dict | None,
                    max_tokens: int | None) -> tuple[str, str | None]:
        wanted = max_tokens or self.max_tokens
        our_prompt = None
        if self.context_tokens:  # a doubled retry's max_tokens must not pass the context a 400 taught us
            our_prompt = await asyncio.to_thread(count_messages, messages)
            wanted = min(wanted, max(MIN_ANSWER_TOKENS, self._room(our_prompt)))
        fit = {"max_tokens": wanted, "refitted": False, "format": None}

        def body() -> dict:
            fit["format"] = self._answer_format(task, json_mode, schema)  # what this attempt asks for
            return self._body(messages, fit["format"], fit["max_tokens"])

        def on_status(status: int, snippet: str) -> bool:
            sent = fit["format"]
            if status >= 400 and sent and _rejects_answer_format(snippet):
                # Not the server's fault: asking again one format down is free. (A call in flight beside this
                # one may have dropped the same format already.)
                if sent[0] in self.answer_formats:
                    self.answer_formats.remove(sent[0])
                log.info("%s rejects response_format %s; asking with %s from now on", self.url, sent[0],
                         (self.answer_formats or ["no answer format"])[0])
                return True
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

        data = await self.http.post(body, on_status, max_bytes=answer_byte_limit(wanted))
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


def _rejects_answer_format(body: str) -> bool:
    """An error about the answer format: OpenAI and DeepSeek answer 400 naming `response_format`;
    llama-cpp-python's server a 500 with its validation error (`'loc': ('body', 'response_format', 'type')`)."""
    low = body.lower()
    return any(word in low for word in ("response_format", "json_object", "json_schema", "json mode"))
