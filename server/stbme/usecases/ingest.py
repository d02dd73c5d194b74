"""Bring an existing SillyTavern chat in (`stbme ingest`): its messages go through the same sync as the
extension's (so opening the chat in ST later finds them stored and redoes nothing), then the chat's
processing is followed to the end, with progress, through its status."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from ..errors import StbmeError
from ..interop.st_chat import StChat, chains_of, sync_body

SyncSend = Callable[[str, dict], Awaitable[dict]]     # a sync body -> the sidecar's answer
StatusRead = Callable[[str], Awaitable[dict]]         # chat id -> the chat status (docs/api.md)
POLL_S = 0.5
EMBED_STALL_S = 30.0


async def push_chat(send: SyncSend, chat: StChat, *, max_messages: int, max_bytes: int) -> dict:
    """Store the whole chat through the sync protocol, as the extension does for a chat the sidecar does
    not know yet (lib/sync.js ChatSyncer): from the first message, in chunks, following `need_more`.
    Returns the last answer plus the sum of memory changes undone (`rolled_back`)."""
    chains = chains_of(chat.messages)
    length = len(chat.messages)
    start, requests, rolled_back, previous = 0, 0, 0, None
    max_requests = (length // max(1, max_messages) + 1) * 3 + 10
    while True:
        if requests >= max_requests:
            raise StbmeError(f"sync of {length} messages did not settle after {requests} requests")
        body, end = sync_body(chat.messages, chains, start, max_messages=max_messages, max_bytes=max_bytes)
        answer = await send(chat.chat_id, body)
        requests += 1
        if not isinstance(answer, dict):
            raise StbmeError(f"the sidecar answered a sync with {type(answer).__name__}, not an object")
        undone = answer.get("rolled_back")
        rolled_back += undone if isinstance(undone, int) else 0
        if answer.get("status") == "synced":
            if end >= length:
                return {**answer, "rolled_back": rolled_back, "requests": requests}
            start = end
        elif answer.get("status") == "need_more":
            need_from = answer.get("need_from")
            if not isinstance(need_from, int) or not 0 <= need_from <= length:
                raise StbmeError(f"the sidecar asked for messages from {need_from!r}; the chat has {length}")
            if previous == (start, end) and need_from == start:
                raise StbmeError(f"the sidecar keeps asking for messages from {need_from}")
            previous = (start, end)
            start = min(need_from, max(length - 1, 0))
        else:
            raise StbmeError(f"unexpected sync status {answer.get('status')!r}")


async def follow(status_of: StatusRead, chat_id: str, report: Callable[[dict], None], *,
                 poll_s: float = POLL_S, embed_stall_s: float = EMBED_STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> dict:
    """Report the chat's status until nothing is queued for it and its memories are embedded (or their
    embedding stopped moving for `embed_stall_s`: nobody is embedding them now). A parked job is an error."""
    unembedded, moved = None, clock()
    while True:
        status = await status_of(chat_id)
        report(status)
        jobs = status["jobs"]
        if not jobs["pending"] and jobs["failed"]:
            raise StbmeError(f"processing chat {chat_id!r} failed: {jobs['last_error']} "
                             "(it is retried on its next sync; see the sidecar log)")
        if status["unembedded"] != unembedded:
            unembedded, moved = status["unembedded"], clock()
        if not jobs["pending"] and (not unembedded or clock() - moved > embed_stall_s):
            return status
        await asyncio.sleep(poll_s)
