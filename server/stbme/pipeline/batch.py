"""The batch pipeline: how pending chat messages become memories, as a list of stages.

A batch is a contiguous range of messages [start, end]. Each stage may
  - `prepare(ctx)`: async work outside any transaction (LLM calls), reading `ctx.messages`;
  - `apply(ctx, cs)`: synchronous writes inside the batch's one transaction (journaled with the batch's
    message range, so a rollback undoes them exactly);
  - `after(ctx)`: async work once the batch is committed and embedded (A-MEM evolution, maintenance);
    its writes go through `await ctx.write(fn)`, journaled with the same message range.
If the chat changed while a stage was preparing (a rollback bumped the chat's revision), the batch is
dropped and started again from the new state: nothing stale is written.

A batch is one recoverable unit. Its commit marks it unfinished (`chats.unfinished_from`); only when its
memories are embedded and every `after` has run is the mark cleared. A crash, a kill or a failure in between
leaves the mark, and the chat's next processing undoes the batch exactly (journal) and runs it again. An LLM
task a stage had to skip (the LLM failed) marks the batch degraded: it is redone once the LLM answers again.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from typing import Any, Awaitable, Callable, Protocol

from ..config import Settings
from ..graph.changes import ChangeSet
from ..live import LiveHub
from ..llm.base import LLMError, failure_kind
from ..llm.health import LLMHealth
from ..store import Store
from ..store.queries import message_count
from .sync import Message, load_messages

MAX_BATCH_MESSAGES = 16
# Without LLM stages (heuristic mode) a backlog's groups merge into batches of up to this many messages:
# each batch has a fixed cost (its reads, two transactions, the index update), and at 16 a first ingest
# of 5,000 messages spent 6.0 s making them keyword-searchable instead of 4.3 s at 64 (in process, with a
# fake embedder; scripts/bench_ingest.py over HTTP: 17.7 s against 12.6). Each group is still
# journaled as its own. At most the window _read_batch loads (4 * MAX_BATCH_MESSAGES).
MERGED_BATCH_MESSAGES = 64
# A batch ends at a reply: every message gets its own memories at once. How often the memory LLM reads the
# new messages (extract.every replies) is the extraction stage's own decision (pipeline/extract.py `_due`).
REPLIES_PER_BATCH = 1
IndexChanges = Callable[[str, set[str]], Awaitable[None]]


class Stage(Protocol):
    name: str

    async def prepare(self, ctx: "BatchContext") -> None: ...

    def apply(self, ctx: "BatchContext", cs: ChangeSet) -> None: ...

    async def after(self, ctx: "BatchContext") -> None: ...


class BaseStage:
    """Stages override only what they need."""

    name = "stage"
    needs_llm = False   # True: skipped (and the batch marked degraded) while the LLM is unreachable

    async def prepare(self, ctx: "BatchContext") -> None:
        return None

    def apply(self, ctx: "BatchContext", cs: ChangeSet) -> None:
        return None

    async def after(self, ctx: "BatchContext") -> None:
        return None


class StaleBatch(Exception):
    """The chat changed under the batch (rollback): drop it and start again."""


@dataclasses.dataclass
class BatchContext:
    chat_id: str
    start: int
    end: int
    messages: list[Message]           # the batch's messages, in order
    revision: int                     # the chat's revision when the batch was read
    total_messages: int
    setting: Callable[[str], Any]     # the chat's effective setting
    runner: "BatchRunner"
    data: dict[str, Any] = dataclasses.field(default_factory=dict)   # stage-to-stage hand-over
    degraded: str | None = None      # why the LLM stages were skipped, if they were
    # First message the batch's changes derive from: `start`, or earlier when the LLM extraction read the
    # messages since its previous run (journaled so, an edit of any of them undoes this batch).
    journal_from: int | None = None
    created: list[str] = dataclasses.field(default_factory=list)     # node ids the batch created
    touched: set[str] = dataclasses.field(default_factory=set)       # node ids the batch wrote
    # The groups of `extract.every` assistant messages the batch holds, on the chat's fixed grid (heuristic
    # mode merges several when many are pending; empty: the batch is one unit, `msg_range`).
    groups: list[tuple[int, int]] = dataclasses.field(default_factory=list)

    @property
    def msg_range(self) -> tuple[int, int]:
        """The message range the batch's changes are journaled with."""
        return (self.start if self.journal_from is None else min(self.journal_from, self.start), self.end)

    def range_of(self, index: int) -> tuple[int, int]:
        """The range a change derived from message `index` is journaled with: its group, so a batch of
        merged groups journals exactly what one batch per group would (the same rollbacks, the same
        `derived_from`), however many groups were pending when it was read."""
        if self.journal_from is None:
            for group in self.groups:
                if group[0] <= index <= group[1]:
                    return group
        return self.msg_range

    def skip_llm(self, error: LLMError) -> None:
        """An LLM task of this batch failed and was skipped: the batch will be redone when the LLM answers."""
        self.degraded = self.degraded or error.message
        self.runner.llm_health.failed(error)

    async def write(self, fn: Callable[[ChangeSet], Any], reason: str,
                    msg_range: tuple[int, int] | None = None) -> Any:
        """A journaled write after the batch committed (e.g. evolution), dropped if a rollback undid the
        batch meanwhile. (Not the revision: an edit of a later, unprocessed message leaves the batch valid.)
        `msg_range`: the part of the batch it derives from (`range_of`), else the whole batch."""
        def run(conn: sqlite3.Connection):
            _check_committed(conn, self)
            cs = ChangeSet(conn, self.chat_id, reason=reason, msg_range=msg_range or self.msg_range)
            result = fn(cs)
            return result, cs.touched_nodes

        result, touched = await self.runner.store.write(run)
        self.touched |= touched
        await self.runner.index_changes(self.chat_id, touched)
        return result


