"""Turning a chat's pending messages into memories, batch by batch, and redoing the batches made while
the LLM was down once it answers again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable

from .. import config
from ..dna.stage import SignalStage
from ..embed import EmbeddingService
from ..errors import StbmeError
from ..live import LiveHub
from ..llm.base import LLMClient
from ..pipeline.batch import BatchRunner, Stage
from ..pipeline.dedupe import DedupeStage
from ..pipeline.evolve import EvolveStage
from ..pipeline.extract import ExtractStage
from ..pipeline.heuristic import HeuristicStage, event_texts, speakers_before
from ..pipeline.maintain import MaintainStage
from ..pipeline.sync import load_messages, undo_memories_from
from ..store import Store
from ..store.jobs import queue_degraded_chats, requeue_parked
from ..store.queries import chat_row, message_count
from .embedding import EMBED_ROUND, Embedding
from .memory_llm import MemoryLLM
from .progress import ProgressTracker

log = logging.getLogger("stbme")
# Embedding ahead (see ChatProcessor._embed_ahead): only for a backlog of at least this many messages (a
# chat's usual new message is embedded right after it is extracted), this many messages per model call.
AHEAD_MIN_MESSAGES = 64
AHEAD_STEP_MESSAGES = 32
# ... and only the newest this many: further back it would only slow the extraction that makes every message
# keyword-searchable (they share the CPU), and the older memories are embedded right after it anyway.
AHEAD_MAX_MESSAGES = 256
# ... and at most this many texts per call, one call at a time: one bulk slice (~256 tokens), so the work
# ahead keeps to one core and the extraction it runs beside keeps another (with both cores, the extraction
# of 5,000 messages took 19.8 s instead of 13.4).
AHEAD_TEXTS_PER_CALL = 4


def default_stages(*, llm_mode: str, store: Store, embeddings: EmbeddingService, llm: LLMClient,
                   live: LiveHub, embed_pending: Callable[[str], Awaitable[int]] | None = None) -> list[Stage]:
    """The batch pipeline's stages, in order (pipeline/batch.py has the contract)."""
    # DNA signals first: directive memories from the user steering the story (every LLM mode).
    stages: list[Stage] = [SignalStage(store=store, embeddings=embeddings, embed_pending=embed_pending),
                           HeuristicStage()]
    if llm_mode != "none":
        # The heuristic per-message events stay as the raw episodic layer; the LLM adds structure on top.
        tools = dict(store=store, embeddings=embeddings, llm=llm, live=live)
        stages += [ExtractStage(**tools), DedupeStage(**tools), EvolveStage(**tools), MaintainStage(**tools)]
    return stages


