"""The job worker: runs persisted jobs in lanes, so one kind of work never waits behind another (chat
processing behind Authority jobs, issue 20). In each lane a chat's jobs run one at a time; a failing chat
backs off (others keep going) and a job is parked after its last attempt with the error visible."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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


@dataclasses.dataclass(frozen=True)
class Lane:
    """Which jobs a lane runs (kinds starting with `prefix`; None: every kind no other lane takes), how many
    at once, and in what order: oldest first, or `fair`: round robin between owners (chat ids), so one
    owner's long queue does not hold up the others."""
    name: str
    prefix: str | None = None
    slots: int = 1
    fair: bool = False


CHAT_LANE = Lane("chats")


class JobWorker:
    def __init__(self, store: Store, live: LiveHub, max_attempts: int = MAX_JOB_ATTEMPTS,
                 lanes: tuple[Lane, ...] = (CHAT_LANE,)):
        self.store = store
        self.live = live
        self.max_attempts = max_attempts
        self.lanes = lanes
        self.handlers: dict[str, Handler] = {}   # by job kind
        self._wake = {lane.name: asyncio.Event() for lane in lanes}
        self._retry_at: dict[str, float] = {}    # chat -> monotonic time its backoff ends
        self._busy: set[str] = set()
        self._served: dict[str, float] = {}      # owner -> when a fair lane last started one of its jobs

    def register(self, kind: str, handler: Handler) -> None:
        self.handlers[str(kind)] = handler

    def wake(self) -> None:
        """Run queued jobs now instead of at the worker's next poll."""
        for event in self._wake.values():
            event.set()

    async def resume_interrupted(self) -> None:
        resumed = await self.store.write(requeue_interrupted)
        if resumed:
            log.info("resuming %d interrupted jobs", resumed)
        self.wake()

    async def run(self) -> None:
        """Run every lane until the store closes (or the task is cancelled)."""
        await asyncio.gather(*(self._run_lane(lane) for lane in self.lanes))

    def _claim(self, lane: Lane):
        others = tuple(other.prefix for other in self.lanes if other.prefix is not None and other is not lane)
        now = time.monotonic()
        skip = self._busy | {c for c, at in self._retry_at.items() if at > now}  # running, or backing off
        rank = (lambda owner: self._served.get(owner, 0.0)) if lane.fair else None
        return lambda conn: claim_next_job(conn, skip, prefix=lane.prefix, exclude=() if lane.prefix else others,
                                           rank=rank)

    async def _run_lane(self, lane: Lane) -> None:
        wake = self._wake[lane.name]
        running: set[asyncio.Task] = set()
        try:
            while True:
                job = None
                if len(running) < lane.slots:
                    try:
                        job = await self.store.write(self._claim(lane))
                    except StbmeError:
                        return  # the store closed: shutting down
                if job is not None:
                    self._retry_at.pop(job["chat_id"], None)
                    self._busy.add(job["chat_id"])
                    self._served[job["chat_id"]] = time.monotonic()
                    task = asyncio.create_task(self._run(job), name=f"stbme-job-{job['id']}")
                    running.add(task)
                    task.add_done_callback(running.discard)
                    continue
                wake.clear()
                now = time.monotonic()
                pause = min([IDLE_POLL_S] + [at - now for at in self._retry_at.values() if at > now])
                with contextlib.suppress(TimeoutError):  # woken by new work or a job that ended
                    async with asyncio.timeout(max(pause, 0.01)):
                        await wake.wait()
        finally:
            for task in running:
                task.cancel()
            for task in list(running):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

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
        finally:
            self._busy.discard(chat_id)
            for event in self._wake.values():  # a chat's next job may wait in any lane
                event.set()
