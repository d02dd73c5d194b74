"""The LLM client contract and the JSON helper every stage uses."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, Protocol

from ..errors import StbmeError
from .jsonrepair import JSONRepairError, TruncatedJSON, parse_json, salvage_items
from .usage import UsageMeter, count_messages
from ..tokens import count_tokens

log = logging.getLogger("stbme.llm")

STRICT_JSON_REMINDER = (
    "Your previous answer was not valid JSON ({why}). Answer again with ONLY the JSON object, "
    "no markdown fences, no comments, no text before or after it."
)
CUT_OFF_REMINDER = (
    "An answer of yours to this was cut off at the token limit before its JSON ended. Answer with ONLY the "
    "JSON object, shorter: keep every text field brief."
)
REPAIR_INLINE_CHARS = 16 * 1024
MAX_TOKENS_GROWTH = 2     # a cut-off answer is asked again with this many times the room
MAX_TOKENS_CEILING = 16000
# The most an answer of max_tokens can take: a token is a few characters, at most a few dozen bytes once
# JSON-escaped (\uXXXX), and the body carries more than the text (ids, usage, a reasoning block some servers
# add beside the answer). Past this the server ignored max_tokens: the call fails, nothing is parsed.
ANSWER_BYTES_PER_TOKEN = 64
ANSWER_OVERHEAD_BYTES = 4 * 1024 * 1024


def answer_byte_limit(max_tokens: int) -> int:
    """The largest answer (HTTP body or relayed text) a request for max_tokens may get."""
    return ANSWER_OVERHEAD_BYTES + max(0, max_tokens) * ANSWER_BYTES_PER_TOKEN


@dataclasses.dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    cut_off: int = 0    # answers stopped before their JSON ended (at the token limit)
    salvaged: int = 0   # complete items kept from a cut-off answer when no attempt came back whole

    def __iadd__(self, other: "Usage") -> "Usage":
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls
        self.cut_off += other.cut_off
        self.salvaged += other.salvaged
        return self


@dataclasses.dataclass
class LLMResult:
    text: str
    usage: Usage
    truncated: bool = False   # the API said the answer stopped at max_tokens (finish_reason "length")


class LLMError(StbmeError):
    """An LLM call failed after its retries (network, HTTP status, timeout, no extension for the relay,
    or an answer that stayed unreadable)."""

    status = 503


class LLMContextError(LLMError):
    """The prompt alone fills the model's context (the server said so): no max_tokens can make it fit."""


class LLMAnswerError(LLMError):
    """The LLM answered, but not with what was asked: no readable JSON after the retries, or a body without
    an answer in it. (Not an outage: the model or its prompt is at fault.)"""


def failure_kind(error: LLMError) -> str:
    """What went wrong, in words for a notice."""
    if isinstance(error, LLMAnswerError):
        return "the memory LLM answered, but not with JSON the sidecar can read"
    return "the memory LLM is unreachable"


class LLMClient(Protocol):
    id: str
    usage: UsageMeter

    async def complete(self, messages: list[dict], *, task: str, json_mode: bool = True,
                       max_tokens: int | None = None, schema: dict | None = None) -> LLMResult:
        """`schema`: the answer's JSON Schema, for a client that can ask the model to follow it."""

    async def close(self) -> None: ...


def measure(meter: UsageMeter, task: str, messages: list[dict], text: str, *, failed: bool = False) -> Usage:
    """Count one call's tokens with tiktoken and add them to the meter."""
    usage = Usage(count_messages(messages), count_tokens(text), 1)
    meter.add(task, usage.prompt_tokens, usage.completion_tokens, failed=failed)
    return usage


async def _scan(fn, text: str, *args):
    """`fn(text, *args)`: the JSON repairs scan the text in Python, so a long answer is read off the event loop."""
    return fn(text, *args) if len(text) < REPAIR_INLINE_CHARS else await asyncio.to_thread(fn, text, *args)


