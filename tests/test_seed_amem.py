"""Conformance with seed 000, the A-MEM evolution engine of the original ST-BME (`ST-Bionic-Memory-Ecology/
evolution.js`). Each test names the seed's lines it checks, counted from the seed document's first line (its
file name); docs/seeds.md lists every contract point (follows / differs / extends)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from conftest import full_sync
from llm_fixtures import fake, llm_sc, llm_settings  # noqa: F401
from stbme.interop import formats
from stbme.pipeline.evolve import ShownMemory, assign_decisions, decisions_of
from stbme.services import Services
from test_llm_pipeline import ingest
from test_sync_rollback import make_chat

CHAT = [{"role": "user", "name": "Alex", "text": "Who guards the vault?"},
        {"role": "assistant", "name": "N", "text": "Elena guards the vault at Greywater."},
        {"role": "user", "name": "Alex", "text": "And now?"},
        {"role": "assistant", "name": "N", "text": "Elena turns out to be the spy."}]


def seed_answer(key: str = "M1") -> dict:
    """Exactly what the seed's prompt asks for: one JSON object per new memory (seed 000, L21-L33)."""
    return {"should_evolve": True, "reason": "the spy re-colours her watch",
            "suggested_connections": [key],
            "neighbor_updates": [{"nodeId": key, "newContext": "watched the vault as a spy", "newTags": ["spy"]}]}


def test_000_L21_L33_the_seeds_single_object_is_one_decision():
    assert decisions_of(seed_answer()) == [seed_answer()]  # not mistaken for its neighbor_updates list
    assert decisions_of({"results": [seed_answer(), seed_answer("M2")]})[1]["suggested_connections"] == ["M2"]
    assert decisions_of([seed_answer()]) == [seed_answer()]


@pytest.mark.parametrize("mode", ["separate", "with_extraction"])
async def test_000_L115_L180_a_seed_shaped_answer_is_applied(llm_sc, fake, mode):
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


async def test_000_L74_L79_memories_created_together_can_link(llm_sc, fake):
    """Any other active memory may be a neighbour, the batch's own new ones included."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])  # the first batch: no older memory exists at all
    shown = [c for c in fake.calls if c["task"] == "evolve"]
    assert shown, "a batch's new memories are each other's neighbours"
    nodes = (await llm_sc.memories.list("c", limit=500))["nodes"]
    edges = await llm_sc.memories.edges("c")
    new_ids = {n["id"] for n in nodes if n["source"] == "llm"}
    assert any(e["from_id"] in new_ids and e["to_id"] in new_ids and e["strength"] == 0.7 for e in edges)


async def test_000_L59_L194_each_run_counts_evolved_connections_updates(llm_sc, fake):
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


async def test_000_L167_L178_history_round_trips_in_the_seeds_names(tmp_path, embedder, fake, llm_sc):
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


# -- the seed's answer when one call shows several new memories (issue 22) ------------------------------------
TWO_NEW = [{"op": "create", "ref": "N1", "type": "event", "fields": {"title": "Spy", "summary": CHAT[3]["text"]}},
           {"op": "create", "ref": "N2", "type": "event",
            "fields": {"title": "Vault", "summary": "Marcus seals the vault at Greywater with a rusted chain."}}]


def shown_blocks(prompt: str) -> dict[str, dict[str, float]]:
    """What the separate evolution call showed: per new memory (N1...), its neighbours' keys and similarities."""
    blocks: dict[str, dict[str, float]] = {}
    current = None
    for line in prompt.splitlines():
        head = re.match(r"## New memory \[(N\d+)\]", line)
        if head:
            current = blocks.setdefault(head.group(1), {})
        elif current is not None and (m := re.match(r"\[(M\d+)\] .* similarity ([\d.]+)$", line)):
            current[m.group(1)] = float(m.group(2))
            if "tags: spy" in line:
                blocks["spy"] = m.group(1)  # type: ignore[assignment]  (the key of the memory tagged spy)
    return blocks


