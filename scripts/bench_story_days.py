#!/usr/bin/env python
"""Memories of a day: the `story_days` table (m006) against reading story times from the nodes.

One chat of N memories (default 100,000) over a year of story days (about N/365 a day), a fifth of them
mentioning the day before and one in thirty a whole week, written through SQLite as ChangeSet writes
them. It prints, in one process:
- the cost of the triggers on writes: inserting the memories into a database with m006 and into one
  without it (baseline), and the ratio;
- "memories of day D" and "of week W" with `nodes_on_days` (an index range scan) against the ways
  without the table: a scan of the chat's story times decoded in Python (which also finds mentions), and
  SQLite's json_extract over the chat's rows (own days only): p50/p95 and ratios;
- the space the table takes.

    .venv/bin/python scripts/bench_story_days.py [--memories 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from stbme.graph.model import Node, node_to_row  # noqa: E402
from stbme.pipeline.timeline import DateSpan  # noqa: E402
from stbme.store.db import prepare_connection  # noqa: E402
from stbme.store.migrations import MIGRATIONS, migrate  # noqa: E402
from stbme.store.queries import nodes_on_days  # noqa: E402

CHAT = "bench/chat"
FIRST_DAY = dt.date(2025, 1, 1)
BATCH = 2000


def story_time(rng: random.Random, day: dt.date) -> dict:
    out = {"date": day.isoformat()}
    roll = rng.random()
    if roll < 0.2:
        out["mentions"] = [DateSpan.day(day - dt.timedelta(days=1)).to_json()]
    elif roll < 0.2 + 1 / 30:
        week = day - dt.timedelta(days=day.weekday() + 7)
        out["mentions"] = [[week.isoformat(), (week + dt.timedelta(days=6)).isoformat()]]
    return out


def rows(n: int, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        day = FIRST_DAY + dt.timedelta(days=i * 365 // n)
        node = Node(id=f"n_{i:08d}", chat_id=CHAT, type="event", fields={"summary": f"memory {i}"},
                    seq_from=i, seq_to=i, story_time=story_time(rng, day))
        out.append(node_to_row(node))
    return out


def populate(path: Path, data: list[dict], migrations) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    prepare_connection(conn)  # the product's pragmas
    conn.execute("PRAGMA journal_mode = WAL")
    migrate(conn, migrations)
    cols = list(data[0])
    sql = f"INSERT INTO nodes ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    start = time.perf_counter()
    for i in range(0, len(data), BATCH):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(sql, [[r[c] for c in cols] for r in data[i:i + BATCH]])
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed


def scan_python(conn: sqlite3.Connection, span: DateSpan) -> list[str]:
    """Without the table: every story time of the chat, decoded, own day and mentions."""
    out = []
    for node_id, raw in conn.execute("SELECT id, story_time FROM nodes WHERE chat_id = ? AND archived = 0"
                                     " AND story_time IS NOT NULL", (CHAT,)):
        st = orjson.loads(raw)
        spans = [DateSpan.day(dt.date.fromisoformat(st["date"]))] + [DateSpan.from_json(m) for m in
                                                                     st.get("mentions", ())]
        if any(s.overlaps(span) for s in spans):
            out.append(node_id)
    return out


def scan_json(conn: sqlite3.Connection, span: DateSpan) -> list[str]:
    """Without the table, in SQLite: own days only."""
    return [r[0] for r in conn.execute(
        "SELECT id FROM nodes WHERE chat_id = ? AND archived = 0 AND json_extract(story_time, '$.date')"
        " BETWEEN ? AND ?", (CHAT, span.start.isoformat(), span.end.isoformat()))]


def with_table(conn: sqlite3.Connection, span: DateSpan) -> list[str]:
    """With the table: one row per (memory, day); distinct memories, as the other ways count them."""
    return list(dict.fromkeys(node_id for node_id, _, _ in nodes_on_days(conn, CHAT, span.start.isoformat(),
                                                                         span.end.isoformat())))


def timings(fn, conn, spans: list[DateSpan]) -> tuple[list[float], int]:
    times, found = [], 0
    for span in spans:
        start = time.perf_counter()
        found += len(fn(conn, span))
        times.append((time.perf_counter() - start) * 1000)
    return times, found


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    data = rows(args.memories)
    without_m006 = [m for m in MIGRATIONS if m[0] != "m006_story_days"]
    with tempfile.TemporaryDirectory() as tmp:
        base, table = Path(tmp) / "base.db", Path(tmp) / "table.db"
        t_base = populate(base, data, without_m006)
        t_table = populate(table, data, MIGRATIONS)
        print(f"insert {args.memories:,} memories: without m006 {t_base:.2f} s, with its triggers {t_table:.2f} s"
              f" (x{t_table / t_base:.2f})")
        conn = sqlite3.connect(f"file:{table}?mode=ro", uri=True)
        prepare_connection(conn)
        n_rows = conn.execute("SELECT count(*) FROM story_days").fetchone()[0]
        size = {p.name: p.stat().st_size for p in (base, table)}
        print(f"story_days: {n_rows:,} rows; database {size['table.db'] / 2**20:.1f} MB against"
              f" {size['base.db'] / 2**20:.1f} MB without (after a checkpoint)")
        rng = random.Random(7)
        for label, length in (("one day", 1), ("one week", 7)):
            spans = []
            for _ in range(args.queries):
                start = FIRST_DAY + dt.timedelta(days=rng.randrange(358))
                spans.append(DateSpan(start, start + dt.timedelta(days=length - 1)))
            results = {}
            for name, fn in (("story_days (index)", with_table), ("scan, decode in Python", scan_python),
                             ("scan, json_extract (own day only)", scan_json)):
                fn(conn, spans[0])  # warm the page cache
                results[name] = timings(fn, conn, spans)
            ref = statistics.median(results["story_days (index)"][0])
            print(f"\nmemories of {label} ({args.queries} queries):")
            for name, (times, found) in results.items():
                p50 = statistics.median(times)
                print(f"  {name:36} p50 {p50:8.3f} ms  p95 {pct(times, 95):8.3f} ms  x{p50 / ref:7.1f}"
                      f"  memories found per query {found / len(spans):6.1f}")
        conn.close()


if __name__ == "__main__":
    main()