class ChatProcessor:
    def __init__(self, store: Store, settings: config.Settings, embedding: Embedding, memory_llm: MemoryLLM,
                 live: LiveHub, wake_worker: Callable[[], None], progress: ProgressTracker):
        self.store = store
        self.progress = progress
        self.settings = settings
        self.embedding = embedding
        self.memory_llm = memory_llm
        self.live = live
        self.wake_worker = wake_worker
        self.runner = BatchRunner(store, settings, index_changes=embedding.index_changes,
                                  llm_health=memory_llm.health, live=live)
        self._stages: tuple[object, list[Stage]] | None = None

    def stages(self) -> list[Stage]:
        """The stage list for the current LLM client (rebuilt when it was swapped)."""
        client = self.memory_llm.client
        if self._stages is None or self._stages[0] is not client:
            self._stages = (client, default_stages(llm_mode=self.memory_llm.mode, store=self.store,
                                                   embeddings=self.embedding.embeddings, llm=client, live=self.live,
                                                   embed_pending=self.embedding.embed_pending))
        return self._stages[1]

    async def process_chat(self, chat_id: str) -> int:
        """Turn every pending message of the chat into memories, batch by batch. Returns batches run.

        Without an LLM no stage reads the new memories' vectors, so every pending batch is extracted
        first (the whole chat is keyword-searchable at once), then embedded newest first, a round at a
        time, extracting newly synced messages between rounds."""
        # Without an LLM no stage waits for vectors: they are made once the messages are (see _process).
        processed, stored = await self.store.read(lambda conn: _position(conn, chat_id))
        self.progress.started(chat_id, processed, stored, vectors_follow=self.memory_llm.mode == "none")
        try:
            batches = await self._process(chat_id)
        except BaseException:
            self.progress.stopped(chat_id)
            raise
        await self.progress.finished(chat_id)
        return batches

    async def _process(self, chat_id: str) -> int:
        batches = 0
        # A batch a crash or a failure left half-done is undone first and runs again below.
        await self._undo_from(chat_id, "unfinished_from", "an unfinished batch is redone")
        # Batches made without the LLM are redone before new ones once it may answer: a new batch would
        # otherwise start where the LLM last read, before the degraded ones, and be undone with them.
        redo_tried = await self._redo_degraded(chat_id)
        defer = self.memory_llm.mode == "none"
        ahead: asyncio.Task | None = None   # the work ahead under way ...
        ahead_newest, sent_ahead = -1, set()   # ... the newest message it started from, the texts it sent
        ahead_done = asyncio.Event()           # ... and how it is told to stop after its current model call
        try:
            with self.embedding.deferred(chat_id, defer):
                while True:
                    ctx = await self.runner.run_next(chat_id, self.stages())
                    if ctx is None:
                        if not redo_tried and await self._redo_degraded(chat_id):
                            redo_tried = True  # once per run: if the LLM fails again, the retry time moves on
                            continue
                        # Everything is extracted: the embedding below takes over once the work ahead has
                        # finished its current call (cancelled mid-call, that call's vectors would be lost
                        # and its texts embedded again).
                        ahead_done.set()
                        if ahead is not None:
                            await ahead
                        # Also finishes embeddings a failed earlier attempt left behind (raises if still failing,
                        # so the job is retried with backoff, then parked with its error).
                        if await self.embedding.embed_pending(chat_id, limit=EMBED_ROUND if defer else None) and defer:
                            continue
                        return batches
                    batches += 1
                    # A backlog (an ingest, a chat opened for the first time: messages arrive in pieces of up
                    # to server.max_sync_messages) is embedded ahead while it is extracted.
                    newest = ctx.total_messages - 1
                    if (defer and (ahead is None or ahead.done()) and newest > ahead_newest
                            and newest - ctx.end >= AHEAD_MIN_MESSAGES):
                        ahead_newest, ahead_done = newest, asyncio.Event()
                        ahead = asyncio.create_task(self._embed_ahead(chat_id, sent_ahead, ahead_done),
                                                    name="stbme-embed-ahead")
                    evolution = ctx.data.get("evolution")
                    await self.progress.batch_done(chat_id, ctx.end + 1, ctx.total_messages,
                                                   **({"evolution": evolution.to_json()} if evolution else {}))
        finally:
            await _stop(ahead)

    async def _embed_ahead(self, chat_id: str, sent: set[str] | None = None,
                           done: asyncio.Event | None = None) -> None:
        """While a backlog of messages is extracted oldest first (embedding deferred until it is done), embed
        the texts its newest messages' memories will have, newest first, into the embedding cache: the
        memories of the newest messages, which matter most to the next recall, then find their vectors
        ready. Goes down to where the extraction has got to (or AHEAD_MAX_MESSAGES), and back to the
        newest when more messages arrive; the cache is keyed by text, so a text met again costs nothing and
        one that turns out different (an edit meanwhile) only its vector. Heuristic memories only (no LLM:
        their texts depend on the message alone). `sent`: the texts sent before in this processing run;
        `done`: once set, it stops before its next model call."""
        def position(conn):   # (last message extracted, newest message)
            processed, stored = _position(conn, chat_id)
            return processed - 1, stored - 1

        processed, newest = await self.store.read(position)
        if newest - processed < AHEAD_MIN_MESSAGES:
            return
        chunk_tokens = self.settings.get("extract.chunk_tokens", chat_id)
        high, sent = newest, set() if sent is None else sent
        try:
            while True:
                processed, now_newest = await self.store.read(position)
                if now_newest > newest:   # more messages arrived: theirs first
                    high = newest = now_newest
                low = max(processed + 1, high - AHEAD_STEP_MESSAGES + 1, newest - AHEAD_MAX_MESSAGES + 1)
                if low > high:
                    return
                messages, speakers = await self.store.read(
                    lambda conn: (load_messages(conn, chat_id, low, high), speakers_before(conn, chat_id, low)))
                newest_first = event_texts(messages[::-1], chunk_tokens=chunk_tokens, speakers=speakers)
                texts = [t for t in dict.fromkeys(newest_first) if t not in sent]
                made = 0
                for i in range(0, len(texts), AHEAD_TEXTS_PER_CALL):
                    if done is not None and done.is_set():
                        break
                    part = texts[i:i + AHEAD_TEXTS_PER_CALL]
                    await self.embedding.embeddings.embed_texts(part)
                    sent.update(part)
                    made += len(part)
                await self.progress.made_ahead(chat_id, made)   # the time left counts them as made
                if made < len(texts):
                    return
                high = low - 1
        except StbmeError as exc:   # the embedder fails: the embedding after the extraction reports it
            log.info("embedding ahead for chat %r stopped: %s", chat_id, exc.message)
        except Exception:   # work ahead is optional: it must never fail the chat's processing
            log.exception("embedding ahead for chat %r failed", chat_id)

    async def _redo_degraded(self, chat_id: str) -> bool:
        """Batches made while the LLM was down are undone (exactly, from the journal) and processed
        again, now that it may answer. True if there was something to redo."""
        if self.settings.get("llm.mode", chat_id) == "none" or not self.memory_llm.health.redo_due():
            return False
        start = await self._undo_from(chat_id, "degraded_from", "redo without LLM")
        if start is None:
            return False
        self.live.notice("info", f"the memory LLM answers again: redoing memories from message {start}", chat_id)
        return True

    async def _undo_from(self, chat_id: str, column: str, reason: str) -> int | None:
        """Undo every memory change from the message the chat's `column` names (degraded_from or
        unfinished_from), if set. Returns that message index."""
        def undo(conn):
            row = chat_row(conn, chat_id)
            if row is None or row[column] is None:
                return None
            result, _ = undo_memories_from(conn, chat_id, row[column], reason=reason)
            return row[column], result.touched_nodes

        undone = await self.store.write(undo)
        if undone is None:
            return None
        start, touched = undone
        await self.embedding.indexes.apply(chat_id, touched)
        return start

    async def wake_degraded(self) -> None:
        """When the LLM's retry time has come, queue the chats with batches made without it."""
        if not self.memory_llm.health.redo_due() or self.settings["llm.mode"] == "none":
            return
        if await self.store.write(queue_degraded_chats):
            self.wake_worker()

    def resume_parked(self) -> None:
        """Jobs parked by a dead LLM run again, and batches made without it are redone: on a new LLM
        configuration, or when the extension (the relay) connects."""
        self.memory_llm.health.reset()

        def requeue(conn):
            requeue_parked(conn)
            queue_degraded_chats(conn)

        self.store.write_nowait(requeue)
        self.wake_worker()

    async def on_settings(self, saved: dict, previous: dict) -> None:
        """Settings listener: new llm.* settings swap the client and resume parked work."""
        if any(k.startswith("llm.") for k in saved):
            await self.memory_llm.reconfigure()
            self.resume_parked()


def _position(conn, chat_id: str) -> tuple[int, int]:
    """(messages processed, messages stored) of a chat."""
    row = chat_row(conn, chat_id)
    return (row["processed_upto"] + 1 if row else 0), message_count(conn, chat_id)


async def _stop(task: asyncio.Task | None) -> None:
    """Cancel the work ahead if it is still under way (the processing itself failed or was cancelled), and
    wait until it has stopped."""
    if task is not None and not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
