"""The persisted job queue: pending work survives a crash and resumes on the next start."""

from __future__ import annotations

import sqlite3
import time

import orjson


def enqueue_job(conn: sqlite3.Connection, chat_id: str, kind: str, payload: dict | None = None) -> int:
    now = time.time()
    return conn.execute(
        "INSERT INTO jobs (chat_id, kind, state, payload, created_at, updated_at) VALUES (?,?,?,?,?,?)"
        " RETURNING id", (chat_id, kind, "pending", orjson.dumps(payload or {}).decode(), now, now)).fetchone()[0]


def claim_next_job(conn: sqlite3.Connection, busy_chats: set[str]) -> dict | None:
    """Mark the oldest pending job of a chat nobody is working on as running and return it."""
    rows = conn.execute("SELECT * FROM jobs WHERE state = 'pending' ORDER BY id LIMIT 50").fetchall()
    for row in rows:
        if row["chat_id"] in busy_chats:
            continue
        conn.execute("UPDATE jobs SET state = 'running', attempts = attempts + 1, updated_at = ? WHERE id = ?",
                     (time.time(), row["id"]))
        job = dict(row)
        job["payload"] = orjson.loads(job["payload"])
        job["attempts"] += 1
        return job
    return None


def finish_job(conn: sqlite3.Connection, job_id: int, state: str, error: str | None = None) -> None:
    conn.execute("UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                 (state, error, time.time(), job_id))


def requeue_interrupted(conn: sqlite3.Connection) -> int:
    """After a crash: jobs left 'running' go back to 'pending'."""
    return conn.execute("UPDATE jobs SET state = 'pending', updated_at = ? WHERE state = 'running'",
                        (time.time(),)).rowcount


def queue_depth(conn: sqlite3.Connection) -> dict[str, int]:
    counts = dict(conn.execute("SELECT state, count(*) FROM jobs WHERE state IN ('pending','running','failed')"
                               " GROUP BY state").fetchall())
    return {s: counts.get(s, 0) for s in ("pending", "running", "failed")}


def prune_done_jobs(conn: sqlite3.Connection, keep_seconds: float = 86400) -> None:
    conn.execute("DELETE FROM jobs WHERE state = 'done' AND updated_at < ?", (time.time() - keep_seconds,))
