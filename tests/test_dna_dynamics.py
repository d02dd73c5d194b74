"""DNA dynamics over simulated time: reinforcement, decay, archiving (never deleting), layers, scheduler."""

from __future__ import annotations

import time

import pytest

from conftest import create_node, full_sync, recall, settle
from stbme.dna.strategy import DAY

T0 = 1_700_000_000.0


async def make_chat(sc, chat_id: str, n: int = 6, *, pinned=(), locked=(), rule=()) -> list[str]:
    await full_sync(sc, chat_id, [{"role": "user", "name": "Alex", "text": "hello"}])
    ids = []
    for i in range(n):
        body = {"type": "rule", "fields": {"title": f"rule {i}", "constraint": f"no magic {i}"}} if i in rule else \
            {"type": "event", "fields": {"summary": f"memory number {i} about the tower"}}
        node = await create_node(sc, chat_id, {**body, "pinned": i in pinned, "locked": i in locked})
        ids.append(node["id"])
    # everything was made and last used at T0
    await sc.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET created_at = ?, last_access = ? WHERE chat_id = ?", (T0, T0, chat_id)))
    await settle(sc, chat_id)
    return ids


async def weights(sc, chat_id: str) -> dict[str, tuple[float, bool]]:
    rows = await sc.store.read(lambda conn: conn.execute(
        "SELECT id, weight, archived FROM nodes WHERE chat_id = ? AND source = 'manual'", (chat_id,)).fetchall())
    return {r["id"]: (r["weight"], bool(r["archived"])) for r in rows}


async def test_nothing_decays_within_decay_days(sidecar):
    ids = await make_chat(sidecar, "c")
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup"})
    for day in range(1, 8):
        report = await sidecar.dna.decay("c", now=T0 + day * DAY)
        assert report["decayed"] == 0
    assert all(w == (1.0, False) for w in (await weights(sidecar, "c")).values())
    assert len(ids) == 6


async def test_decay_over_simulated_days_archives_and_never_deletes(sidecar):
    ids = await make_chat(sidecar, "c", 8, pinned={0}, locked={1}, rule={2})
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup", "dna.decay_rate": 0.2})
    history = []
    for day in range(8, 40):
        await sidecar.dna.decay("c", now=T0 + day * DAY)
        history.append(await weights(sidecar, "c"))
    final = history[-1]
    exempt = set(ids[:3])
    assert all(final[i] == (1.0, False) for i in exempt)  # pinned, locked, rule
    others = [i for i in ids if i not in exempt]
    assert all(final[i][1] for i in others), final  # 32 idle days under cleanup: all archived
    # weights only went down, by 0.2 per idle day decayed, and a memory was archived under 0.2
    for i in others:
        series = [h[i][0] for h in history]
        assert series == sorted(series, reverse=True)
        first_archived = next(h[i][0] for h in history if h[i][1])
        assert first_archived < 0.2
    # nothing deleted; archive events say why; restore works
    assert (await sidecar.memories.list("c", archived=None, limit=100))["total"] >= 8
    events = await sidecar.dna_assets.events(chat_id="c", kind="archive", limit=100)
    assert {e["data"]["node_id"] for e in events} == set(others)
    assert all(e["data"]["reason"] == "decay" for e in events)
    restored = await sidecar.memories.act("c", others[0], "restore")
    assert restored["archived"] is False


async def test_decay_is_reproducible_with_the_chat_seed(sidecar):
    results = []
    for chat in ("same", "same-copy"):
        ids = await make_chat(sidecar, chat, 12)
        await sidecar.settings_service.update_chat(chat, {"dna.evolution_strategy": "balanced"})
        trace = []
        for day in range(8, 30):
            await sidecar.dna.decay(chat, now=T0 + day * DAY)
            w = await weights(sidecar, chat)
            trace.append([w[i] for i in ids])
        results.append(trace)
    # the generator is seeded by the chat id: two chats differ, but the same chat replays the same
    assert results[0] != results[1]
    await sidecar.store.write(lambda conn: (
        conn.execute("UPDATE nodes SET weight = 1, archived = 0 WHERE chat_id = 'same'"),
        conn.execute("DELETE FROM dna_state WHERE chat_id = 'same'")))
    ids = [i for i in (await weights(sidecar, "same"))]
    replay = []
    for day in range(8, 30):
        await sidecar.dna.decay("same", now=T0 + day * DAY)
        w = await weights(sidecar, "same")
        replay.append(sorted(w.values()))
    assert replay == [sorted(step) for step in results[0]]
    assert len(ids) == 12


async def test_decay_step_is_capped_by_the_interval(sidecar):
    """A chat left alone for months loses at most one interval's worth per pass."""
    ids = await make_chat(sidecar, "c", 3)
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup", "dna.decay_rate": 0.1})
    await sidecar.dna.decay("c", now=T0 + 8 * DAY)
    report = await sidecar.dna.decay("c", now=T0 + 100 * DAY)
    assert report["step_days"] == pytest.approx(1.0)
    assert all(w >= 0.8 - 1e-9 for w, _ in (await weights(sidecar, "c")).values())
    assert ids


