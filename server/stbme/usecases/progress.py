"""Progress a person can read, per chat: messages processed of those stored, memories embedded of those
made, and a steady time left for the whole of it. Two paces are measured over the last steps (not since
the start of a job, which swings with every pause and every new sync): messages per second over the last
batches, vectors per second over the last embedding batches. Without an LLM the vectors come after every
message is processed (the whole chat is keyword-searchable first), and they take most of the time: the
time left counts the vectors still to make, those of the messages not processed yet included. Reported on
the live channel, in the server log every few seconds while the chat is worked on (while it is embedded
too), and in `/health` and the chat status."""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from typing import Callable

from ..live import LiveHub
from ..store import Store
from ..store.queries import count_active_nodes, count_unembedded, message_count, require_chat

log = logging.getLogger("stbme.progress")
WINDOW_BATCHES = 24      # the pace is measured over this many recent batches...
MIN_WINDOW_S = 2.0       # ...and over at least this much time (a burst of tiny batches says little)
PUBLISH_EVERY_S = 0.25   # live channel messages per chat, at most
LOG_EVERY_S = 5.0        # server log lines per chat while it is worked on
RESUME_WITHIN_S = 15.0   # a chat worked on again this soon keeps its measured pace


def _window(samples=()) -> collections.deque:
    """The recent samples a pace is measured over: (monotonic time, steps done)."""
    return collections.deque(samples, maxlen=WINDOW_BATCHES + 1)


@dataclasses.dataclass
class _Run:
    started: float
    samples: collections.deque        # (monotonic time, messages done)
    done: int = 0
    total: int = 0
    embedded: int = 0
    embed_total: int = 0
    working: bool = True
    vectors_follow: bool = False      # the vectors are made after the messages (no LLM): count them ahead
    vector_samples: collections.deque = dataclasses.field(default_factory=_window)  # (time, vectors made)
    vectors_made: int = 0
    ready_ahead: int = 0              # vectors made ahead for memories not stored yet (their pass is a cache hit)
    last_publish: float = 0.0
    last_log: float = 0.0
    finished_at: float = 0.0


def _percent(done: int, total: int) -> float:
    return round(100.0 * done / total, 1) if total else 100.0


def format_duration(seconds: float | None) -> str:
    """'about 3 min 20 s' style, for logs and the CLI."""
    if seconds is None:
        return "time left unknown yet"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"about {seconds} s left"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"about {minutes} min {seconds:02d} s left"
    hours, minutes = divmod(minutes, 60)
    return f"about {hours} h {minutes:02d} min left"