def _with_reminder(messages: list[dict], reminder: str) -> list[dict]:
    """The request again with the reminder added to its last user message (some chat templates refuse two
    user turns in a row)."""
    convo = list(messages)
    if convo and convo[-1].get("role") == "user":
        convo[-1] = {**convo[-1], "content": f"{convo[-1].get('content') or ''}\n\n{reminder}"}
    else:
        convo.append({"role": "user", "content": reminder})
    return convo


async def complete_json(client: LLMClient, messages: list[dict], *, task: str, retries: int = 1,
                        max_tokens: int | None = None, expect: type | tuple = (dict, list),
                        salvage: str | None = None, schema: dict | None = None) -> tuple[Any, Usage]:
    """Ask for JSON; repair what comes back; on an unreadable answer ask again (up to `retries` times)
    with the bad answer and a strict-JSON reminder. Raises LLMError when it stays unreadable.

    `salvage` names the list key of a task whose answer is a list of self-contained items (operations,
    decisions). When every attempt was cut off at the token limit (small models write past any cap), the
    complete items of the fullest cut answer are kept as `{salvage: [...]}` instead of failing the task:
    each item stands alone, so the ones written whole mean what they say, and the half one is never kept.
    `Usage.cut_off` and `Usage.salvaged` say that it happened. `schema` (llm/answer_schemas.py) goes to a
    client that can hold the model to it; the answer is read as tolerantly either way."""
    total = Usage()
    convo = list(messages)
    why = ""
    best_cut: list[dict] = []
    for attempt in range(retries + 1):
        try:
            result = await client.complete(convo, task=task, json_mode=True, max_tokens=max_tokens, schema=schema)
        except LLMError:
            if not best_cut:
                raise
            # A retry that fails outright (the longer retry prompt can pass a small model's context, the
            # server can fall over): the cut answer already read is still the model's answer.
            break
        total += result.usage
        # What the model said, for the next engineer reading why a task made nothing (DEBUG only).
        log.debug("LLM %s answer (attempt %d, %d chars): %r", task, attempt + 1, len(result.text), result.text[:500])
        try:
            if result.truncated:
                raise TruncatedJSON("the API stopped the answer at its token limit (finish_reason: length)")
            value = await _scan(parse_json, result.text)
            if not isinstance(value, expect):
                raise JSONRepairError(f"expected a JSON {'object' if expect is dict else 'value'}, "
                                      f"got {type(value).__name__}")
            return value, total
        except JSONRepairError as exc:
            why = str(exc)
            log.info("LLM %s answer unreadable (attempt %d): %s", task, attempt + 1, why)
            client.usage.add(task + (":cut_off" if isinstance(exc, TruncatedJSON) else ":bad_json"), 0, 0, failed=True)
            if isinstance(exc, TruncatedJSON):
                total.cut_off += 1
                if salvage:
                    items = await _scan(salvage_items, result.text, salvage)
                    if len(items) > len(best_cut):
                        best_cut = items
            reminder = STRICT_JSON_REMINDER.format(why=why[:200])
            if isinstance(exc, TruncatedJSON):  # more room, and ask for brevity; never accept half an answer
                reminder = CUT_OFF_REMINDER
                max_tokens = min(MAX_TOKENS_CEILING, (max_tokens or getattr(client, "max_tokens", 1200))
                                 * MAX_TOKENS_GROWTH)
            # A cut answer is not echoed back: it filled the room once, and the prompt plus it plus a larger
            # max_tokens passed a small model's context (HTTP 400 from llama.cpp, issue 20 item 9).
            convo = _with_reminder(messages, reminder) if isinstance(exc, TruncatedJSON) else list(messages) + [
                {"role": "assistant", "content": result.text[:4000]},
                {"role": "user", "content": reminder},
            ]
    if best_cut:
        log.info("LLM %s answer cut off (no whole answer came back): keeping its %d complete items", task,
                 len(best_cut))
        client.usage.add(task + ":salvaged", 0, 0)
        total.salvaged = len(best_cut)
        return {salvage: best_cut}, total
    raise LLMAnswerError(f"the LLM's answer for {task} was not JSON after {retries + 1} attempts ({why}); "
                   "use a model that follows instructions, or raise llm.json_retries")
