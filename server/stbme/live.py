"""The live channel's fan-out: progress and notices to every connected extension (WebSocket)."""

from __future__ import annotations

import asyncio
import logging
import time

log = logging.getLogger("stbme.live")


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

    def __init__(self, queue: asyncio.Queue):
        self.queue = queue
        self.last_seen = time.monotonic()
        self.relay_peer: int | None = None
        self.busy = False


class PollSessions:
    """Long-poll sessions by client id; a session nobody polled for `ttl_s` is closed (its relay
    requests fail at once instead of waiting for their timeout)."""

    def __init__(self, hub: LiveHub, ttl_s: float = 60.0):
        self.hub = hub
        self.ttl_s = ttl_s
        self._sessions: dict[str, PollSession] = {}
        self.on_close: list = []  # callbacks(session) run when a session expires or closes

    def get(self, client_id: str) -> PollSession:
        self.expire()
        session = self._sessions.get(client_id)
        if session is None:
            session = self._sessions[client_id] = PollSession(self.hub.subscribe())
        session.last_seen = time.monotonic()
        return session

    def expire(self) -> None:
        now = time.monotonic()
        for client_id, session in list(self._sessions.items()):
            if not session.busy and now - session.last_seen > self.ttl_s:
                self.close(client_id)

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
        for client_id in list(self._sessions):
            self.close(client_id)

    async def wait(self, session: PollSession, wait_s: float, limit: int = 100) -> list[dict]:
        """Messages for the session: at once if some are queued, else the first within wait_s."""
        session.busy = True
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
            session.busy = False
            session.last_seen = time.monotonic()