def _check_current(conn: sqlite3.Connection, ctx: BatchContext) -> None:
    row = conn.execute("SELECT revision, processed_upto FROM chats WHERE chat_id = ?", (ctx.chat_id,)).fetchone()
    if row is None or row["revision"] != ctx.revision or row["processed_upto"] != ctx.start - 1:
        raise StaleBatch()


def _check_committed(conn: sqlite3.Connection, ctx: BatchContext) -> None:
    row = conn.execute("SELECT processed_upto FROM chats WHERE chat_id = ?", (ctx.chat_id,)).fetchone()
    if row is None or row["processed_upto"] < ctx.end:
        raise StaleBatch()


def _finish(conn: sqlite3.Connection, ctx: BatchContext) -> None:
    """The batch's follow-up work is done: clear its unfinished mark; a skipped LLM task marks it degraded."""
    row = conn.execute("SELECT unfinished_from FROM chats WHERE chat_id = ?", (ctx.chat_id,)).fetchone()
    if row is None or row["unfinished_from"] != ctx.start:
        return  # undone meanwhile
    conn.execute("UPDATE chats SET unfinished_from = NULL WHERE chat_id = ?", (ctx.chat_id,))
    if ctx.degraded:
        conn.execute("UPDATE chats SET degraded_from = coalesce(min(degraded_from, ?), ?) WHERE chat_id = ?",
                     (ctx.start, ctx.start, ctx.chat_id))


def batch_end(messages: list[Message], every: int, *, single_group: bool = False,
              cut: Callable[[Message], bool] | None = None, most: int = MAX_BATCH_MESSAGES) -> int | None:
    """Last index of the next batch: through the `every`-th pending assistant message (several groups
    at once when many are pending, up to `most` messages). None: not enough yet.

    `single_group`: exactly one group, so batch boundaries depend on the messages alone, never on how
    many were pending (LLM stages need this: a replay after a rollback must cut the same batches).
    `cut(message)`: the group holding such a message ends the batch (its `after` work must come before
    later groups are read, as when each group is its own batch)."""
    end, cut_here, seen = None, False, 0
    for count, msg in enumerate(messages, 1):
        cut_here = cut_here or (cut is not None and cut(msg))
        if msg.role == "assistant":
            seen += 1
            if seen % every == 0:
                if end is not None and count > most:
                    break
                end = msg.index
                if single_group or cut_here:
                    break
    return end


def _group_start(conn: sqlite3.Connection, chat_id: str, start: int) -> int:
    """The first message of the group `start` falls in: a group ends at each reply (REPLIES_PER_BATCH), so
    it starts after the last reply before `start` (processing restarts inside a group after some rollbacks)."""
    row = conn.execute("SELECT idx FROM messages WHERE chat_id = ? AND idx < ? AND role = 'assistant'"
                       " ORDER BY idx DESC LIMIT 1", (chat_id, start)).fetchone()
    return row[0] + 1 if row else 0


def _groups(messages: list[Message], every: int, first: int, end: int) -> list[tuple[int, int]]:
    """The groups of the batch through `end`: each ends at an `every`-th assistant message."""
    groups, start, seen = [], first, 0
    for msg in messages:
        if msg.index > end:
            break
        if msg.role == "assistant":
            seen += 1
            if seen % every == 0:
                groups.append((start, msg.index))
                start = msg.index + 1
    return groups


