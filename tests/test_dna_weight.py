"""A directive's weight moves: it starts below 1, so reinforcement (a repeated signal, a recall, the
strategy's reinforce draw), decay and the strategies' weights all change it (seed 001, sections 2 and 3)."""

from __future__ import annotations

import statistics

import pytest

from conftest import create_node, full_sync, recall, settle
from stbme.dna.dynamics import DIRECTIVE_START_WEIGHT
from stbme.dna.story_clock import send_date_seconds
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


async def test_recall_shows_a_directive_without_using_it(sidecar):
    """A directive is in every block whatever was asked, so showing it is no use of it (issue 22: four
    injections took a new directive to 0.9, so the strategy's draws never moved it): recall leaves its
    weight, access count and last use alone. Saying it again is the use."""
    await full_sync(sidecar, "c", turn(PACING))
    await settle(sidecar, "c")
    [before] = await sidecar.store.read(lambda conn: [dict(r) for r in conn.execute(
        "SELECT weight, access_count, last_access FROM nodes WHERE chat_id = 'c' AND source = 'dna'")])
    [d] = await directive_rows(sidecar, "c")
    for _ in range(5):
        result = await recall(sidecar, "c", {"query": "what next?"})
        assert d["id"] in [m["id"] for m in result["memories"]]   # directives are always injected
        sidecar.recall.reinforcement.flush()                        # a counted injection would be queued now,
        await sidecar.store.write(lambda conn: None)               # before this write
    [after] = await sidecar.store.read(lambda conn: [dict(r) for r in conn.execute(
        "SELECT weight, access_count, last_access FROM nodes WHERE chat_id = 'c' AND source = 'dna'")])
    assert after == before == {**before, "weight": DIRECTIVE_START_WEIGHT, "access_count": 0}


async def test_saying_a_directive_again_is_its_use(sidecar):
    """Each repeat counts as an access, at the time it was said (story time): the decay's idle days and the
    reinforce draw's "more than 3 accesses" follow what the user keeps saying."""
    chat = [{**m, "send_date": "March 3, 2026 8:00pm"} for m in turn(PACING)]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    made = await sidecar.store.read(lambda conn: dict(conn.execute(
        "SELECT access_count, last_access FROM nodes WHERE chat_id = 'c' AND source = 'dna'").fetchone()))
    assert made == {"access_count": 0, "last_access": send_date_seconds("March 3, 2026 8:00pm")}
    chat += [{**m, "send_date": "March 9, 2026 9:30pm"} for m in turn(PACING)]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    again = await sidecar.store.read(lambda conn: dict(conn.execute(
        "SELECT access_count, last_access, weight FROM nodes WHERE chat_id = 'c' AND source = 'dna'").fetchone()))
    assert again == {"access_count": 1, "last_access": send_date_seconds("March 9, 2026 9:30pm"), "weight": 0.6}


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


async def days_to_forget(sc, chat: str, count: int, first_day: int, each_day=None) -> float:
    """Daily decay passes from T0 + first_day (each after `each_day(day)`, if given) until `count` directives
    are archived; the mean day they were."""
    forgotten: dict[str, int] = {}
    for day in range(first_day, 400):
        if each_day is not None:
            await each_day(len(forgotten))
        report = await sc.dna.decay(chat, now=T0 + day * DAY)
        forgotten.update({i: day for i in report["archived"]})
        if len(forgotten) == count:
            return statistics.mean(forgotten.values())
    raise AssertionError(f"{chat}: {len(forgotten)} of {count} forgotten in 400 days")


async def test_strategies_give_unused_directives_different_lifetimes(sidecar):
    """Daily decay passes from the start weight: the seeded draws against each strategy's decay weight
    forget a directive after about 7 + 4 / decay_weight idle days (cleanup < conservative < balanced <
    aggressive)."""
    lifetimes = {}
    for name in ("cleanup", "conservative", "balanced", "aggressive"):
        chat = f"life-{name}"
        ids = await population(sidecar, chat, 16)
        await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": name})
        lifetimes[name] = await days_to_forget(sidecar, chat, len(ids), 8)
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


INSTRUCTIONS = ("keep the replies short", "no gore, please", "more dialogue, less narration",
                "end each reply with a question", "please write in third person", "please slow down the pacing",
                "please describe the weather in each scene", "please let Elena lead the talks")


async def test_directives_shown_in_every_reply_but_never_said_again_fade_by_strategy(sidecar):
    """Issue 22: recall injected every directive before each reply and each injection was a use, so in a
    chat being played no directive ever went idle and the strategies' decay never touched one. Now a
    directive's last use is when the user said it: shown every day, never said again, eight instructions
    fade on the strategy's draws, sooner (on average) under the strategies that decay more."""
    lifetimes = {}
    for name in ("cleanup", "conservative", "balanced", "aggressive"):
        chat = f"shown-{name}"
        said = [{**m, "send_date": str(int(T0 * 1000))} for text in INSTRUCTIONS for m in turn(f"(OOC: {text})")]
        await full_sync(sidecar, chat, said)   # said at T0 (epoch ms, as an ST import may carry)
        await settle(sidecar, chat)
        await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": name})

        async def shown(gone: int, chat=chat) -> None:   # every one still there is shown, each day
            result = await recall(sidecar, chat, {"query": "what happens next?"})
            assert len(result["memories"]) >= len(INSTRUCTIONS) - gone
        lifetimes[name] = await days_to_forget(sidecar, chat, len(INSTRUCTIONS), 1, shown)
    assert lifetimes["cleanup"] < lifetimes["conservative"] < lifetimes["balanced"] < lifetimes["aggressive"], lifetimes


async def test_the_reinforce_draw_comes_back_for_what_is_used_again(sidecar):
    """The strategy's draw (more than 3 uses) runs in every reflection for the memories used since the last
    one, in any layer: it was spent once, when a short-term memory moved to long-term, and never again."""
    chat = "drawn"
    ids = await population(sidecar, chat, 40)
    await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": "conservative"})
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET access_count = 5 WHERE chat_id = ?", (chat,)))
    first = await sidecar.dna.reflect(chat, now=T0 + DAY)
    assert first["reinforced"] > 0
    idle = await sidecar.dna.reflect(chat, now=T0 + 2 * DAY)   # nothing used since: no draw
    assert idle["reinforced"] == 0
    # used again since (as a repeat is: the memory changes), long-term ones included
    await sidecar.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET rev = (SELECT node_rev FROM chats WHERE chat_id = ?) + 1 WHERE chat_id = ?", (chat, chat)))
    layers = await sidecar.store.read(lambda conn: dict(conn.execute(
        "SELECT layer, count(*) FROM nodes WHERE chat_id = ? AND id IN (%s) GROUP BY layer" % ",".join("?" * len(ids)),
        (chat, *ids)).fetchall()))
    assert layers.get("long_term", 0) > 0
    again = await sidecar.dna.reflect(chat, now=T0 + 3 * DAY)
    assert 0 < again["reinforced"] <= len(ids)
    weights = await sidecar.store.read(lambda conn: [r[0] for r in conn.execute(
        "SELECT weight FROM nodes WHERE chat_id = ? AND type = 'preference'", (chat,)).fetchall()])
    assert max(weights) == pytest.approx(DIRECTIVE_START_WEIGHT + 2 * REINFORCE_STEP)   # drawn twice