async def test_recall_reinforces_weight(sidecar):
    """What recall injects for a query gains weight (directives, shown in every block, do not: test_dna_weight)."""
    await full_sync(sidecar, "c", [{"role": "user", "name": "Alex", "text": "hello"}])
    node = await create_node(sidecar, "c", {"type": "event", "fields": {"summary": "the duel's slow pacing"}})
    later = [{"role": ("assistant", "user")[i % 2], "name": "Alex", "text": f"line {i}"} for i in range(12)]
    await full_sync(sidecar, "c", [{"role": "user", "name": "Alex", "text": "hello"}] + later)  # out of the prompt
    await settle(sidecar, "c")
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET weight = 0.55 WHERE id = ?", (node["id"],)))
    for expected in (0.65, 0.75):
        result = await recall(sidecar, "c", {"query": "pacing"})
        assert node["id"] in [m["id"] for m in result["memories"]]
        sidecar.recall.reinforcement.flush()          # the counted injections are queued now,
        await sidecar.store.write(lambda conn: None)  # before this write
        assert (await sidecar.memories.get("c", node["id"]))["weight"] == pytest.approx(expected)
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET weight = 0.97 WHERE id = ?", (node["id"],)))
    await recall(sidecar, "c", {"query": "pacing"})
    sidecar.recall.reinforcement.flush()
    await sidecar.store.write(lambda conn: None)
    assert (await sidecar.memories.get("c", node["id"]))["weight"] == 1.0


async def layers(sc, chat_id):
    return (await sc.dna.chat_stats(chat_id))["layers"]


async def test_layers_consolidate(sidecar):
    ids = await make_chat(sidecar, "c", 10)
    await sidecar.settings_service.update_chat("c", {"dna.max_short_term": 4, "dna.max_long_term": 3})
    assert await layers(sidecar, "c") == {"working": 10, "short_term": 0, "long_term": 0}
    report = await sidecar.dna.reflect("c", now=T0 + 1 * DAY)   # nothing idle for 7 days yet: none archived
    assert report["to_short_term"] == 10
    assert report["layers"]["short_term"] == 4 and report["layers"]["long_term"] == 6
    assert report["archived"] == []
    report = await sidecar.dna.reflect("c", now=T0 + 10 * DAY)  # idle now: long-term over capacity by 3
    assert report["layers"] == {"working": 0, "short_term": 4, "long_term": 3}
    assert len(report["archived"]) == 3   # the weakest of the 6 long-term ones; short-term ones stay
    assert set(report["archived"]) <= set(ids)
    kinds = {e["kind"] for e in await sidecar.dna_assets.events(chat_id="c", limit=50)}
    assert {"reflect", "archive"} <= kinds


async def test_often_used_short_term_memories_are_promoted(sidecar):
    await make_chat(sidecar, "c", 20)
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "conservative"})
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET access_count = 5 WHERE chat_id = 'c'"))
    report = await sidecar.dna.reflect("c", now=T0 + DAY)
    assert 0 < report["reinforced"] < 20 and report["to_long_term"] == report["reinforced"]


async def test_scheduler_runs_passes_only_when_due_and_changed(sidecar):
    await make_chat(sidecar, "c", 3)
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup"})
    now = time.time()
    done = await sidecar.dna_scheduler.run_due(now)
    assert done["decayed"] == [] and done["reflected"] == ["c"]   # first sight: starts the decay clock
    done = await sidecar.dna_scheduler.run_due(now + 60)
    assert done == {"decayed": [], "reflected": []}               # nothing changed, nothing due
    # a day later, after the chat was used: decay is due (and the idle memories decay)
    await sidecar.store.write(lambda conn: conn.execute(
        "UPDATE dna_state SET last_decay_at = ? WHERE chat_id = 'c'", (now - 25 * 3600,)))
    await recall(sidecar, "c", {"query": "tower"})
    await sidecar.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET last_access = ?, created_at = ? WHERE chat_id = 'c' AND source = 'manual'", (T0, T0)))
    await sidecar.store.write(lambda conn: conn.execute("UPDATE chats SET updated_at = ? WHERE chat_id = 'c'", (now,)))
    done = await sidecar.dna_scheduler.run_due(now + 120)
    assert done["decayed"] == ["c"]
    # a chat nobody touched since its last pass does not decay, however long it waits
    done = await sidecar.dna_scheduler.run_due(now + 3 * DAY)
    assert done["decayed"] == []


async def test_reflect_after_trigger_count(sidecar):
    await make_chat(sidecar, "c", 2)
    await sidecar.settings_service.update_chat("c", {"dna.reflect_trigger": 3})
    now = time.time()
    assert (await sidecar.dna_scheduler.run_due(now))["reflected"] == ["c"]
    for i in range(3):
        await create_node(sidecar, "c", {"type": "event", "fields": {"summary": f"new {i}"}})
    assert (await sidecar.dna_scheduler.run_due(now + 60))["reflected"] == ["c"]  # well before 30 minutes


async def test_raw_chat_events_fade_but_are_never_forgotten(sidecar):
    """Per-message events are the chat's own record: decay lowers their weight (and rank) but never
    archives them, and they do not fill the long-term capacity that archives derived memories."""
    chat = []
    for i in range(6):
        chat += [{"role": "user", "name": "Alex", "text": f"Tell me about tower {i}"},
                 {"role": "assistant", "name": "Elena", "text": f"Tower {i} is made of grey stone"}]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    await sidecar.store.write(lambda conn: conn.execute(
        "UPDATE nodes SET created_at = ?, last_access = ? WHERE chat_id = ?", (T0, T0, "c")))
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "cleanup", "dna.decay_rate": 0.2})
    for day in range(8, 30):
        await sidecar.dna.decay("c", now=T0 + day * DAY)
    rows = await sidecar.store.read(lambda conn: conn.execute(
        "SELECT weight, archived FROM nodes WHERE chat_id = 'c' AND source = 'heuristic' AND type = 'event'"
    ).fetchall())
    assert rows and all(r["weight"] < 0.2 and not r["archived"] for r in rows)
    result = await recall(sidecar, "c", {"query": "tower 1 grey stone", "budget_tokens": 300})
    assert "Tower 1" in result["text"]  # still found, just ranked lower
