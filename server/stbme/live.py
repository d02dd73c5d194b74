"""The live channel's fan-out: progress and notices to every connected extension (WebSocket), and the
long-poll sessions of the clients that cannot open one."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict

from .errors import Unavailable

log = logging.getLogger("stbme.live")
MAX_POLL_SESSIONS = 32  # long-poll clients at once: a few SillyTavern tabs, not an open door
POLL_TTL_S = 60.0  # longer than the longest poll (api/live_routes.LONG_POLL_MAX_S)


class LiveHub:
    """Subscribers get a bounded queue each; a slow client loses old messages, never blocks the sidecar."""

    def __init__(self, queue_size: int = 256):
        self._subscribers: set[asyncio.Queue] = set()
        self._queue_size = queue_size
        self._last_progress: dict[tuple[str, str], float] = {}

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue(self._queue_size)
        self._subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self._subscribers.discard(q)

    @property
    def clients(self) -> int:
        return len(self._subscribers)

    def publish(self, message: dict) -> None:
        for q in list(self._subscribers):
            if q.full():
                try:
                    q.get_nowait()
                except asyncio.QueueEmpty:
                    pass
            q.put_nowait(message)

    def notice(self, level: str, message: str, chat_id: str | None = None) -> None:
        log.log(logging.WARNING if level in ("warning", "error") else logging.INFO, "%s", message)
        self.publish({"type": "notice", "level": level, "message": message, "chat_id": chat_id})

    def progress(self, task: str, chat_id: str | None, done: int, total: int, started: float, **details) -> None:
        """Progress with an ETA; throttled to ~4 messages a second per task, plus the last one. `details`
        (e.g. the batch's evolution figures) ride along."""
        key = (task, chat_id or "")
        now = time.monotonic()
        if done < total and now - self._last_progress.get(key, 0) < 0.25:
            return
        self._last_progress[key] = now
        elapsed = now - started
        eta = (elapsed / done * (total - done)) if done and total else None
        self.publish({"type": "progress", "task": task, "chat_id": chat_id, "done": done, "total": total,
                      "eta_s": None if eta is None else round(eta, 1), **details})


class PollSession:
    """One client of the live channel over HTTP long-poll (for browsers that reach the sidecar only
    through SillyTavern's proxy plugin, which cannot carry a WebSocket)."""

    def __init__(self, client_id: str, queue: asyncio.Queue):
        self.client_id = client_id
        self.queue = queue
        self.last_seen = time.monotonic()
        self.relay_peer: int | None = None
        self.waiting = 0  # polls of this session in progress

    @property
    def busy(self) -> bool:
        return self.waiting > 0


class PollSessions:
    """Long-poll sessions by client id, at most `max_sessions`. A session nobody polled for `ttl_s` is
    closed by a timer, even when no other client polls (its relay requests fail at once instead of
    waiting for their timeout). Sessions are kept least recently seen first, so a poll costs O(1) and
    the timer only looks at the oldest."""

    def __init__(self, hub: LiveHub, ttl_s: float = POLL_TTL_S, max_sessions: int = MAX_POLL_SESSIONS):
        self.hub = hub
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, PollSession] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self.on_close: list = []  # callbacks(session) run when a session expires or closes

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, client_id: str) -> PollSession:
        """The client's session, opened on its first poll; Unavailable when `max_sessions` are open."""
        session = self._sessions.get(client_id)
        if session is None:
            if len(self._sessions) >= self.max_sessions:
                raise Unavailable(f"{len(self._sessions)} live sessions are open, the most the sidecar keeps: "
                                  f"close unused SillyTavern tabs (an idle one ends after {self.ttl_s:g} s)",
                                  field="client_id")
            session = self._sessions[client_id] = PollSession(client_id, self.hub.subscribe())
        self._touch(session)
        return session

    def _touch(self, session: PollSession) -> None:
        session.last_seen = time.monotonic()
        if self._sessions.get(session.client_id) is session:  # not closed meanwhile
            self._sessions.move_to_end(session.client_id)
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None or not self._sessions:
            return
        oldest = next(iter(self._sessions.values()))
        delay = max(0.05, oldest.last_seen + self.ttl_s - time.monotonic())  # no spin at ttl_s = 0
        self._timer = asyncio.get_running_loop().call_later(delay, self.expire)

    def expire(self) -> None:
        """Close the sessions nobody polled for `ttl_s` (the timer calls this); a session inside a poll
        is alive."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        now = time.monotonic()
        for _ in range(len(self._sessions)):
            session = next(iter(self._sessions.values()))
            if now - session.last_seen < self.ttl_s:
                break
            if session.busy:
                session.last_seen = now
                self._sessions.move_to_end(session.client_id)
            else:
                self.close(session.client_id)
        self._schedule()

    def close(self, client_id: str) -> None:
        session = self._sessions.pop(client_id, None)
        if session is None:
            return
        self.hub.unsubscribe(session.queue)
        if session.queue.full():
            session.queue.get_nowait()
        session.queue.put_nowait({"type": "closed", "message": "live session closed; poll again to reopen"})
        for callback in self.on_close:
            callback(session)

    def close_all(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for client_id in list(self._sessions):
            self.close(client_id)

    async def wait(self, session: PollSession, wait_s: float, limit: int = 100) -> list[dict]:
        """Messages for the session: at once if some are queued, else the first within wait_s."""
        session.waiting += 1
        try:
            messages = []
            if session.queue.empty():
                try:
                    async with asyncio.timeout(wait_s):
                        messages.append(await session.queue.get())
                except TimeoutError:
                    return []
            while not session.queue.empty() and len(messages) < limit:
                messages.append(session.queue.get_nowait())
            return messages
        finally:
            session.waiting -= 1
            self._touch(session)
