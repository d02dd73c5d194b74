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

    def progress(self, task: str, chat_id: str | None, done: int, total: int, started: float) -> None:
        """Progress with an ETA; throttled to ~4 messages a second per task, plus the last one."""
        key = (task, chat_id or "")
        now = time.monotonic()
        if done < total and now - self._last_progress.get(key, 0) < 0.25:
            return
        self._last_progress[key] = now
        elapsed = now - started
        eta = (elapsed / done * (total - done)) if done and total else None
        self.publish({"type": "progress", "task": task, "chat_id": chat_id, "done": done, "total": total,
                      "eta_s": None if eta is None else round(eta, 1)})
