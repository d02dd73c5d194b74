"""A directive's weight moves: it starts below 1, so reinforcement (a repeated signal, a recall, the
strategy's reinforce draw), decay and the strategies' weights all change it (seed 001, sections 2 and 3)."""

from __future__ import annotations

import statistics

import pytest

from conftest import create_node, full_sync, recall, settle
from stbme.dna.dynamics import DIRECTIVE_START_WEIGHT
from stbme.dna.strategy import DAY
from stbme.policy import REINFORCE_STEP, STRATEGIES

T0 = 1_700_000_000.0
PACING = "I want slower pacing, don't rush the romance."


def turn(user: str, reply: str = "The story goes on.") -> list[dict]:
    return [{"role": "user", "name": "Alex", "text": user}, {"role": "assistant", "name": "Elena", "text": reply}]


async def directive_rows(sc, chat_id: str) -> list[dict]:
    rows = await sc.store.read(lambda conn: conn.execute(
        "SELECT id, weight, archived FROM nodes WHERE chat_id = ? AND source = 'dna' ORDER BY rowid",
        (chat_id,)).fetchall())
    return [dict(r) for r in rows]


async def test_start_weight_leaves_room_both_ways():
    """Five reinforcements to full weight, four decayed days to fall under the forget threshold (0.2)."""
    assert DIRECTIVE_START_WEIGHT + 5 * REINFORCE_STEP == pytest.approx(1.0)
    w, passes = DIRECTIVE_START_WEIGHT, 0
    while w >= 0.2:
        w, passes = round(w - 0.1, 6), passes + 1
    assert passes == 4


async def test_a_new_directive_starts_below_full_and_each_repeat_reinforces_it(sidecar):
    chat = turn(PACING)
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    [first] = await directive_rows(sidecar, "c")
    assert first["weight"] == DIRECTIVE_START_WEIGHT
    for repeat, expected in (("I want slower pacing, do not rush the romance!", 0.6),
                             ("I want slower pacing; don't rush the romance.", 0.7)):
        chat += turn(repeat)
        await full_sync(sidecar, "c", chat)
        await settle(sidecar, "c")
        rows = await directive_rows(sidecar, "c")
        assert [r["id"] for r in rows] == [first["id"]]          # reinforced, not added
        assert rows[0]["weight"] == pytest.approx(expected)
    assert len(await sidecar.dna_assets.events(chat_id="c", kind="reinforce")) == 2


async def test_recall_reinforces_a_new_directive(sidecar):
    await full_sync(sidecar, "c", turn(PACING))
    await settle(sidecar, "c")
    [d] = await directive_rows(sidecar, "c")
    for expected in (0.6, 0.7):
        result = await recall(sidecar, "c", {"query": "what next?"})
        assert d["id"] in [m["id"] for m in result["memories"]]   # directives are always injected
        sidecar.recall.reinforcement.flush()                        # the counted injections are queued now,
        await sidecar.store.write(lambda conn: None)               # before this write
        assert (await directive_rows(sidecar, "c"))[0]["weight"] == pytest.approx(expected)


async def test_an_unused_directive_decays_and_is_forgotten_on_its_fourth_decayed_pass(sidecar):
    await full_sync(sidecar, "c", turn(PACING))
    await settle(sidecar, "c")
    await sidecar.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET created_at = ?, last_access = ? WHERE chat_id = 'c'", (T0, T0)))
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup"})
    seen = []
    for day in range(8, 60):
        await sidecar.dna.decay("c", now=T0 + day * DAY)
        [d] = await directive_rows(sidecar, "c")
        if not seen or seen[-1] != (d["weight"], d["archived"]):
            seen.append((d["weight"], d["archived"]))
        if d["archived"]:
            break
    assert seen == [(0.5, 0), (0.4, 0), (0.3, 0), (0.2, 0), (0.1, 1)] or seen == [
        (0.4, 0), (0.3, 0), (0.2, 0), (0.1, 1)]
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="archive")
    assert event["data"]["reason"] == "decay" and event["data"]["weight"] == pytest.approx(0.1)


async def population(sc, chat_id: str, n: int) -> list[str]:
    """n directive memories at the start weight, made and last used at T0."""
    await full_sync(sc, chat_id, [{"role": "user", "name": "Alex", "text": "hello"}])
    ids = [(await create_node(sc, chat_id, {"type": "preference", "fields": {"content": f"preference {i}"}}))["id"]
           for i in range(n)]
    await sc.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET weight = ?, created_at = ?, last_access = ? WHERE chat_id = ?",
        (DIRECTIVE_START_WEIGHT, T0, T0, chat_id)))
    return ids


async def test_strategies_give_unused_directives_different_lifetimes(sidecar):
    """Daily decay passes from the start weight: the seeded draws against each strategy's decay weight
    forget a directive after about 7 + 4 / decay_weight idle days (cleanup < conservative < balanced <
    aggressive)."""
    lifetimes = {}
    for name in ("cleanup", "conservative", "balanced", "aggressive"):
        chat = f"life-{name}"
        ids = await population(sidecar, chat, 16)
        await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": name})
        forgotten: dict[str, int] = {}
        for day in range(8, 400):
            report = await sidecar.dna.decay(chat, now=T0 + day * DAY)
            forgotten.update({i: day for i in report["archived"]})
            if len(forgotten) == len(ids):
                break
        assert set(forgotten) == set(ids), name
        lifetimes[name] = statistics.mean(forgotten.values())
        expected = 7 + 4 / STRATEGIES[name].decay_weight
        assert lifetimes[name] == pytest.approx(expected, rel=0.35), (name, lifetimes[name], expected)
    assert lifetimes["cleanup"] < lifetimes["conservative"] < lifetimes["balanced"] < lifetimes["aggressive"]


async def test_the_strategys_reinforce_draw_moves_often_used_directives(sidecar):
    shares = {}
    for name in ("cleanup", "conservative"):
        chat = f"use-{name}"
        ids = await population(sidecar, chat, 40)
        await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": name})
        await sidecar.store.write(lambda conn: conn.execute(
            "UPDATE nodes SET access_count = 5 WHERE chat_id = ?", (chat,)))
        report = await sidecar.dna.reflect(chat, now=T0 + DAY)
        weights = {r["id"]: r["weight"] for r in await sidecar.store.read(lambda conn: conn.execute(
            "SELECT id, weight FROM nodes WHERE chat_id = ? AND type = 'preference'", (chat,)).fetchall())}
        moved = [i for i in ids if weights[i] == pytest.approx(DIRECTIVE_START_WEIGHT + REINFORCE_STEP)]
        assert len(moved) == report["reinforced"] > 0
        assert all(weights[i] == DIRECTIVE_START_WEIGHT for i in ids if i not in moved)
        shares[name] = len(moved) / len(ids)
    assert shares["cleanup"] < shares["conservative"]   # reinforce weights 0.2 and 0.4
