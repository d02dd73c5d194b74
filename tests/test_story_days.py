"""Story time on the write path: heuristic memories carry their message's day and the days it mentions,
`story_days` (m006) follows every node write, a rollback and replay equals a fresh ingest, and a
database made before m006 gets its story days on upgrade."""

from __future__ import annotations

import datetime as dt
import random
import sqlite3

import orjson
import pytest

from conftest import full_sync, settle
from stbme.store.migrations import MIGRATIONS, migrate
from stbme.store.queries import clear_chat_memories, delete_chat_rows, nodes_on_days
from test_sync_rollback import random_edit

START = dt.datetime(2026, 2, 27, 20, 0)
LINES = [
    "Garrick had his boots stolen yesterday.", "We went to the market this morning.", "Ilse wrote last Thursday.",
    "The storm hit two days ago.", "I'll see you tomorrow.", "Nothing happened at all.", "江离昨天在醉仙楼跟人打架。",
    "宋嫂上周四来信了。", "On March 1 the lighthouse went dark.", "前天下了大雨。", "The fair was on the 14th.",
]


def st_stamp(moment: dt.datetime) -> str:
    """`moment` as SillyTavern's getMessageTimeStamp() writes it."""
    hour = moment.hour % 12 or 12
    return f"{moment:%B} {moment.day}, {moment.year} {hour}:{moment.minute:02d}{'pm' if moment.hour >= 12 else 'am'}"


def dated_turns(rng: random.Random, n: int, day: int = 0) -> list[dict]:
    turns = []
    for i in range(n):
        when = st_stamp(START + dt.timedelta(days=day + rng.randrange(4), minutes=i))
        turns.append({"role": "user", "name": "Alex", "text": rng.choice(LINES), "send_date": when})
        turns.append({"role": "assistant", "name": "Elena", "text": rng.choice(LINES) + " " + rng.choice(LINES),
                      "send_date": when})
    return turns


async def story(sc, chat_id: str) -> dict:
    """Each event's text -> (its story time, its story days), and the chat's story days."""
    def read(conn):
        nodes = conn.execute("SELECT id, fields, seq_from, story_time FROM nodes WHERE chat_id = ? AND type = 'event'",
                             (chat_id,)).fetchall()
        rows = conn.execute("SELECT node_id, day, mentioned FROM story_days WHERE chat_id = ?", (chat_id,)).fetchall()
        return nodes, rows

    nodes, rows = await sc.store.read(read)
    by_node: dict[str, list] = {}
    for node_id, day, mentioned in rows:
        by_node.setdefault(node_id, []).append((day, mentioned))
    return {(n["seq_from"], orjson.loads(n["fields"])["summary"]):
            (n["story_time"] and orjson.loads(n["story_time"]), sorted(by_node.pop(n["id"], [])))
            for n in nodes} | ({"orphans": by_node} if by_node else {})


async def test_heuristic_memories_carry_story_time(sidecar):
    chat = [
        {"role": "user", "name": "Alex", "text": "Did you hear? Garrick had his boots stolen yesterday.",
         "send_date": "March 18, 2026 7:29pm"},
        {"role": "assistant", "name": "Elena", "text": "宋嫂昨天生火的时候把眉毛燎没了。", "send_date": "2026-3-18 @19h 31m 2s 5ms"},
        {"role": "user", "name": "Alex", "text": "No date on this one, yesterday or not.", "send_date": ""},
        {"role": "assistant", "name": "Elena", "text": "Fine. I'll see you then.", "send_date": "1773855000000"},
    ]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    events = await story(sidecar, "c")
    yesterday = [["2026-03-17", "2026-03-17"]]
    assert events[(0, chat[0]["text"])] == ({"date": "2026-03-18", "mentions": yesterday},
                                            [("2026-03-17", 1), ("2026-03-18", 0)])
    assert events[(1, chat[1]["text"])][0] == {"date": "2026-03-18", "mentions": yesterday}
    assert events[(2, chat[2]["text"])] == (None, [])
    assert events[(3, chat[3]["text"])][0]["date"] == dt.datetime.fromtimestamp(1773855000).date().isoformat()
    on_17th = await sidecar.store.read(lambda conn: nodes_on_days(conn, "c", "2026-03-17", "2026-03-17"))
    assert len(on_17th) == 2 and all(mentioned for _, _, mentioned in on_17th)
    march = await sidecar.store.read(lambda conn: nodes_on_days(conn, "c", "2026-03-01", "2026-03-31"))
    assert {day for _, day, _ in march} >= {"2026-03-17", "2026-03-18"}
    assert await sidecar.store.read(lambda conn: nodes_on_days(conn, "other", "2026-03-01", "2026-03-31")) == []


