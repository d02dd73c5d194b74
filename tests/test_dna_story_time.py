"""The DNA windows (a duplicate within an hour, a repair loop within 7 days) in story time: the send_date of
the messages, not the clock when they are ingested. A month-old chat brought in at once keeps a week of
instructions apart."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import full_sync, settle

from stbme.dna.story_clock import send_date_seconds

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


async def test_a_bulk_ingest_keeps_a_weeks_instructions_apart(sidecar):
    """The same instruction on four evenings a week apart: four directives. Said again ten minutes later
    in the story: reinforced, however the messages were ingested."""
    chat = []
    for week in range(4):
        chat += turn("(OOC: please keep the replies short)", START + dt.timedelta(days=7 * week))
    chat += turn("(OOC: please keep the replies short!)", START + dt.timedelta(days=21, minutes=10))
    await full_sync(sidecar, "c", chat)   # a month of chat, processed in seconds
    await settle(sidecar, "c")
    made = await directives(sidecar, "c")
    assert [d["seq_range"][0] for d in made] == [0, 2, 4, 6]
    assert made[-1]["weight"] == pytest.approx(made[0]["weight"] + 0.1)
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="reinforce")
    assert event["data"]["node_id"] == made[-1]["id"] and event["data"]["message"] == 8


async def test_repair_loops_are_within_seven_days_of_story(sidecar):
    correction = "(OOC: no, her eyes are green, not blue)"
    chat = turn("We talk.", START, "Elena's blue eyes narrow.")
    chat += turn(correction, START + dt.timedelta(minutes=5))
    chat += turn(correction.replace("no,", "no!!"), START + dt.timedelta(days=3))     # 3 days on: a loop
    chat += turn(correction.replace("no,", "no..."), START + dt.timedelta(days=13))   # 10 days after: none
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    made = await directives(sidecar, "c")
    assert len(made) == 3
    [loop] = await sidecar.dna.list_loops("c")
    assert (loop["first_id"], loop["second_id"]) == (made[0]["id"], made[1]["id"])
    assert loop["time_gap"] == pytest.approx(3 * 86400 - 5 * 60)
    # reflection looks at the story's last 7 days: the third one has no partner there either
    assert (await sidecar.dna.reflect("c"))["repair_loops"] == []


async def test_without_send_dates_the_wall_clock_decides(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: please keep the replies short)"},
            {"role": "assistant", "name": "Elena", "text": "Ok."},
            {"role": "user", "name": "Alex", "text": "(OOC: please keep the replies short!)"},
            {"role": "assistant", "name": "Elena", "text": "Ok."}]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    [made] = await directives(sidecar, "c")   # ingested within the hour: the repeat reinforced it
    assert made["weight"] == pytest.approx(0.6)
