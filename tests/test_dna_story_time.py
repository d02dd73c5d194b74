"""The DNA windows (a duplicate within an hour, a repair loop within 7 days) in story time: the send_date of
the messages, not the clock when they are ingested. A month-old chat brought in at once keeps a week of
instructions apart."""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from pathlib import Path

import pytest
from conftest import full_sync, settle

from stbme.dna.story_clock import send_date_seconds

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from evalkit.chatgen import generate_chat  # noqa: E402
from evalkit.worlds_en import WORLDS_EN  # noqa: E402

START = dt.datetime(2026, 2, 1, 20, 0)


def stamp(moment: dt.datetime) -> str:
    """SillyTavern's getMessageTimeStamp(): "February 1, 2026 8:00pm"."""
    hour = moment.hour % 12 or 12
    return f"{moment:%B} {moment.day}, {moment.year} {hour}:{moment.minute:02d}{'pm' if moment.hour >= 12 else 'am'}"


def turn(user: str, at: dt.datetime, reply: str = "The story goes on.") -> list[dict]:
    return [{"role": "user", "name": "Alex", "text": user, "send_date": stamp(at)},
            {"role": "assistant", "name": "Elena", "text": reply, "send_date": stamp(at + dt.timedelta(minutes=1))}]


async def directives(sc, chat_id: str) -> list[dict]:
    nodes = (await sc.memories.list(chat_id, limit=200, archived=None))["nodes"]
    return sorted((n for n in nodes if n["source"] == "dna"), key=lambda n: n["seq_range"][0])


@pytest.mark.parametrize("value,expected", [
    ("March 3, 2026 8:15pm", dt.datetime(2026, 3, 3, 20, 15)),
    ("March 3, 2026 12:05am", dt.datetime(2026, 3, 3, 0, 5)),
    ("Jun 19, 2023 12:30pm", dt.datetime(2023, 6, 19, 12, 30)),
    ("June 19, 2023", dt.datetime(2023, 6, 19)),
    ("2024-07-12@01h31m37s", dt.datetime(2024, 7, 12, 1, 31, 37)),
    ("2023-7-20 @14h 5m 9s 123ms", dt.datetime(2023, 7, 20, 14, 5, 9)),
    ("2023-06-19T14:20:00", dt.datetime(2023, 6, 19, 14, 20)),
])
def test_send_date_forms(value, expected):
    assert send_date_seconds(value) == expected.timestamp()


def test_send_date_epochs_and_garbage():
    assert send_date_seconds("1718000000000") == 1_718_000_000.0 == send_date_seconds(1718000000)
    assert send_date_seconds("2023-06-19T14:20:00Z") == dt.datetime(2023, 6, 19, 14, 20,
                                                                   tzinfo=dt.timezone.utc).timestamp()
    for bad in (None, "", "yesterday", "February 30, 2026 1:00am", "0", True, "x" * 500, "13/45/2026"):
        assert send_date_seconds(bad) is None, bad


async def test_a_bulk_ingest_keeps_a_weeks_corrections_apart(sidecar):
    """The same correction on four evenings a week apart: four directives (each a new mistake, and a week is
    too far apart for a repair loop). Said again ten minutes later in the story: reinforced, however the
    messages were ingested."""
    chat = []
    for week in range(4):
        chat += turn("(OOC: her eyes are green, not blue)", START + dt.timedelta(days=7 * week))
    chat += turn("(OOC: her eyes are green, not blue!)", START + dt.timedelta(days=21, minutes=10))
    await full_sync(sidecar, "c", chat)   # a month of chat, processed in seconds
    await settle(sidecar, "c")
    made = await directives(sidecar, "c")
    assert [d["seq_range"][0] for d in made] == [0, 2, 4, 6] and not await sidecar.dna.list_loops("c")
    assert made[-1]["weight"] == pytest.approx(made[0]["weight"] + 0.1)
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="reinforce")
    assert event["data"]["node_id"] == made[-1]["id"] and event["data"]["message"] == 8


