"""Conformance with the A-MEM evolution contract of ST-BME (seed 000: shared/reference/seeds/000_a4a920d2dfa19346.txt).
Each test names the seed lines it checks; docs/seeds.md lists every contract point (follows / differs / extends)."""

from __future__ import annotations

import random

import orjson
import pytest

from conftest import full_sync
from llm_fixtures import fake, llm_sc, llm_settings  # noqa: F401
from stbme.interop import formats
from stbme.pipeline.evolve import decisions_of
from stbme.services import Services
from test_llm_pipeline import ingest
from test_sync_rollback import make_chat

CHAT = [{"role": "user", "name": "Alex", "text": "Who guards the vault?"},
        {"role": "assistant", "name": "N", "text": "Elena guards the vault at Greywater."},
        {"role": "user", "name": "Alex", "text": "And now?"},
        {"role": "assistant", "name": "N", "text": "Elena turns out to be the spy."}]


def seed_answer(key: str = "M1") -> dict:
    """Exactly what the seed's prompt asks for: one JSON object per new memory (seed 000, L17-L31)."""
    return {"should_evolve": True, "reason": "the spy re-colours her watch",
            "suggested_connections": [key],
            "neighbor_updates": [{"nodeId": key, "newContext": "watched the vault as a spy", "newTags": ["spy"]}]}


def test_000_L17_L31_the_seeds_single_object_is_one_decision():
    assert decisions_of(seed_answer()) == [seed_answer()]  # not mistaken for its neighbor_updates list
    assert decisions_of({"results": [seed_answer(), seed_answer("M2")]})[1]["suggested_connections"] == ["M2"]
    assert decisions_of([seed_answer()]) == [seed_answer()]


@pytest.mark.parametrize("mode", ["separate", "with_extraction"])
async def test_000_L100_L160_a_seed_shaped_answer_is_applied(llm_sc, fake, mode):
    """should_evolve, suggested_connections and neighbor_updates {nodeId, newContext, newTags} all take effect,
    in both ways of asking."""
    await llm_sc.settings_service.update_global({"evolve.mode": mode})
    await ingest(llm_sc, "c", CHAT[:2])
    spy = {"op": "create", "ref": "N1", "type": "event", "fields": {"title": "Spy", "summary": CHAT[3]["text"]}}
    if mode == "separate":  # one new memory, one decision in the seed's own shape
        fake.overrides["extract"] = {"operations": [spy]}
        fake.overrides["evolve"] = seed_answer()
    else:  # the decision rides on the created memory of the extraction's answer
        fake.overrides["extract"] = {"operations": [{**spy, "evolve": seed_answer()}]}
    await ingest(llm_sc, "c", CHAT)
    nodes = (await llm_sc.memories.list("c", limit=500))["nodes"]
    evolved = [n for n in nodes if n["fields"].get("context") == "watched the vault as a spy"]
    assert len(evolved) == 1 and evolved[0]["tags"] == ["spy"]
    history = evolved[0]["evolution"][-1]
    assert history["reason"] == "the spy re-colours her watch" and history["timestamp"] > 1e12  # milliseconds
    events = await llm_sc.dna_assets.events(chat_id="c", kind="evolve_link")
    assert events and events[0]["data"]["to_id"] == evolved[0]["id"]  # connections are events too


async def test_000_L73_L80_memories_created_together_can_link(llm_sc, fake):
    """Any other active memory may be a neighbour, the batch's own new ones included."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])  # the first batch: no older memory exists at all
    shown = [c for c in fake.calls if c["task"] == "evolve"]
    assert shown, "a batch's new memories are each other's neighbours"
    nodes = (await llm_sc.memories.list("c", limit=500))["nodes"]
    edges = await llm_sc.memories.edges("c")
    new_ids = {n["id"] for n in nodes if n["source"] == "llm"}
    assert any(e["from_id"] in new_ids and e["to_id"] in new_ids and e["strength"] == 0.7 for e in edges)


async def test_000_L51_each_run_counts_evolved_connections_updates(llm_sc, fake):
    seen = []
    queue = llm_sc.live.subscribe()
    await full_sync(llm_sc, "c", make_chat(random.Random(3), 4))
    await llm_sc.processor.process_chat("c")
    while not queue.empty():
        seen.append(queue.get_nowait())
    counts = [m["evolution"] for m in seen if m.get("type") == "progress" and "evolution" in m]
    assert counts and set(counts[-1]) == {"evolved", "connections", "updates"}
    extracts = await llm_sc.dna_assets.events(chat_id="c", kind="extract")
    assert all(set(e["data"]["evolution"]) == {"evolved", "connections", "updates"} for e in extracts)


async def test_000_L150_L160_history_round_trips_in_the_seeds_names(tmp_path, embedder, fake, llm_sc):
    """Exported to the original extension's format the history reads {triggeredBy, timestamp (ms), reason};
    imported back it maps to our names, with the importing chat's ids."""
    await ingest(llm_sc, "c", make_chat(random.Random(3), 5))
    graph = await llm_sc.transfer.export_chat("c", "st-bme")
    histories = [n["_evolutionHistory"] for n in graph["nodes"] if n["_evolutionHistory"]]
    assert histories and all(set(h) == {"triggeredBy", "timestamp", "reason"} for hs in histories for h in hs)
    ids = {n["id"] for n in graph["nodes"]}
    assert all(h["triggeredBy"] in ids and h["timestamp"] > 1e12 for hs in histories for h in hs)
    other = Services.open(tmp_path / "other", embedder=embedder, cli_settings=llm_settings(fake))
    try:
        await other.transfer.import_chat("c", orjson.loads(orjson.dumps(graph)))
        nodes = (await other.memories.list("c", limit=500))["nodes"]
        imported = [h for n in nodes for h in n["evolution"] if "triggered_by" in h]
        assert len(imported) == sum(len(h) for h in histories)
        own_ids = {n["id"] for n in nodes}
        assert all(h["triggered_by"] in own_ids for h in imported)
        again = await other.transfer.export_chat("c", "st-bme")
        assert sorted(h["reason"] for n in again["nodes"] for h in n["_evolutionHistory"]) == \
            sorted(h["reason"] for hs in histories for h in hs)
    finally:
        await other.close()


def test_the_extensions_format_is_detected_on_import():
    graph = formats.to_stbme_extension([], [], -1)
    assert formats.detect_format({**graph, "nodes": [{"seqRange": [0, 1]}]}) == "st-bme"