def seed_model(fake, answer) -> dict:
    """A model that answers the separate evolution call in the seed's shapes, from what the call showed:
    `answer(blocks)` builds the answer. Returns what it saw, for the test's checks."""
    seen: dict = {}

    async def before(task: str) -> None:
        if task == "evolve":
            seen["blocks"] = shown_blocks(fake.calls[-1]["body"]["messages"][1]["content"])
            fake.overrides["evolve"] = answer(seen["blocks"])
    fake.before_answer = before
    return seen


def most_own_neighbour(blocks: dict[str, dict[str, float]], new: str) -> str:
    """The neighbour shown for `new` that is furthest ahead of its similarity to every other new memory."""
    return max(blocks[new], key=lambda k: blocks[new][k] - max(
        (b.get(k, 0.0) for n, b in blocks.items() if n != new), default=0.0))


def new_ids_by_title(nodes: list[dict]) -> dict[str, str]:
    return {n["fields"]["title"]: n["id"] for n in nodes if n["source"] == "llm" and n["type"] == "event"
            and n["fields"].get("title") in ("Spy", "Vault")}


@pytest.mark.parametrize("shape", ["object", "list"])
async def test_000_L115_L180_a_seed_shaped_answer_applies_to_the_memory_it_points_from(llm_sc, fake, shape):
    """The seed's call shows one new memory, so its answer does not name it. A call that showed two still
    applies such an answer: to the new memory whose neighbours its connections and updates point at
    (issue 22). The list form is the seed's object once per memory shown, in their order."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])

    def answer(blocks):
        assert len(blocks) == 2, blocks
        if shape == "object":  # one decision, about N2
            return seed_answer(most_own_neighbour(blocks, "N2"))
        return [seed_answer(most_own_neighbour(blocks, "N1")), {**seed_answer(most_own_neighbour(blocks, "N2")),
                                                                 "reason": "the chain was hers"}]
    seen = seed_model(fake, answer)
    fake.overrides["extract"] = {"operations": TWO_NEW}
    await ingest(llm_sc, "c", CHAT)
    nodes = (await llm_sc.memories.list("c", limit=500))["nodes"]
    new = new_ids_by_title(nodes)
    evolved = {n["evolution"][-1]["triggered_by"]: n for n in nodes
               if n["fields"].get("context") == "watched the vault as a spy"}
    links = {(e["data"]["from_id"], e["data"]["to_id"])
             for e in await llm_sc.dna_assets.events(chat_id="c", kind="evolve_link")}
    expected = ["Vault"] if shape == "object" else ["Spy", "Vault"]
    assert sorted(evolved) == sorted(new[t] for t in expected), seen
    for title in expected:
        assert (new[title], evolved[new[title]]["id"]) in links   # linked from the memory it is about


async def test_000_L115_L180_an_answer_that_names_no_new_memory_is_a_notice(llm_sc, fake):
    """When a seed-shaped answer cannot be tied to one of the new memories shown, nothing is applied and a
    notice says why (it was dropped silently before)."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])
    before = await llm_sc.dna_assets.events(chat_id="c", kind="evolve")
    seed_model(fake, lambda blocks: seed_answer("M99"))   # a key no memory was shown with
    fake.overrides["extract"] = {"operations": TWO_NEW}
    queue = llm_sc.live.subscribe()
    await ingest(llm_sc, "c", CHAT)
    notices = []
    while not queue.empty():
        message = queue.get_nowait()
        notices += [message["message"]] if message.get("type") == "notice" else []
    assert any("memory evolution" in n and "was not applied" in n and "names no memory shown" in n
               for n in notices), notices
    assert await llm_sc.dna_assets.events(chat_id="c", kind="evolve") == before