async def test_the_same_instruction_a_week_apart_is_one_directive(sidecar):
    """An instruction the user repeats every week stays one directive, reinforced by each repeat (issue 21:
    the hour alone made one directive per evening)."""
    chat = []
    for week in range(4):
        chat += turn("(OOC: please keep the replies short)", START + dt.timedelta(days=7 * week))
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    [made] = await directives(sidecar, "c")
    assert made["seq_range"][0] == 0 and made["weight"] == pytest.approx(0.8)
    assert [e["data"]["message"] for e in await sidecar.dna_assets.events(chat_id="c", kind="reinforce",
                                                                          oldest_first=True)] == [2, 4, 6]


async def test_repair_loops_are_within_seven_days_of_story(sidecar):
    correction = "(OOC: no, her eyes are green, not blue)"
    chat = turn("We talk.", START, "Elena's blue eyes narrow.")
    chat += turn(correction, START + dt.timedelta(minutes=5))
    chat += turn(correction.replace("no,", "no!!"), START + dt.timedelta(days=3))     # 3 days on: a loop
    chat += turn("(OOC: no, her eyes are still green, not blue like you wrote)",       # 10 days after: none
                 START + dt.timedelta(days=13))
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    made = await directives(sidecar, "c")
    assert len(made) == 3
    [loop] = await sidecar.dna.list_loops("c")
    assert (loop["first_id"], loop["second_id"]) == (made[0]["id"], made[1]["id"])
    assert loop["time_gap"] == pytest.approx(3 * 86400 - 5 * 60)
    # reflection looks at the story's last 7 days: the third one has no partner there either
    assert (await sidecar.dna.reflect("c"))["repair_loops"] == []
    # the loop is recorded: the same correction said again later reinforces its newer memory
    chat += turn(correction, START + dt.timedelta(days=20))
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    assert len(await directives(sidecar, "c")) == 3
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="reinforce")
    assert event["data"]["node_id"] == made[1]["id"]


async def test_without_send_dates_the_wall_clock_decides(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: please keep the replies short)"},
            {"role": "assistant", "name": "Elena", "text": "Ok."},
            {"role": "user", "name": "Alex", "text": "(OOC: please keep the replies short!)"},
            {"role": "assistant", "name": "Elena", "text": "Ok."}]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    [made] = await directives(sidecar, "c")   # ingested within the hour: the repeat reinforced it
    assert made["weight"] == pytest.approx(0.6)


async def test_an_ooc_line_repeated_through_weeks_of_sessions_is_one_directive(sidecar):
    """Issue 21: one OOC instruction repeated 68 times in a 1,000-message chat made 33 identical directives,
    because the plan's hour runs from the directive's own message and a session lasts longer than an hour
    (and the next is days later). Here, a generated roleplay (sessions on story days, send_dates as
    SillyTavern writes them) with one OOC line in 40 user messages: one directive, reinforced 39 times."""
    chat = generate_chat(WORLDS_EN[0], seed=1, min_messages=300)["messages"]
    line = "(OOC: keep your replies under three paragraphs, please.)"
    users = [i for i, m in enumerate(chat) if m["role"] == "user"]
    said = sorted(random.Random(5).sample(users, 40))
    for i in said:
        chat[i] = {**chat[i], "text": chat[i]["text"] + "\n" + line}
    assert send_date_seconds(chat[said[-1]]["send_date"]) - send_date_seconds(chat[said[0]]["send_date"]) > 7 * 86400
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c", timeout=180)
    rows = await sidecar.store.read(lambda conn: conn.execute(
        "SELECT id, seq_from, weight, fields FROM nodes WHERE chat_id = 'c' AND source = 'dna'").fetchall())
    same = [dict(r) for r in rows if json.loads(r["fields"])["content"] == line[6:-1]]
    assert [(d["seq_from"], d["weight"]) for d in same] == [(said[0], 1.0)]
    events = await sidecar.dna_assets.events(chat_id="c", kind="reinforce", limit=1000, oldest_first=True)
    assert [e["data"]["message"] for e in events if e["data"]["node_id"] == same[0]["id"]] == said[1:]
