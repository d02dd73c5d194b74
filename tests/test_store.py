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


def _rows_in_copy_of_main_file(db, tmp_path, sql: str):
    """Copy the database file alone (as a backup that ignores -wal would) and read it."""
    copy = tmp_path / "copy" / "alone.sqlite3"
    copy.parent.mkdir(exist_ok=True)
    copy.write_bytes(db.read_bytes())
    conn = sqlite3.connect(copy)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_close_folds_the_wal_back_into_the_database(tmp_path):
    """The readers used to stay open after the writer closed, so SQLite never checkpointed: a copy of
    stbme.sqlite3 without its -wal file missed the last writes (issue 20)."""
    db = tmp_path / "db.sqlite3"
    store = Store.open(db)
    for i in range(50):
        await store.write(lambda c, i=i: c.execute(
            "INSERT INTO chats (chat_id, created_at, updated_at) VALUES (?, 0, 0)", (f"chat-{i}",)))
        await store.read(lambda c: c.execute("SELECT count(*) FROM chats").fetchone())  # readers open
    store.close()
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert _rows_in_copy_of_main_file(db, tmp_path, "SELECT count(*) FROM chats") == [(50,)]


def test_a_stopped_server_leaves_everything_in_the_database_file(tmp_path):
    """`stbme serve`, stopped the way a user stops it (SIGTERM, Ctrl-C), checkpoints on close."""
    from conftest import serve_process
    import json
    import urllib.request

    data = tmp_path / "data"
    with serve_process(data) as base:
        body = json.dumps({"length": 2, "anchors": [], "messages": [
            {"index": 0, "role": "user", "name": "Alex", "text": "Where is the silver key?"},
            {"index": 1, "role": "assistant", "name": "Elena", "text": "Under the old oak."}]}).encode()
        req = urllib.request.Request(base + "/v1/chats/backup-me/sync", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
    db = data / "stbme.sqlite3"
    wal = db.with_name(db.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    assert _rows_in_copy_of_main_file(db, tmp_path, "SELECT count(*) FROM messages WHERE chat_id = 'backup-me'") \
        == [(2,)]


def test_the_memories_to_embed_come_newest_first_from_their_indexes(tmp_path):
    """The embedding pass asks for them again and again during an ingest: name anchors first, then the
    newest messages' memories, then those holding another embedder's vector. Each lookup is a range of
    an index (m015), not a walk over every memory of the chat and its vector."""
    import numpy as np

    from stbme.graph.model import Node, node_to_row
    from stbme.store.queries import count_unembedded, unembedded_nodes

    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    vector = np.ones(4, np.float32)

    def add(node_id, chat="c", seq=None, embedder=None, archived=False):
        node = Node(id=node_id, chat_id=chat, type="event", fields={"summary": node_id}, seq_from=seq, seq_to=seq,
                    archived=archived, embedding=vector if embedder else None, embedder=embedder)
        row = node_to_row(node)
        conn.execute(f"INSERT INTO nodes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    for seq in range(10):
        add(f"m{seq}", seq=seq, embedder="now" if seq % 2 else None)
    add("anchor")
    add("old3", seq=3, embedder="before")
    add("old9", seq=9, embedder="before")
    add("gone", seq=11, archived=True)
    add("theirs", chat="other", seq=12)

    ids = lambda limit: [r["id"] for r in unembedded_nodes(conn, "c", "now", limit)]  # noqa: E731
    assert ids(20) == ["anchor", "m8", "m6", "m4", "m2", "m0", "old9", "old3"]
    assert ids(3) == ["anchor", "m8", "m6"]
    assert ids(7) == ["anchor", "m8", "m6", "m4", "m2", "m0", "old9"]
    assert count_unembedded(conn, "c", "now") == 8
    assert count_unembedded(conn, "c", "before") == 6 + 5

    from stbme.store.queries import _OTHER_EMBEDDER, _WITHOUT_VECTOR
    for sql, args in [(f"SELECT id {_WITHOUT_VECTOR} AND seq_to IS NOT NULL ORDER BY seq_to DESC", ("c",)),
                      (f"SELECT count(*) {_OTHER_EMBEDDER}", ("c", "now"))]:
        plan = " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
        assert "USING INDEX nodes_" in plan and "TEMP B-TREE" not in plan and "SCAN" not in plan, plan

    # Housekeeping's question, which chats have any: from the same indexes, not a scan of every memory.
    from stbme.store.queries import _CHATS_WITH_UNEMBEDDED, chats_with_unembedded
    add("done", chat="current", seq=1, embedder="now")
    add("archived", chat="current", seq=2, archived=True)
    add("switched", chat="switched", seq=1, embedder="before")
    assert chats_with_unembedded(conn, "now") == ["c", "other", "switched"]
    assert chats_with_unembedded(conn, "before") == ["c", "current", "other"]
    steps = [r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {_CHATS_WITH_UNEMBEDDED}", ("now",))]
    scans = [step for step in steps if step.startswith("SCAN nodes")]
    assert sorted(scans) == ["SCAN nodes USING INDEX nodes_by_embedder", "SCAN nodes USING INDEX nodes_unembedded"], steps


def test_recall_ranks_its_candidates_from_the_ranking_index(tmp_path):
    """What recall ranks ~200 candidates by is read from an index of its own (m017), not from each memory's
    row (its text and vector); a name anchor's fields, which the index lacks, still come from its row."""
    import orjson

    from stbme.graph.model import Node, node_to_row
    from stbme.recall.read_path import _RANKING_COLUMNS
    from stbme.store.queries import RANKING_INDEX, nodes_by_ids

    conn = sqlite3.connect(tmp_path / "db.sqlite3", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)

    def add(node_id, type_="event", chat="c", archived=False, fields=None, **kw):
        node = Node(id=node_id, chat_id=chat, type=type_, fields=fields or {"summary": f"text of {node_id}"},
                    archived=archived, **kw)
        row = node_to_row(node)
        conn.execute(f"INSERT INTO nodes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))

    add("e1", importance=7, weight=0.5, seq_from=3, seq_to=4, source="llm")
    add("e2", pinned=True, seq_from=5, seq_to=5)
    add("mara", type_="character", fields={"name": "Mara", "traits": "stubborn"})
    add("gone", archived=True)
    add("theirs", chat="other")
    ids = ["e1", "e2", "mara", "gone", "theirs", "missing"]
    statements = []
    conn.set_trace_callback(statements.append)   # the statement as run, its values in place
    rows = {r["id"]: dict(r) for r in nodes_by_ids(conn, "c", ids, columns=_RANKING_COLUMNS,
                                                    where="AND archived = 0", index=RANKING_INDEX)}
    conn.set_trace_callback(None)
    assert sorted(rows) == ["e1", "e2", "mara"]
    assert {k: rows["e1"][k] for k in ("type", "importance", "weight", "seq_from", "seq_to", "pinned", "source")} == {
        "type": "event", "importance": 7, "weight": 0.5, "seq_from": 3, "seq_to": 4, "pinned": 0, "source": "llm"}
    assert rows["e2"]["pinned"] == 1 and rows["e1"]["fields"] is None
    assert orjson.loads(rows["mara"]["fields"])["traits"] == "stubborn"
    [read] = [sql for sql in statements if sql.lstrip().upper().startswith("SELECT")]
    plan = " ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {read}"))
    assert f"USING INDEX {RANKING_INDEX}" in plan, plan
    # Without the event's text: the columns recall ranks by alone are answered from the index only.
    plan = " ".join(r[-1] for r in conn.execute(
        f"EXPLAIN QUERY PLAN SELECT id, type, importance, weight, seq_from, seq_to, pinned, source FROM nodes"
        f" INDEXED BY {RANKING_INDEX} WHERE id IN (?, ?) AND +chat_id = ? AND archived = 0", ("e1", "e2", "c")))
    assert f"COVERING INDEX {RANKING_INDEX}" in plan, plan
