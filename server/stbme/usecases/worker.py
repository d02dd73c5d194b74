"""The job worker: runs persisted jobs one chat at a time, backs off a failing chat (others keep going),
and parks a job after its last attempt with the error visible."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Awaitable, Callable

from ..errors import StbmeError
from ..live import LiveHub
from ..store import Store
from ..store.jobs import JobState, claim_next_job, finish_job, requeue_interrupted

log = logging.getLogger("stbme")
MAX_JOB_ATTEMPTS = 3
IDLE_POLL_S = 5.0
Handler = Callable[[dict], Awaitable[object]]


class JobWorker:
    def __init__(self, store: Store, live: LiveHub, max_attempts: int = MAX_JOB_ATTEMPTS):
        self.store = store
        self.live = live
        self.max_attempts = max_attempts
        self.handlers: dict[str, Handler] = {}   # by job kind
        self._wake = asyncio.Event()
        self._retry_at: dict[str, float] = {}    # chat -> monotonic time its backoff ends
        self._busy: set[str] = set()

    def register(self, kind: str, handler: Handler) -> None:
        self.handlers[str(kind)] = handler

    def wake(self) -> None:
        """Run queued jobs now instead of at the worker's next poll."""
        self._wake.set()

    async def resume_interrupted(self) -> None:
        resumed = await self.store.write(requeue_interrupted)
        if resumed:
            log.info("resuming %d interrupted jobs", resumed)
        self._wake.set()

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            waiting = {c for c, at in self._retry_at.items() if at > now}  # backing off after a failure
            try:
                job = await self.store.write(lambda conn: claim_next_job(conn, self._busy | waiting))
            except StbmeError:
                return  # the store closed: shutting down
            if job is None:
                self._wake.clear()
                pause = min([IDLE_POLL_S] + [at - now for at in self._retry_at.values() if at > now])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(pause, 0.01)):
                        await self._wake.wait()
                continue
            self._retry_at.pop(job["chat_id"], None)
            self._busy.add(job["chat_id"])
            try:
                await self._run(job)
            finally:
                self._busy.discard(job["chat_id"])

    async def _run(self, job: dict) -> None:
        chat_id = job["chat_id"]
        try:
            handler = self.handlers.get(job["kind"])
            if handler is None:
                raise StbmeError(f"unknown job kind {job['kind']!r}")
            await handler(job)
            await self.store.write(lambda conn: finish_job(conn, job["id"], JobState.DONE))
            self.live.publish({"type": "job", "chat_id": chat_id, "state": str(JobState.DONE), "error": None})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # parked with its error; the chat and stored memories stay intact
            log.exception("job %s for chat %r failed", job["id"], chat_id)
            message = exc.message if isinstance(exc, StbmeError) else f"{type(exc).__name__}: {exc}"
            state = JobState.FAILED if job["attempts"] >= self.max_attempts else JobState.PENDING
            with contextlib.suppress(StbmeError):
                await self.store.write(lambda conn: finish_job(conn, job["id"], state, message))
            self.live.publish({"type": "job", "chat_id": chat_id, "state": str(state), "error": message})
            if state == JobState.FAILED:
                self.live.notice("error", f"memory processing failed: {message}. It will be retried on the "
                                 "next message; check the sidecar log.", chat_id)
            # Back off this chat only; other chats keep being processed meanwhile.
            self._retry_at[chat_id] = time.monotonic() + min(30, 2 ** job["attempts"])
