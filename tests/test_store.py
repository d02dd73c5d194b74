"""The SQLite store: migrations, atomic writes, readers, durability after kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from stbme.errors import StoreClosed
from stbme.store import Store
from stbme.store.migrations import MIGRATIONS, migrate, schema_version


async def test_migrations_create_every_table(tmp_path):
    store = Store.open(tmp_path / "db.sqlite3")
    tables = await store.read(lambda c: {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")})
    assert {"chats", "messages", "nodes", "edges", "journal", "events", "jobs", "settings", "embed_cache",
            "mentions", "migrations"} <= tables
    assert await store.read(schema_version) == len(MIGRATIONS)
    mode = await store.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
    assert mode == "wal"
    store.close()


def test_migrate_is_idempotent_and_refuses_newer_databases(tmp_path):
    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    assert migrate(conn) == [name for name, _ in MIGRATIONS]
    assert migrate(conn) == []
    conn.execute("INSERT INTO migrations (name, applied_at) VALUES ('m999_from_the_future', 0)")
    with pytest.raises(RuntimeError, match="newer stbme"):
        migrate(conn)


async def test_failed_write_leaves_nothing(tmp_path):
    store = Store.open(tmp_path / "db.sqlite3")

    def half_then_fail(conn):
        conn.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('a', 0, 0)")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        await store.write(half_then_fail)
    assert await store.read(lambda c: c.execute("SELECT count(*) FROM chats").fetchone()[0]) == 0
    await store.write(lambda c: c.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('b', 0, 0)"))
    assert await store.read(lambda c: c.execute("SELECT chat_id FROM chats").fetchall()[0][0]) == "b"
    store.close()


async def test_close_is_idempotent_and_drains(tmp_path):
    store = Store.open(tmp_path / "db.sqlite3")
    store.write_nowait(lambda c: c.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('q',0,0)"))
    store.close()
    store.close()
    with pytest.raises(StoreClosed):
        await store.write(lambda c: None)
    again = Store.open(tmp_path / "db.sqlite3")
    assert again.read_sync(lambda c: c.execute("SELECT count(*) FROM chats").fetchone()[0]) == 1
    again.close()


async def test_readers_are_read_only(tmp_path):
    store = Store.open(tmp_path / "db.sqlite3")
    with pytest.raises(sqlite3.OperationalError):
        await store.read(lambda c: c.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('x',0,0)"))
    store.close()


def test_acknowledged_writes_survive_kill_9(tmp_path):
    """A child process acknowledges each committed write on stdout, then is killed with SIGKILL
    mid-stream; every acknowledged row must be there when the database is reopened."""
    db = tmp_path / "db.sqlite3"
    child = textwrap.dedent(f"""
        import sys
        from stbme.store import Store
        store = Store.open({str(db)!r})
        i = 0
        while True:
            store.write_sync(lambda c, i=i: c.execute(
                "INSERT INTO chats (chat_id, created_at, updated_at) VALUES (?, 0, 0)", (f"chat-{{i}}",)))
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked >= 300:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = Store.open(db)
    ids = store.read_sync(lambda c: {r[0] for r in c.execute("SELECT chat_id FROM chats")})
    store.close()
    assert {f"chat-{i}" for i in range(acked + 1)} <= ids
    assert store.path.exists()
