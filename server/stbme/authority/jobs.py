"""Authority jobs on the sidecar's own persisted job queue.

An Authority job is a row of the sidecar's `jobs` table with kind `authority.<type>` and the pseudo chat
`authority:<extension key>`. They run in the worker's own Authority lane (LANE_SLOTS at once, round robin
between extensions, one extension's jobs one at a time), so chat processing never waits behind them; an
extension may have MAX_OPEN_JOBS queued or running, and no job runs longer than MAX_RUN_MS. Its
Authority fields (type, input, idempotency key, progress, result, attempt limit) sit in the row's payload.
The sidecar's worker claims it like any job and hands it to `run()`, which settles it itself: completed,
failed, or left cancelled when `cancel()` came first. States map to Authority statuses as
pending -> queued, running, done -> completed, failed, cancelled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any, Awaitable, Callable

import orjson

from ..errors import BadRequest, Conflict, NotFound, StbmeError
from ..store import Store
from ..store.jobs import JobState, enqueue_job, open_jobs_of
from . import wire
from .sessions import Session

log = logging.getLogger("stbme.authority.jobs")
KIND_PREFIX = "authority."
STATUS = {JobState.PENDING: "queued", JobState.RUNNING: "running", JobState.DONE: "completed",
          JobState.FAILED: "failed", JobState.CANCELLED: "cancelled"}
MAX_TIMEOUT_MS = 3_600_000
MAX_ATTEMPTS = 3          # the sidecar worker's own limit; past it a job is settled here, never by the worker
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_DELAY_MS = 60_000
MAX_OPEN_JOBS = 8          # queued or running, per extension (ST-BME keeps one or two)
MAX_RUN_MS = 15 * 60_000   # the longest any job runs, whatever its timeoutMs (0 = this)
LANE_SLOTS = 4             # Authority jobs running at once (each extension one at a time)


@dataclasses.dataclass
class JobContext:
    """What a job handler gets: its input, its extension, a progress reporter and a cancel flag."""
    job_id: int
    extension_id: str
    input: dict
    cancelled: asyncio.Event
    progress: Callable[[float], None]


Handler = Callable[[JobContext], Awaitable[dict]]


def _owner(session: Session) -> str:
    return f"authority:{session.extension_key}"



def record(row) -> dict:
    """A jobs row as an Authority job record."""
    meta = orjson.loads(row["payload"])
    status = STATUS.get(row["state"], row["state"])
    return {"id": str(row["id"]), "type": meta.get("type"), "kind": meta.get("type"), "status": status,
            "progress": 1.0 if status == "completed" else meta.get("progress", 0.0), "error": row["error"],
            "idempotencyKey": meta.get("idempotencyKey"), "queue": "stbme", "attempts": row["attempts"],
            "maxAttempts": meta.get("maxAttempts", 1), "timeoutMs": meta.get("timeoutMs"),
            "payload": meta.get("input", {}), "result": meta.get("result"),
            "createdAt": wire.iso_time(row["created_at"]), "updatedAt": wire.iso_time(row["updated_at"])}


async def delay(ctx: JobContext) -> dict:
    """The `delay` job: wait durationMs (at most a minute), then answer with the given message."""
    duration = wire.integer(ctx.input.get("durationMs"), "payload.durationMs", lo=0, hi=MAX_DELAY_MS, default=0)
    started = time.monotonic()
    try:
        await asyncio.wait_for(ctx.cancelled.wait(), duration / 1000)
    except TimeoutError:
        pass
    return {"message": str(ctx.input.get("message") or ""),
            "waitedMs": round((time.monotonic() - started) * 1000)}


class AuthorityJobs:
    def __init__(self, store: Store, wake: Callable[[], None], handlers: dict[str, Handler]):
        self.store = store
        self.wake = wake
        self.handlers = handlers
        self._running: dict[int, asyncio.Event] = {}

    @property
    def types(self) -> list[str]:
        return sorted(self.handlers)

    async def create(self, session: Session, body: Any) -> dict:
        body = wire.body_object(body)
        type_ = wire.text(body.get("type", body.get("kind")), "type", max_chars=128)
        if type_ not in self.handlers:
            raise BadRequest(f"job type {type_!r} is not supported here; supported: {', '.join(self.types)}",
                             field="type")
        payload = wire.optional_object(body.get("payload"), "payload")
        if len(orjson.dumps(payload)) > MAX_PAYLOAD_BYTES:
            raise BadRequest(f"'payload' is larger than {MAX_PAYLOAD_BYTES} bytes", field="payload")
        key = body.get("idempotencyKey") or payload.get("idempotencyKey")
        key = wire.text(key, "idempotencyKey") if key else None
        meta = {"extension": session.extension_id, "type": type_, "input": payload, "idempotencyKey": key,
                "timeoutMs": wire.integer(body.get("timeoutMs"), "timeoutMs", lo=0, hi=MAX_TIMEOUT_MS, default=0),
                "maxAttempts": wire.integer(body.get("maxAttempts"), "maxAttempts", lo=1, hi=1000, default=1),
                "chatId": payload.get("chatId") if isinstance(payload.get("chatId"), str) else None,
                "progress": 0.0, "result": None}
        owner = _owner(session)

        def write(conn):
            if key:  # the same key while the first job is alive or done: that job, not a second one
                row = conn.execute("SELECT * FROM jobs WHERE chat_id = ? AND json_extract(payload, '$.idempotencyKey')"
                                   " = ? AND state IN (?,?,?) ORDER BY id DESC LIMIT 1",
                                   (owner, key, JobState.PENDING, JobState.RUNNING, JobState.DONE)).fetchone()
                if row is not None:
                    return row
            if open_jobs_of(conn, owner) >= MAX_OPEN_JOBS:
                raise StbmeError(f"this extension already has {MAX_OPEN_JOBS} jobs queued or running; wait for one "
                                 "to finish (or cancel one) before creating another", status=429, field="type")
            job_id = enqueue_job(conn, owner, KIND_PREFIX + type_, meta)
            return conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()

        row = await self.store.write(write)
        self.wake()
        return {"job": record(row)}

    async def _row(self, session: Session, job_id: str):
        if not isinstance(job_id, str) or not job_id.isdigit() or len(job_id) > 18:
            raise NotFound(f"no job {job_id!r}", field="id")
        row = await self.store.read(lambda conn: conn.execute(
            "SELECT * FROM jobs WHERE id = ? AND chat_id = ?", (int(job_id), _owner(session))).fetchone())
        if row is None:
            raise NotFound(f"no job {job_id!r}", field="id")
        return row

    async def get(self, session: Session, job_id: str) -> dict:
        return {"job": record(await self._row(session, job_id))}

    async def list(self, session: Session, body: Any) -> dict:
        body = wire.body_object(body)
        page = wire.optional_object(body.get("page"), "page")
        limit = wire.integer(page.get("limit"), "page.limit", lo=1, hi=100, default=20)
        cursor = page.get("cursor")
        if cursor not in (None, "") and not (isinstance(cursor, str) and cursor.isdigit()):
            raise BadRequest("'page.cursor' is not a cursor from jobs/list", field="page.cursor")
        filters = wire.optional_object(body.get("filter"), "filter")
        sql = "SELECT * FROM jobs WHERE chat_id = ? AND id < ?"
        params: list = [_owner(session), int(cursor) if cursor else 2 ** 62]
        for key, column in (("chatId", "$.chatId"), ("type", "$.type")):
            if isinstance(filters.get(key), str):
                sql += f" AND json_extract(payload, '{column}') = ?"
                params.append(filters[key])
        if isinstance(filters.get("status"), str):
            states = [s for s, status in STATUS.items() if status == filters["status"]]
            sql += f" AND state IN ({','.join('?' * len(states)) or 'NULL'})"
            params += states
        rows = await self.store.read(lambda conn: conn.execute(
            sql + " ORDER BY id DESC LIMIT ?", (*params, limit + 1)).fetchall())
        more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = str(rows[-1]["id"]) if more else ""
        return {"jobs": [record(r) for r in rows], "page": {"hasMore": more, "nextCursor": next_cursor},
                "hasMore": more, "nextCursor": next_cursor}

    async def cancel(self, session: Session, job_id: str) -> dict:
        row = await self._row(session, job_id)

        def write(conn):
            conn.execute("UPDATE jobs SET state = ?, updated_at = ? WHERE id = ? AND state IN (?,?)",
                         (JobState.CANCELLED, time.time(), row["id"], JobState.PENDING, JobState.RUNNING))
            return conn.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone()

        row = await self.store.write(write)
        event = self._running.get(row["id"])
        if event is not None:
            event.set()  # the handler stops at its next check; its outcome no longer changes the state
        return {"job": record(row)}

    async def requeue(self, session: Session, job_id: str) -> dict:
        row = await self._row(session, job_id)
        if row["state"] in (JobState.PENDING, JobState.RUNNING):
            raise Conflict(f"job {job_id} is still {STATUS[row['state']]}; requeue a finished job", field="id")

        def write(conn):
            conn.execute("UPDATE jobs SET state = ?, attempts = 0, error = NULL, updated_at = ?,"
                         " payload = json_set(payload, '$.progress', 0.0, '$.result', json('null'))"
                         " WHERE id = ?", (JobState.PENDING, time.time(), row["id"]))
            return conn.execute("SELECT * FROM jobs WHERE id = ?", (row["id"],)).fetchone()

        row = await self.store.write(write)
        self.wake()
        return {"job": record(row)}

    # -- the worker's side -------------------------------------------------------------------------------
    async def run(self, job: dict) -> None:
        """Run a claimed job (called by the sidecar's worker) and settle its state. Raises only to ask the
        worker for another attempt (with its backoff)."""
        meta = job["payload"]
        handler = self.handlers.get(meta.get("type"))
        if handler is None:
            await self._settle(job["id"], JobState.FAILED, f"job type {meta.get('type')!r} is not supported")
            return
        cancelled = self._running[job["id"]] = asyncio.Event()
        ctx = JobContext(job["id"], meta.get("extension", ""), meta.get("input") or {}, cancelled,
                         lambda fraction: self._progress(job["id"], fraction))
        timeout_ms = min(meta.get("timeoutMs") or MAX_RUN_MS, MAX_RUN_MS)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                result = await handler(ctx)
        except TimeoutError:
            await self._settle(job["id"], JobState.FAILED, f"timed out after {timeout_ms} ms")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = exc.message if isinstance(exc, StbmeError) else f"{type(exc).__name__}: {exc}"
            if job["attempts"] < min(meta.get("maxAttempts", 1), MAX_ATTEMPTS):
                raise
            if not isinstance(exc, StbmeError):
                log.exception("Authority job %s (%s) failed", job["id"], meta.get("type"))
            await self._settle(job["id"], JobState.FAILED, message)
        else:
            await self._settle(job["id"], JobState.DONE, None, result)
        finally:
            self._running.pop(job["id"], None)

    async def _settle(self, job_id: int, state: JobState, error: str | None, result: Any = None) -> None:
        await self.store.write(lambda conn: conn.execute(
            "UPDATE jobs SET state = ?, error = ?, updated_at = ?, payload = json_set(payload, '$.result', json(?),"
            " '$.progress', ?) WHERE id = ? AND state = ?",
            (state, error, time.time(), orjson.dumps(result).decode(), 1.0 if state == JobState.DONE else 0.0, job_id,
             JobState.RUNNING)))

    def _progress(self, job_id: int, fraction: float) -> None:
        self.store.write_nowait(lambda conn: conn.execute(
            "UPDATE jobs SET payload = json_set(payload, '$.progress', ?), updated_at = ? WHERE id = ? AND state = ?",
            (max(0.0, min(1.0, float(fraction))), time.time(), job_id, JobState.RUNNING)))