def _read_batch(conn: sqlite3.Connection, chat_id: str, every: int, end_fn=None, cut=None):
    row = conn.execute("SELECT processed_upto, revision, process_through FROM chats WHERE chat_id = ?",
                       (chat_id,)).fetchone()
    if row is None:
        return None
    start = row["processed_upto"] + 1
    window = MAX_BATCH_MESSAGES * 4
    messages = load_messages(conn, chat_id, start, start + window)
    groups: list[tuple[int, int]] = []
    if end_fn:
        end = end_fn(messages, every)
    else:  # merged groups, each journaled as its own (BatchContext.range_of)
        end = batch_end(messages, every, cut=cut, most=MERGED_BATCH_MESSAGES)
        groups = _groups(messages, every, _group_start(conn, chat_id, start), end) if end is not None else []
    if end is None and len(messages) > window:
        # A whole window of user messages and no reply (an imported two-person chat, a long monologue): they
        # are processed in batches of their own rather than wait for a reply forever.
        end = messages[MAX_BATCH_MESSAGES - 1].index
    if end is None and messages and row["process_through"] >= start:
        # The chat's last messages, with no reply to end their batch yet, asked for (a whole chat brought
        # in, "remember this chat's history now"): a batch of what there is.
        end = min(row["process_through"], messages[-1].index, start + MAX_BATCH_MESSAGES - 1)
    if end is None:
        return None
    total = message_count(conn, chat_id)
    return start, end, [m for m in messages if m.index <= end], row["revision"], total, groups


class BatchRunner:
    """Runs a chat's next batch through the stages: prepare (LLM calls, outside any transaction), apply
    (one journaled transaction), index, after (journaled follow-up writes)."""

    def __init__(self, store: Store, settings: Settings, *, index_changes: IndexChanges, llm_health: LLMHealth,
                 live: LiveHub):
        self.store = store
        self.settings = settings
        self.index_changes = index_changes   # after a write: update the caches, embed what lacks a vector
        self.llm_health = llm_health
        self.live = live

    async def run_next(self, chat_id: str, stages: list[Stage]) -> BatchContext | None:
        """Run the chat's next batch through every stage. None when there is nothing to do yet."""
        setting = lambda name: self.settings.get(name, chat_id)  # noqa: E731
        # A stage may choose the batch's end (LLM extraction: one group, or earlier by the smart trigger).
        end_fn = next((getattr(s, "batch_end") for s in stages if hasattr(s, "batch_end")), None)
        end_fn = end_fn and (lambda messages, every, fn=end_fn: fn(messages, every, setting))
        cuts = [getattr(s, "cuts_batch") for s in stages if hasattr(s, "cuts_batch")]
        cut = (lambda msg: any(fn(msg, setting) for fn in cuts)) if cuts else None
        while True:
            picked = await self.store.read(lambda conn: _read_batch(conn, chat_id, REPLIES_PER_BATCH, end_fn, cut))
            if picked is None:
                return None
            *picked, groups = picked
            ctx = BatchContext(chat_id, *picked, setting=setting, runner=self, groups=groups)
            active = await self._prepare(ctx, stages)

            def commit(conn: sqlite3.Connection):
                _check_current(conn, ctx)
                cs = ChangeSet(conn, chat_id, reason="batch", msg_range=ctx.msg_range)
                for stage in active:
                    cs.reason, cs.msg_range = stage.name, ctx.msg_range
                    stage.apply(ctx, cs)
                conn.execute("UPDATE chats SET processed_upto = ?, unfinished_from = ?, updated_at = ?"
                             " WHERE chat_id = ?", (ctx.end, ctx.start, time.time(), chat_id))
                return cs.touched_nodes, cs.created_nodes

            try:
                touched, created = await self.store.write(commit)
            except StaleBatch:
                continue  # the chat changed while stages were preparing: read it again
            ctx.touched |= touched
            ctx.created = created
            await self.index_changes(chat_id, touched)
            for stage in active:
                try:
                    await stage.after(ctx)
                except StaleBatch:
                    return ctx  # a rollback undid the batch meanwhile (and its unfinished mark)
            await self.store.write(lambda conn: _finish(conn, ctx))
            return ctx

    async def _prepare(self, ctx: BatchContext, stages: list[Stage]) -> list[Stage]:
        """Prepare every stage; the stages that will run. When the LLM is unreachable (after its own
        retries) and `llm.degrade_when_down` is on, the batch goes on without the LLM stages: the chat keeps
        its heuristic memories and directives, and the batch is redone once the LLM answers again."""
        degrade = ctx.setting("llm.degrade_when_down")
        if degrade and self.llm_health.down():
            # Do not wait on it again for every batch.
            what, ctx.degraded = "the memory LLM is paused", "it failed moments ago; it is tried again later"
        else:
            try:
                for stage in stages:
                    await stage.prepare(ctx)
                return stages
            except LLMError as exc:
                if not degrade:
                    raise
                self.llm_health.failed(exc)
                what, ctx.degraded = failure_kind(exc), exc.message
        active = [s for s in stages if not getattr(s, "needs_llm", False)]
        ctx.data.clear()
        ctx.journal_from = None
        for stage in active:
            await stage.prepare(ctx)
        self.live.notice("warning", f"{what} ({ctx.degraded}); messages {ctx.start}-{ctx.end} got memories "
                         "without it, and will be redone when it works again", ctx.chat_id)
        return active