def test_000_L115_L180_which_memory_a_seed_decision_is_about():
    one = ShownMemory("N1", "a", {"M1": ("x", 0.9), "M2": ("y", 0.4)})
    two = ShownMemory("N2", "b", {"M2": ("y", 0.8), "M3": ("z", 0.5)})
    assign = lambda *d: [(m.key, dec["reason"]) for m, dec in assign_decisions(list(d), [one, two])[0]]  # noqa: E731
    assert assign({**seed_answer("M3"), "reason": "r"}) == [("N2", "r")]                 # only N2 was shown M3
    assert assign({**seed_answer("M2"), "reason": "r"}) == [("N2", "r")]                 # nearer to N2
    assert assign({**seed_answer("M1"), "new": "N2", "reason": "r"}) == [("N2", "r")]    # ours names it
    # A list as long as the memories shown, none with `new`: read in their order, where it fits.
    in_order = assign({**seed_answer("M1"), "reason": "1"}, {**seed_answer("M2"), "reason": "2"})
    assert in_order == [("N1", "1"), ("N2", "2")]                                        # M2 is nearer N2 anyway
    assert assign({**seed_answer("M2"), "reason": "1"}, {**seed_answer("M1"), "reason": "2"}) == [
        ("N1", "1"), ("N1", "2")]                                                        # N2 was never shown M1
    tied = ShownMemory("N2", "b", {"M1": ("x", 0.9)})
    _, why = assign_decisions([seed_answer("M1")], [one, tied])
    assert why and "points as much at the neighbours of N1 and N2" in why[0]
    assert assign_decisions([{"should_evolve": False}], [one, two]) == ([], [])         # nothing to apply anyway


async def test_000_L59_L194_the_extract_event_has_the_separate_evolutions_counts(llm_sc, fake):
    """`evolve.mode separate` runs after the batch's extract event is written; the event still ends with
    that batch's counts ({0, 0, 0} before, whatever evolved)."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])
    seed_model(fake, lambda blocks: seed_answer(most_own_neighbour(blocks, "N2")))
    fake.overrides["extract"] = {"operations": TWO_NEW}
    await ingest(llm_sc, "c", CHAT)
    last = (await llm_sc.dna_assets.events(chat_id="c", kind="extract"))[0]   # newest first
    assert last["data"]["evolution"] == {"evolved": 1, "connections": 1, "updates": 1}


@pytest.mark.parametrize("new_tags,expected", [([], []), (None, ["spy"]), ([""], ["spy"]), (["mole"], ["mole"])])
async def test_000_L161_L165_new_tags_replace_the_tags_and_an_empty_list_clears_them(llm_sc, fake, new_tags, expected):
    """`if (update.newTags && Array.isArray(update.newTags)) oldNode.clusters = update.newTags`: in JavaScript
    `[]` passes that test, so it clears the tags; null (the prompt's "no change") keeps them. A list of
    nothing usable changes nothing."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    await ingest(llm_sc, "c", CHAT[:2])
    fake.overrides["extract"] = {"operations": [TWO_NEW[0]]}
    fake.overrides["evolve"] = seed_answer()                  # tags its neighbour M1 "spy"
    await ingest(llm_sc, "c", CHAT)
    [target] = [n for n in (await llm_sc.memories.list("c", limit=500))["nodes"] if n["tags"] == ["spy"]]
    chat = CHAT + [{"role": "user", "name": "Alex", "text": "Now what?"},
                   {"role": "assistant", "name": "N", "text": "Elena slips away from the vault at night."}]
    fake.overrides["extract"] = {"operations": [{"op": "create", "ref": "N1", "type": "event",
                                                 "fields": {"title": "Gone", "summary": chat[-1]["text"]}}]}
    del fake.overrides["evolve"]
    seed_model(fake, lambda blocks: {"should_evolve": True, "reason": "she left", "neighbor_updates": [
        {"nodeId": blocks["spy"], "newContext": "left the vault", "newTags": new_tags}]})
    await ingest(llm_sc, "c", chat)
    after = await llm_sc.memories.get("c", target["id"])
    assert after["fields"]["context"] == "left the vault" and after["tags"] == expected


def test_the_extensions_format_is_detected_on_import():
    graph = formats.to_stbme_extension([], [], -1)
    assert formats.detect_format({**graph, "nodes": [{"seqRange": [0, 1]}]}) == "st-bme"