@pytest.mark.parametrize("seed", [21, 22])
async def test_rollback_and_replay_equal_a_fresh_ingest_with_dates(sidecar, seed):
    rng = random.Random(seed)
    chat = dated_turns(rng, 5)

    def edited(r):
        return r.choice(LINES) + " (edited)"

    await full_sync(sidecar, "live", chat)
    await settle(sidecar, "live")
    for step in range(12):
        op = random_edit(rng, chat, new_turns=lambda r, n: dated_turns(r, n, day=step), edited=edited,
                         swiped=edited)
        if op == "swipe":  # a swipe brings its own send date
            chat[-1]["send_date"] = st_stamp(START + dt.timedelta(days=step, hours=1))
        await full_sync(sidecar, "live", chat)
        await settle(sidecar, "live")
        if step % 4 == 3:
            await full_sync(sidecar, f"fresh-{step}", chat)
            await settle(sidecar, f"fresh-{step}")
            live, fresh = await story(sidecar, "live"), await story(sidecar, f"fresh-{step}")
            assert live == fresh, f"diverged after step {step} ({op})"
            assert any(st and st.get("mentions") for st, _ in live.values())


def _node(conn, node_id: str, story_time, chat_id: str = "c") -> None:
    conn.execute("INSERT INTO nodes (id, chat_id, type, fields, created_at, updated_at, story_time)"
                 " VALUES (?, ?, 'event', '{}', 0, 0, ?)",
                 (node_id, chat_id, None if story_time is None else orjson.dumps(story_time).decode()))


def _days(conn) -> list[tuple]:
    return [tuple(r) for r in conn.execute("SELECT node_id, day, mentioned FROM story_days ORDER BY node_id, day")]


GARBAGE = [{"segmentId": "s1", "label": "dawn"}, {"date": 5, "mentions": "x"}, {"date": "2026-02-30"},
           {"date": "soon", "mentions": [[1, 2], ["2026-03-05"], "x", ["2026-03-09", "2026-03-01"], None, {}]},
           [1, 2], "text", 7]


def test_story_days_follow_every_node_write():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    _node(conn, "a", {"date": "2026-03-04", "mentions": [["2026-03-03", "2026-03-03"], ["2026-02-27", "2026-03-01"]]})
    _node(conn, "b", None)
    for i, bad in enumerate(GARBAGE):  # imported story times of any shape: no row, no error
        _node(conn, f"g{i}", bad)
    assert _days(conn) == [("a", "2026-02-27", 1), ("a", "2026-02-28", 1), ("a", "2026-03-01", 1),
                           ("a", "2026-03-03", 1), ("a", "2026-03-04", 0)]
    conn.execute("UPDATE nodes SET story_time = ? WHERE id = 'a'", ('{"date": "2024-02-29"}',))
    conn.execute("UPDATE nodes SET story_time = ? WHERE id = 'b'", ('{"date": "2026-03-06", "mentions": '
                                                                     '[["2026-03-05", "2026-03-05"]]}',))
    conn.execute("UPDATE nodes SET weight = 0.5")  # other columns leave them be
    assert _days(conn) == [("a", "2024-02-29", 0), ("b", "2026-03-05", 1), ("b", "2026-03-06", 0)]
    conn.execute("UPDATE nodes SET archived = 1 WHERE id = 'b'")
    assert nodes_on_days(conn, "c", "2024-01-01", "2026-12-31") == [("a", "2024-02-29", False)]
    conn.execute("DELETE FROM nodes WHERE id = 'a'")
    assert _days(conn) == [("b", "2026-03-05", 1), ("b", "2026-03-06", 0)]
    _node(conn, "long", {"date": "2026-03-31", "mentions": [["2026-01-01", "2026-03-31"]]})
    assert len([r for r in _days(conn) if r[0] == "long"]) == 31 + 1  # a span stores at most 31 days
    clear_chat_memories(conn, "c", -1)
    assert _days(conn) == []
    _node(conn, "x", {"date": "2026-03-04"}, chat_id="d")
    delete_chat_rows(conn, "d")
    assert _days(conn) == []


def test_upgrade_fills_story_days_for_stored_memories(tmp_path):
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    before = [m for m in MIGRATIONS if m[0] != "m006_story_days"]
    migrate(conn, before)
    _node(conn, "a", {"date": "2026-03-04", "mentions": [["2026-03-03", "2026-03-03"]]})
    _node(conn, "b", {"segmentId": "s1"})
    _node(conn, "c", None)
    assert "m006_story_days" in migrate(conn)
    assert _days(conn) == [("a", "2026-03-03", 1), ("a", "2026-03-04", 0)]
