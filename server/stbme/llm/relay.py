"""llm.mode = relay: no second API key. The sidecar sends each request over the live WebSocket to the
connected ST extension, which runs it on the user's current SillyTavern connection and answers.

Protocol (docs/api.md, live channel):
  server -> client  {"type": "relay_request", "id", "task", "messages": [{role, content}], "max_tokens",
                     "schema" (the answer's JSON Schema, when the task has one)}
  client -> server  {"type": "relay_response", "id", "text"}  or  {"type": "relay_response", "id", "error"}

A request goes to one client session (the newest relay client) under an unguessable id; only that session's
answer resolves it. An answer from any other session is rejected and logged: the chat's text and the
memories the answer would write belong to the client that was asked.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from typing import Callable

from .base import LLMAnswerError, LLMError, LLMResult, answer_byte_limit, measure
from .usage import UsageMeter

log = logging.getLogger("stbme.llm")
Send = Callable[[dict], None]


class RelayChannel:
    """The request/response registry the WebSocket handler feeds. The newest connected extension
    serves requests; when it goes away, its open requests fail at once (and are retried by the job)."""

    def __init__(self):
        self._peers: dict[int, Send] = {}
        self._order = itertools.count(1)
        self._pending: dict[str, tuple[int, asyncio.Future]] = {}
        self.on_connect: list[Callable[[], None]] = []

    @property
    def connected(self) -> int:
        return len(self._peers)

    def attach(self, send: Send) -> int:
        peer = next(self._order)
        self._peers[peer] = send
        for callback in list(self.on_connect):
            try:
                callback()
            except Exception:  # a listener must not break the socket
                log.exception("relay connect listener failed")
        return peer

    def detach(self, peer: int) -> None:
        self._peers.pop(peer, None)
        for req_id, (owner, fut) in list(self._pending.items()):
            if owner == peer and not fut.done():
                fut.set_exception(LLMError("the SillyTavern extension disconnected before answering the relayed "
                                           "LLM request; it will be retried"))

    def resolve(self, message: dict, peer: int | None) -> bool:
        """Feed a `relay_response` from the client session `peer` (None: a client that is not a relay
        peer). Unknown or late ids are ignored, an answer from another session than the one asked is
        rejected and logged (False)."""
        req_id = str(message.get("id", ""))
        entry = self._pending.get(req_id)
        if entry is None or entry[1].done():
            log.info("relay answer to an unknown or finished request ignored")
            return False
        owner, fut = entry
        if peer != owner:
            log.warning("relay answer rejected: it came from another client session than the one the request "
                        "was sent to (peer %s, expected %s)", peer, owner)
            return False
        if isinstance(message.get("error"), str) and message["error"]:
            fut.set_exception(LLMError(f"SillyTavern could not run the relayed LLM request: {message['error'][:300]}"))
        elif isinstance(message.get("text"), str):
            fut.set_result(message["text"])
        else:
            fut.set_exception(LLMError("the extension's relay_response had neither 'text' nor 'error'"))
        return True

    async def request(self, messages: list[dict], *, task: str, max_tokens: int, timeout_s: float,
                      schema: dict | None = None) -> str:
        if not self._peers:
            raise LLMError("llm.mode is relay but no SillyTavern extension is connected to the sidecar; open "
                           "SillyTavern with the ST-BME extension enabled (the job is parked and resumes when it "
                           "connects), or set llm.mode to openai")
        peer = max(self._peers)
        req_id = secrets.token_urlsafe(18)
        fut = asyncio.get_running_loop().create_future()
        self._pending[req_id] = (peer, fut)
        try:
            request = {"type": "relay_request", "id": req_id, "task": task, "messages": messages,
                       "max_tokens": max_tokens}
            if schema is not None:
                request["schema"] = schema
            self._peers[peer](request)
            async with asyncio.timeout(timeout_s):
                return await fut
        except TimeoutError:
            raise LLMError(f"the SillyTavern extension did not answer the relayed {task} request within "
                           f"{timeout_s:g} s (llm.relay_timeout_s); is a generation blocking it, or is the model slower "
                           "than that (raise llm.relay_timeout_s)?") from None
        except asyncio.QueueFull:
            raise LLMError("the live channel to the extension is full; the relayed request will be retried") from None
        finally:
            self._pending.pop(req_id, None)


class RelayLLM:
    """An LLMClient that runs every request through the extension's ST connection."""

    def __init__(self, channel: RelayChannel, *, max_tokens: int = 1200, timeout_s: float = 180.0,
                 concurrency: int = 1, usage: UsageMeter | None = None):
        self.channel = channel
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.id = "relay:sillytavern"
        self.usage = usage or UsageMeter()
        self._gate = asyncio.Semaphore(max(1, concurrency))

    async def complete(self, messages: list[dict], *, task: str, json_mode: bool = True,
                       max_tokens: int | None = None, schema: dict | None = None) -> LLMResult:
        # The schema goes with the request: on Chat Completion the extension hands it to ST's generateRaw, which
        # asks the connection for structured output (response_format, Claude's forced tool); elsewhere ST cannot
        # pass it and the answer is plain text. Either way it is read tolerantly, as from any model.
        max_tokens = max_tokens or self.max_tokens
        # llm.relay_timeout_s is for an answer of llm.max_tokens: a model writes at its own pace, so a request
        # for twice the tokens (a cut answer's retry) may take twice as long.
        timeout_s = self.timeout_s * max(1.0, max_tokens / max(1, self.max_tokens))
        async with self._gate:
            try:
                text = await self.channel.request(messages, task=task, max_tokens=max_tokens, timeout_s=timeout_s,
                                                  schema=schema if json_mode else None)
                if len(text) > answer_byte_limit(max_tokens):
                    raise LLMAnswerError(f"the relayed {task} answer has {len(text)} characters, more than a "
                                         f"{max_tokens}-token answer can; the ST connection ignored max_tokens")
            except LLMError:
                await asyncio.to_thread(measure, self.usage, task, messages, "", failed=True)
                raise
        return LLMResult(text, await asyncio.to_thread(measure, self.usage, task, messages, text))

    async def close(self) -> None:
        return None
