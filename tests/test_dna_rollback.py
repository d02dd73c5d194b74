"""Directive memories, correction fixes and repair loops are undone exactly when the chat changes."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from conftest import full_sync, settle
from test_sync_rollback import ingest, line, random_edit, snapshot

SIGNALS = [
    "(OOC: no, her eyes are green, not blue)",
    "(OOC: no!! her eyes are green, not blue)",
    "I want slower pacing, don't rush the romance.",      # a plain command to the story-teller
    "(OOC: we decided the heist is at midnight)",
    "// you keep forgetting she lost her arm",
    "((first describe the scene, then the dialogue))",
    "// from now on, always write in past tense",
    "（OOC：她的眼睛不是蓝色的，是绿色的）",
    "(OOC: Elena is a knight, not a mage.)",
    '"We decided to take the long way round."',           # in character: no directive
]
REPLIES = ["Elena's blue eyes shine.", "Marcus, the mage, bows.", "Her blue cloak and blue eyes.",
           "Elena the mage casts a spell.", "她的蓝色眼睛很美。"]
START = dt.datetime(2026, 2, 1, 20, 0)


class StoryClock:
    """send_dates that move on by minutes to days, so messages fall inside and outside the DNA windows."""

    def __init__(self, rng: random.Random):
        self.rng, self.now = rng, START

    def next(self) -> str:
        self.now += dt.timedelta(minutes=self.rng.choice([3, 20, 50, 90, 60 * 26, 60 * 24 * 4]))
        hour = self.now.hour % 12 or 12
        return f"{self.now:%B} {self.now.day}, {self.now.year} {hour}:{self.now.minute:02d}{'pm' if self.now.hour >= 12 else 'am'}"


def make_chat(rng: random.Random, turns: int, clock: StoryClock | None = None) -> list[dict]:
    chat = []
    for _ in range(turns):
        user = rng.choice(SIGNALS) if rng.random() < 0.6 else line(rng)
        chat.append({"role": "user", "name": "Alex", "text": user})
        chat.append({"role": "assistant", "name": "Elena", "text": rng.choice(REPLIES) + " " + line(rng)})
        if clock is not None:
            chat[-2]["send_date"], chat[-1]["send_date"] = clock.next(), clock.next()
    return chat


async def dna_snapshot(sc, chat_id: str) -> dict:
    snap = await snapshot(sc, chat_id)

    def read(conn):
        nodes = {r["id"]: (r["type"], r["fields"], r["seq_from"]) for r in conn.execute(
            "SELECT id, type, fields, seq_from FROM nodes WHERE chat_id = ?", (chat_id,))}
        loops = conn.execute("SELECT first_id, second_id, type, status FROM repair_loops WHERE chat_id = ?",
                             (chat_id,)).fetchall()
        weights = conn.execute("SELECT type, fields, seq_from, weight, pinned, locked FROM nodes WHERE chat_id = ?"
                               " AND source = 'dna'", (chat_id,)).fetchall()
        return ([(nodes[a][:3], nodes[b][:3], t, s) for a, b, t, s in loops],
                sorted(tuple(r) for r in weights))

    snap["repair_loops"], snap["directives"] = await sc.store.read(read)
    snap["repair_loops"].sort()
    return snap


async def directive_texts(sc, chat_id):
    nodes = (await sc.memories.list(chat_id, limit=500, archived=None))["nodes"]
    return sorted((n["type"], n["fields"]["content"]) for n in nodes if n["source"] == "dna")


async def test_editing_the_message_removes_its_directive(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": "Hi."},
            {"role": "assistant", "name": "Elena", "text": "Elena's blue eyes shine."},
            {"role": "user", "name": "Alex", "text": "(OOC: no, her eyes are green, not blue)"},
            {"role": "assistant", "name": "Elena", "text": "Sorry."},
            {"role": "user", "name": "Alex", "text": "(OOC: we decided the heist is at midnight)"},
            {"role": "assistant", "name": "Elena", "text": "Agreed."}]
    before = await ingest(sidecar, "c", chat[:2])
    await ingest(sidecar, "c", chat)
    assert await directive_texts(sidecar, "c") == [
        ("correction", "no, her eyes are green, not blue"), ("decision", "we decided the heist is at midnight")]
    nodes = (await sidecar.memories.list("c", limit=100))["nodes"]
    assert any("green eyes" in str(n["fields"]) for n in nodes)  # the correction fixed message 1's memory
    # the user edits the correction away: the directive, the fix and the later decision are undone...
    chat[2] = {"role": "user", "name": "Alex", "text": "I look around."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    # ...and the decision (a later message) is rebuilt
    assert await directive_texts(sidecar, "c") == [("decision", "we decided the heist is at midnight")]
    nodes = (await sidecar.memories.list("c", limit=100))["nodes"]
    assert any("blue eyes" in str(n["fields"]) for n in nodes) and not any("green" in str(n["fields"]) for n in nodes)
    # cutting the chat back restores the graph exactly
    assert await ingest(sidecar, "c", chat[:2]) == before


async def test_rollback_removes_repair_loops(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: no, her eyes are green, not blue)"},
            {"role": "assistant", "name": "Elena", "text": "Ok."}]
    await ingest(sidecar, "c", chat)
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET created_at = created_at - 7200"))
    chat += [{"role": "user", "name": "Alex", "text": "(OOC: no!! her eyes are green, not blue)"},
             {"role": "assistant", "name": "Elena", "text": "Sorry!"}]
    await ingest(sidecar, "c", chat)
    assert len(await sidecar.dna.list_loops("c")) == 1
    first = next(n for n in (await sidecar.memories.list("c", limit=50))["nodes"]
                 if n["source"] == "dna" and n["seq_range"] == [0, 0])
    assert first["pinned"] and first["locked"]
    chat[2] = {"role": "user", "name": "Alex", "text": "Thanks."}
    await ingest(sidecar, "c", chat)
    assert await sidecar.dna.list_loops("c", None) == []
    assert await sidecar.store.read(lambda conn: conn.execute("SELECT count(*) FROM repair_loops").fetchone()[0]) == 0
    first = await sidecar.memories.get("c", first["id"])
    assert not first["pinned"] and not first["locked"] and first["importance"] == 8.0  # escalation undone


@pytest.mark.parametrize("seed,dated", [(21, False), (22, False), (24, True), (25, True)])
async def test_random_edits_with_signals_equal_fresh_ingest(sidecar, seed, dated):
    """Without send_dates (the wall clock decides the windows) and with them (story time)."""
    rng = random.Random(seed)
    clock = StoryClock(rng) if dated else None
    chat = make_chat(rng, 6, clock)
    await ingest(sidecar, "live", chat)
    for step in range(10):
        op = random_edit(rng, chat, new_turns=lambda r, n: make_chat(r, n, clock),
                         edited=lambda r: r.choice(SIGNALS + [line(r)]),
                         swiped=lambda r: r.choice(REPLIES) + " (swiped)")
        await full_sync(sidecar, "live", chat)
        await settle(sidecar, "live")
        if step % 4 == 3 or step == 9:
            live = await dna_snapshot(sidecar, "live")
            await full_sync(sidecar, f"fresh-{step}", chat)
            await settle(sidecar, f"fresh-{step}")
            fresh = await dna_snapshot(sidecar, f"fresh-{step}")
            assert live["directives"], "the chat should have directive memories"
            assert live == fresh, f"diverged after step {step} ({op})"
