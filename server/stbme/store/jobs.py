"""The persisted job queue: pending work survives a crash and resumes on the next start."""

from __future__ import annotations

import enum
import sqlite3
import time
from typing import Callable

import orjson


class JobState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"   # parked after its last attempt; requeued when the cause may be gone
    CANCELLED = "cancelled"  # stopped by its owner (Authority jobs); never claimed again unless requeued


class JobKind(enum.StrEnum):
    PROCESS = "process"   # turn a chat's pending messages into memories
    REINDEX = "reindex"   # rebuild a chat's indexes from the store


OPEN_STATES = (JobState.PENDING, JobState.RUNNING)


def enqueue_job(conn: sqlite3.Connection, chat_id: str, kind: str, payload: dict | None = None) -> int:
    now = time.time()
    return conn.execute(
        "INSERT INTO jobs (chat_id, kind, state, payload, created_at, updated_at) VALUES (?,?,?,?,?,?)"
        " RETURNING id", (chat_id, str(kind), JobState.PENDING, orjson.dumps(payload or {}).decode(), now,
                          now)).fetchone()[0]


def has_open_job(conn: sqlite3.Connection, chat_id: str, kind: str = JobKind.PROCESS,
                 states: tuple[JobState, ...] = OPEN_STATES) -> bool:
    return conn.execute(f"SELECT 1 FROM jobs WHERE chat_id = ? AND kind = ? AND state IN"
                        f" ({','.join('?' * len(states))})", (chat_id, str(kind), *states)).fetchone() is not None


def _kind_filter(prefix: str | None, exclude: tuple[str, ...]) -> tuple[str, list]:
    """SQL for "kind starts with `prefix` and with none of `exclude`" (a range test: no LIKE escaping)."""
    sql, params = "", []
    if prefix is not None:
        sql += " AND kind >= ? AND kind < ?"
        params += [prefix, prefix + "\U0010ffff"]
    for other in exclude:
        sql += " AND NOT (kind >= ? AND kind < ?)"
        params += [other, other + "\U0010ffff"]
    return sql, params


def claim_next_job(conn: sqlite3.Connection, busy_chats: set[str], *, prefix: str | None = None,
                   exclude: tuple[str, ...] = (), rank: Callable[[str], float] | None = None) -> dict | None:
    """Mark a pending job of a chat nobody is working on as running and return it: the oldest, or with
    `rank(chat)` the oldest job of the chat ranked lowest (round robin between owners). Only kinds that
    start with `prefix` and with none of `exclude` (the worker's lanes)."""
    kinds, params = _kind_filter(prefix, exclude)
    heads = conn.execute(f"SELECT chat_id, min(id) FROM jobs WHERE state = ?{kinds} GROUP BY chat_id",
                         (JobState.PENDING, *params)).fetchall()
    heads = [(chat, job_id) for chat, job_id in heads if chat not in busy_chats]
    if not heads:
        return None
    _, job_id = min(heads, key=(lambda h: (rank(h[0]), h[1])) if rank else (lambda h: h[1]))
    conn.execute("UPDATE jobs SET state = ?, attempts = attempts + 1, updated_at = ? WHERE id = ?",
                 (JobState.RUNNING, time.time(), job_id))
    job = dict(conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone())
    job["payload"] = orjson.loads(job["payload"])
    return job


def open_jobs_of(conn: sqlite3.Connection, chat_id: str) -> int:
    """Pending and running jobs of a chat (or of an Authority extension's pseudo chat)."""
    return conn.execute("SELECT count(*) FROM jobs WHERE chat_id = ? AND state IN (?, ?)",
                        (chat_id, *OPEN_STATES)).fetchone()[0]


def finish_job(conn: sqlite3.Connection, job_id: int, state: JobState, error: str | None = None) -> None:
    """Record the outcome of a running job. A job no longer running (cancelled meanwhile, or settled by
    its own handler) keeps the state it has."""
    conn.execute("UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ? AND state = ?",
                 (state, error, time.time(), job_id, JobState.RUNNING))


def requeue_interrupted(conn: sqlite3.Connection) -> int:
    """After a crash: jobs left running go back to pending."""
    return conn.execute("UPDATE jobs SET state = ?, updated_at = ? WHERE state = ?",
                        (JobState.PENDING, time.time(), JobState.RUNNING)).rowcount


def requeue_parked(conn: sqlite3.Connection, kind: str = JobKind.PROCESS) -> int:
    """Parked jobs get a fresh set of attempts (the LLM configuration changed, the relay connected)."""
    return conn.execute("UPDATE jobs SET state = ?, attempts = 0, updated_at = ? WHERE state = ? AND kind = ?",
                        (JobState.PENDING, time.time(), JobState.FAILED, str(kind))).rowcount


def queue_depth(conn: sqlite3.Connection) -> dict[str, int]:
    counts = dict(conn.execute("SELECT state, count(*) FROM jobs WHERE state IN (?,?,?) GROUP BY state",
                               (JobState.PENDING, JobState.RUNNING, JobState.FAILED)).fetchall())
    return {str(s): counts.get(s, 0) for s in (JobState.PENDING, JobState.RUNNING, JobState.FAILED)}


def chat_jobs(conn: sqlite3.Connection, chat_id: str) -> dict:
    """A chat's open and parked jobs, and the last error any of its jobs had."""
    counts = dict(conn.execute("SELECT state, count(*) FROM jobs WHERE chat_id = ? AND state IN (?,?,?)"
                               " GROUP BY state", (chat_id, JobState.PENDING, JobState.RUNNING,
                                                   JobState.FAILED)).fetchall())
    last_error = conn.execute("SELECT error FROM jobs WHERE chat_id = ? AND error IS NOT NULL"
                              " ORDER BY id DESC LIMIT 1", (chat_id,)).fetchone()
    return {"pending": counts.get(JobState.PENDING, 0) + counts.get(JobState.RUNNING, 0),
            "failed": counts.get(JobState.FAILED, 0), "last_error": last_error[0] if last_error else None}


def prune_done_jobs(conn: sqlite3.Connection, keep_seconds: float = 86400) -> None:
    conn.execute("DELETE FROM jobs WHERE state = ? AND updated_at < ?", (JobState.DONE, time.time() - keep_seconds))


def queue_degraded_chats(conn: sqlite3.Connection) -> list[str]:
    """Queue processing for chats with batches made while the LLM was down (unless already queued)."""
    chats = [r[0] for r in conn.execute(
        "SELECT chat_id FROM chats WHERE degraded_from IS NOT NULL AND chat_id NOT IN"
        " (SELECT chat_id FROM jobs WHERE state = ? AND kind = ?)", (JobState.PENDING, JobKind.PROCESS))]
    for chat in chats:
        enqueue_job(conn, chat, JobKind.PROCESS)
    return chats