class ProgressTracker:
    def __init__(self, store: Store, live: LiveHub, embedder_id: Callable[[], str],
                 clock: Callable[[], float] = time.monotonic):
        self.store = store
        self.live = live
        self.embedder_id = embedder_id
        self.clock = clock
        self._runs: dict[str, _Run] = {}
        self._vector_pace: float | None = None   # the last pace measured on any chat: a chat's first guess

    def _run(self, chat_id: str, done: int) -> _Run:
        now = self.clock()
        run = self._runs.get(chat_id)
        if run is None or (not run.working and now - run.finished_at > RESUME_WITHIN_S):
            run = self._runs[chat_id] = _Run(now, _window([(now, done)]))
        elif not run.working:  # resumed soon after: keep the pace, without the idle pause in it
            gap = now - run.finished_at
            run.samples = _window((t + gap, d) for t, d in run.samples)
            run.vector_samples = _window((t + gap, v) for t, v in run.vector_samples)
        run.working = True
        return run

    def started(self, chat_id: str, done: int, total: int, *, vectors_follow: bool = False) -> None:
        """The chat's processing starts (or resumes) with `done` of `total` messages processed;
        `vectors_follow`: its memories are embedded once its messages are processed (no LLM)."""
        run = self._run(chat_id, done)
        run.done, run.total, run.vectors_follow = done, total, vectors_follow
        if run.samples[-1][1] != done:  # messages were undone or added meanwhile: the pace starts again
            run.samples = _window([(self.clock(), done)])

    async def batch_done(self, chat_id: str, done: int, total: int, **details) -> None:
        """A batch was committed: `done` messages of `total` are processed. `details` (e.g. the batch's
        evolution figures) ride along on the live channel."""
        run = self._run(chat_id, done)
        run.samples.append((self.clock(), done))
        run.done, run.total = done, total
        await self._report(chat_id, run, details=details)

    async def embedded(self, chat_id: str, count: int) -> None:
        """`count` more of the chat's memories got their vectors (an embedding batch was committed)."""
        run = self._runs.get(chat_id)
        if run is None or not run.working or count <= 0:
            return
        # Vectors made ahead come first (newest messages first, as the work ahead): cache hits, no model work.
        hits = min(run.ready_ahead, count)
        run.ready_ahead -= hits
        await self._made(chat_id, run, count - hits)

    async def made_ahead(self, chat_id: str, count: int) -> None:
        """`count` vectors were made ahead for memories still to be stored (usecases/processing.py)."""
        run = self._runs.get(chat_id)
        if run is None or not run.working or count <= 0:
            return
        run.ready_ahead += count
        await self._made(chat_id, run, count)

    async def _made(self, chat_id: str, run: _Run, count: int) -> None:
        """The model made `count` vectors: the pace of the vectors still to make."""
        if count > 0:
            # The first batch only starts the clock: when its work began is not known.
            run.vectors_made += count
            run.vector_samples.append((self.clock(), run.vectors_made))
            pace = self.vector_rate(run)
            if pace is not None:
                self._vector_pace = pace
        await self._report(chat_id, run)

    async def finished(self, chat_id: str) -> None:
        """Nothing more to do for now (the rest waits for new messages)."""
        run = self._runs.get(chat_id)
        if run is None or not run.working:
            return
        run.working = False
        run.finished_at = self.clock()
        await self._report(chat_id, run, force=True)

    def stopped(self, chat_id: str) -> None:
        """The processing failed (the job is retried or parked): the chat is no longer worked on."""
        run = self._runs.get(chat_id)
        if run is not None and run.working:
            run.working = False
            run.finished_at = self.clock()

    def forget(self, chat_id: str) -> None:
        self._runs.pop(chat_id, None)

    @staticmethod
    def _pace(samples: collections.deque) -> float | None:
        """Steps per second over the samples, None until there is enough to tell."""
        if len(samples) < 3:
            return None
        (t0, d0), (t1, d1) = samples[0], samples[-1]
        if t1 - t0 < MIN_WINDOW_S or d1 <= d0:
            return None
        return (d1 - d0) / (t1 - t0)

    def rate(self, run: _Run) -> float | None:
        """Messages per second over the recent batches, None until there is enough to tell."""
        return self._pace(run.samples)

    def vector_rate(self, run: _Run) -> float | None:
        """Vectors per second over the recent embedding batches (another chat's pace until this one has its
        own), None until known."""
        return self._pace(run.vector_samples) or self._vector_pace

    def eta(self, run: _Run, done: int, total: int, embedded: int, embed_total: int) -> float | None:
        """Seconds until the chat's messages are processed and its memories embedded, None until the paces
        it needs are known."""
        if not run.working:
            return 0.0 if done >= total and embedded >= embed_total else None
        messages_left, vectors_left = max(0, total - done), max(0, embed_total - embedded)
        seconds = 0.0
        if messages_left:
            rate = self.rate(run)
            if rate is None:
                return None
            seconds += messages_left / rate
        if run.vectors_follow:
            # The memories of the messages still to process get their vectors after them, as many per
            # message as so far; those made ahead cost nothing more.
            vectors_left += round(messages_left * embed_total / done) if done else 0
            vectors_left = max(0, vectors_left - run.ready_ahead)
            if vectors_left:
                pace = self.vector_rate(run)
                if pace is None:
                    return None
                seconds += vectors_left / pace
        return max(0.0, seconds)

    async def _counts(self, chat_id: str, run: _Run) -> None:
        embedder = self.embedder_id()

        def read(conn):
            total = count_active_nodes(conn, chat_id)
            return total - count_unembedded(conn, chat_id, embedder), total

        run.embedded, run.embed_total = await self.store.read(read)

    async def _report(self, chat_id: str, run: _Run, force: bool = False, details: dict | None = None) -> None:
        now = self.clock()
        # A batch's details (its evolution figures) are said once: never held back by the throttle.
        publish = force or bool(details) or now - run.last_publish >= PUBLISH_EVERY_S
        write_log = force or now - run.last_log >= LOG_EVERY_S
        if not (publish or write_log):
            return
        await self._counts(chat_id, run)
        snap = self._snapshot(chat_id, run)
        if publish:
            run.last_publish = now
            self.live.publish({"type": "progress", "task": "extract", "chat_id": chat_id, "done": run.done,
                               "total": run.total, "eta_s": snap["eta_s"], "embedded": run.embedded,
                               "embed_total": run.embed_total, "working": run.working, **(details or {})})
        if write_log:
            run.last_log = now
            if run.working:
                log.info("chat %r: %d/%d messages processed (%g%%), %d/%d memories embedded (%g%%), %s",
                         chat_id, run.done, run.total, snap["messages"]["percent"], run.embedded,
                         run.embed_total, snap["embedding"]["percent"], format_duration(snap["eta_s"]))
            else:
                log.info("chat %r: processing caught up: %d/%d messages, %d/%d memories embedded (%.0f s)",
                         chat_id, run.done, run.total, run.embedded, run.embed_total, now - run.started)

    def _snapshot(self, chat_id: str, run: _Run) -> dict:
        rate = self.rate(run)
        eta = self.eta(run, run.done, run.total, run.embedded, run.embed_total)
        return {"chat_id": chat_id, "working": run.working,
                "messages": {"done": run.done, "total": run.total, "percent": _percent(run.done, run.total)},
                "embedding": {"done": run.embedded, "total": run.embed_total,
                              "percent": _percent(run.embedded, run.embed_total)},
                "rate_per_s": None if rate is None else round(rate, 2),
                "eta_s": None if eta is None else round(eta, 1)}

    def working(self) -> list[dict]:
        """Snapshots of the chats being processed now (for /health)."""
        return [self._snapshot(chat_id, run) for chat_id, run in sorted(self._runs.items()) if run.working]

    async def chat(self, chat_id: str) -> dict:
        """The chat's progress: counts from the store, the pace and time left while it is worked on."""
        embedder = self.embedder_id()

        def read(conn):
            chat = require_chat(conn, chat_id)
            nodes = count_active_nodes(conn, chat_id)
            return chat["processed_upto"] + 1, message_count(conn, chat_id), \
                nodes - count_unembedded(conn, chat_id, embedder), nodes

        done, total, embedded, embed_total = await self.store.read(read)
        run = self._runs.get(chat_id)
        rate = eta = None
        if run is not None and run.working:
            rate, eta = self.rate(run), self.eta(run, done, total, embedded, embed_total)
        return {"working": bool(run and run.working),
                "messages": {"done": done, "total": total, "percent": _percent(done, total)},
                "embedding": {"done": embedded, "total": embed_total, "percent": _percent(embedded, embed_total)},
                "rate_per_s": None if rate is None else round(rate, 2),
                "eta_s": None if eta is None else round(eta, 1)}
