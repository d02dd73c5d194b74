"""The LLM stages against the scripted OpenAI-compatible server over real HTTP: extraction, dedupe,
A-MEM evolution, maintenance, failure handling, and the property that matters most: after edits,
deletes and swipes the memories equal a fresh ingest (with the same scripted answers)."""

from __future__ import annotations

import random
import re

import orjson
import pytest

from conftest import full_sync, recall
from llm_fixtures import fake, llm_sc, llm_settings  # noqa: F401
from stbme.llm.base import LLMError
from stbme.llm.answer_schemas import ANSWER_SCHEMAS
from stbme.pipeline.extract import ANSWER_SCHEMA, smart_score, strip_tags, unread_from
from stbme.pipeline.operations import CREATABLE, canonical_type, parse_operations
from stbme.pipeline.sync import Message
from stbme.services import Services
from test_sync_rollback import line, make_chat, random_edit


async def ingest(sc, chat_id: str, chat: list[dict]) -> dict:
    await full_sync(sc, chat_id, chat)
    await sc.processor.process_chat(chat_id)
    return await snapshot(sc, chat_id)


def rows_snapshot(conn, chat_id: str) -> tuple[dict, set[str]]:
    """A chat's memories without ids and times (content, flags, edges by content), and the ids of the
    nodes that should be in its vector index."""
    nodes = conn.execute("SELECT id, type, fields, seq_from, seq_to, archived, importance, pinned, locked, level,"
                         " tags, source, embedding IS NOT NULL AS embedded FROM nodes WHERE chat_id = ?",
                         (chat_id,)).fetchall()
    edges = conn.execute("SELECT from_id, to_id, relation, strength, inhibitory, invalid_at IS NULL AS valid"
                         " FROM edges WHERE chat_id = ?", (chat_id,)).fetchall()
    upto = conn.execute("SELECT processed_upto FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()[0]
    key = {n["id"]: (n["type"], n["fields"], n["seq_from"], n["seq_to"], n["level"]) for n in nodes}
    return {
        "nodes": sorted((*key[n["id"]], n["archived"], n["importance"], n["pinned"], n["locked"], n["tags"],
                         n["source"]) for n in nodes),
        "edges": sorted((key[e["from_id"]], e["relation"], key[e["to_id"]], e["strength"], e["inhibitory"], e["valid"])
                        for e in edges),
        "processed_upto": upto,
    }, {n["id"] for n in nodes if not n["archived"] and n["embedded"]}


async def snapshot(sc, chat_id: str) -> dict:
    """Memories without ids and times, plus index consistency."""
    snap, indexable = await sc.store.read(lambda conn: rows_snapshot(conn, chat_id))
    index = await sc.indexes.vectors.get(chat_id)
    assert set(index.rev_of) == indexable
    return snap


def llm_nodes(snap: dict, type_: str | None = None) -> list:
    return [n for n in snap["nodes"] if n[-1] == "llm" and (type_ is None or n[0] == type_)]


MAINTAIN_OFTEN = {"maintain.summary_every": 2, "maintain.synopsis_every": 3, "maintain.reflect_every": 4,
                  "maintain.compress_every": 4, "maintain.summary_fan_in": 2}


# -- pure parts -------------------------------------------------------------------------------------
def test_parse_operations_is_tolerant():
    ops = parse_operations({"memories": [
        {"action": "add", "type": "character", "name": "Elena", "state": "wounded", "clusters": ["x"]},
        {"type": "event", "node_id": "[m2]", "fields": {"summary": "s"}},
        {"operation": "remove", "id": "M3"},
        {"op": "create", "type": "event", "fields": {"summary": "e"},
         "relations": [{"targetRef": "n1", "relation": "weird"}, {"target": "M1", "action": "unlink"}]},
        "junk"]})
    assert [o["op"] for o in ops] == ["create", "update", "delete", "create"]
    assert ops[0]["fields"] == {"name": "Elena", "state": "wounded"} and ops[0]["tags"] == ["x"]
    assert ops[1]["target"] == "M2" and ops[2]["target"] == "M3"
    assert ops[3]["links"] == [{"target": "N1", "relation": "related", "strength": 0.8, "remove": False},
                               {"target": "M1", "relation": "related", "strength": 0.8, "remove": True}]
    assert parse_operations({"op": "delete", "id": "M1"})[0]["op"] == "delete"  # a lone operation
    assert parse_operations([]) == []


def test_a_type_in_the_models_own_words_is_the_schemas():
    # what a real small model writes (issue 20 item 9): case, plurals, hyphens and common synonyms
    written = ["Person", "places", "Events", "plot-line", " world rule ", "NPC", "pov_memory", "weather", None]
    assert [canonical_type(t) for t in written] == ["character", "location", "event", "thread", "rule",
                                                    "character", "pov_memory", "weather", ""]
    ops = parse_operations([{"type": "Person", "name": "Elena", "state": "wounded"}])
    assert ops[0]["type"] == "character" and ops[0]["fields"] == {"name": "Elena", "state": "wounded"}


def test_reasoning_blocks_are_removed():
    text = "<think>secret plan</think>Hello <analysis a='1'>x</analysis>there <reasoning>unfinished"
    assert strip_tags(text, "think,analysis,reasoning") == "Hello there"


def test_smart_trigger_scores_plot_turns():
    calm = [Message(0, "assistant", "E", "we walk on")]
    turn = [Message(0, "user", "A", "Suddenly the secret is out!"), Message(1, "assistant", "E", "What?! Marcus?")]
    assert smart_score(calm, "") < 2 <= smart_score(turn, "")
    assert smart_score(calm, "walk") >= 2  # a user pattern adds 2


# -- extraction -------------------------------------------------------------------------------------
async def test_extraction_builds_structured_memories(llm_sc, fake):
    chat = [{"role": "user", "name": "Alex", "text": "Where is Elena? <think>the user plots</think>"},
            {"role": "assistant", "name": "Narrator", "text": "Elena waits in Ashford with the map."},
            {"role": "user", "name": "Alex", "text": "I go to her."},
            {"role": "assistant", "name": "Narrator", "text": "Elena is wounded now; she still guards the map!"}]
    snap = await ingest(llm_sc, "c", chat)
    assert fake.tasks().count("extract") == 2  # one batch per assistant message
    first_prompt = fake.calls[0]["body"]["messages"][1]["content"]
    assert "the user plots" not in first_prompt and "[stbme:extract]" in fake.calls[0]["body"]["messages"][0]["content"]
    characters = [n for n in snap["nodes"] if n[0] == "character" and orjson.loads(n[1])["name"] == "Elena"]
    assert len(characters) == 1  # created once, then updated through its key
    assert orjson.loads(characters[0][1])["state"].startswith("Elena is wounded")
    second_prompt = next(c for c in fake.calls[1:] if c["task"] == "extract")["body"]["messages"][1]["content"]
    assert "[M1] character: name: Elena" in second_prompt  # shown under a key, never a real id
    assert "n_" not in second_prompt.split("## Existing memories")[1]
    # the state change is an event with an `updates` edge, and a temporal chain
    updates = [e for e in snap["edges"] if e[1] == "updates"]
    assert len(updates) == 1 and orjson.loads(updates[0][0][1])["summary"].startswith("character state update")
    assert {n[0] for n in llm_nodes(snap)} >= {"location", "event"}
    assert characters[0][-1] == "heuristic"  # the heuristic's recurring-name anchor, upgraded to a character
    assert llm_nodes(snap, "location")[0][1] == '{"name":"Ashford"}'
    # heuristic per-message events stay as the raw layer
    assert len([n for n in snap["nodes"] if n[0] == "event" and n[-1] == "heuristic"]) == 4
    usage = (await llm_sc.health.report())["llm"]["usage"]
    assert usage["tasks"]["extract"]["calls"] == 2 and usage["total"]["prompt_tokens"] > 100


async def test_invented_keys_are_ignored(llm_sc, fake):
    fake.overrides["extract"] = {"operations": [
        {"op": "update", "id": "M7", "fields": {"state": "ghost"}},
        {"op": "update", "id": "n_0123456789abcdef0123", "fields": {"state": "ghost"}},
        {"op": "delete", "id": "M1"},
        {"op": "create", "type": "event", "ref": "N1", "fields": {"summary": "A real event"},
         "links": [{"target": "M42", "relation": "related"}, {"target": "N9", "relation": "related"}]},
        {"op": "create", "type": "spaceship", "fields": {"name": "x"}}]}
    snap = await ingest(llm_sc, "c", [{"role": "user", "name": "A", "text": "hi"},
                                      {"role": "assistant", "name": "B", "text": "hello"}])
    assert [orjson.loads(n[1])["summary"] for n in llm_nodes(snap)] == ["A real event"]
    assert not any("ghost" in n[1] for n in snap["nodes"]) and not any(n[5] for n in snap["nodes"])
    assert not [e for e in snap["edges"] if e[1] == "related" and "A real event" in e[0][1]]


async def test_contradiction_invalidates_the_old_fact(llm_sc, fake):
    chat = [{"role": "user", "name": "A", "text": "What did we find?"},
            {"role": "assistant", "name": "N", "text": "Elena found the map in the vault."},
            {"role": "user", "name": "A", "text": "Look closer."},
            {"role": "assistant", "name": "N", "text": "The map is fake, Elena realises."}]
    snap = await ingest(llm_sc, "c", chat)
    contra = [e for e in snap["edges"] if e[1] == "contradicts"]
    assert len(contra) == 1 and contra[0][4] == 1  # inhibitory
    old = [n for n in llm_nodes(snap, "event") if "found the map" in n[1]]
    assert old and old[0][5] == 1  # archived: no longer current, restorable


@pytest.mark.parametrize("mode", ["with_extraction", "separate"])
async def test_locked_memories_are_never_rewritten(llm_sc, fake, mode):
    elena = await evolve_around_locked_elena(llm_sc, mode)
    after = await llm_sc.memories.get("c", elena["id"])
    assert (after["fields"], after["evolution"], after["tags"]) == (elena["fields"], elena["evolution"], elena["tags"])
    assert evolution_was_asked(fake, mode)


async def evolve_around_locked_elena(sc, mode: str) -> dict:
    """Elena remembered, then locked, then a batch whose evolution would rewrite her: her memory as locked."""
    await sc.settings_service.update_global({"evolve.mode": mode})
    chat = [{"role": "user", "name": "A", "text": "Hi"},
            {"role": "assistant", "name": "N", "text": "Elena waits by the lighthouse."}]
    await ingest(sc, "c", chat)
    elena = (await sc.memories.list("c", type_="character", contains="Elena"))["nodes"][0]
    await sc.memories.act("c", elena["id"], "lock")
    chat += [{"role": "user", "name": "A", "text": "And then?"},
             {"role": "assistant", "name": "N", "text": "Elena is captured near the lighthouse."}]
    await ingest(sc, "c", chat)
    return elena


def evolution_was_asked(fake, mode: str) -> bool:
    """In the separate mode an evolve call; with the extraction, the extract prompt carries the duty."""
    if mode == "separate":
        return "evolve" in fake.tasks()
    return "evolve" not in fake.tasks() and all(
        "Evolution:" in c["body"]["messages"][0]["content"] for c in fake.calls if c["task"] == "extract")


# -- dedupe -----------------------------------------------------------------------------------------
async def test_dedupe_skips_and_merges(llm_sc, fake):
    fake.overrides["extract"] = {"operations": [
        {"op": "create", "type": "rule", "fields": {"title": "No magic", "constraint": "magic is forbidden in town"}}]}
    chat = [{"role": "user", "name": "A", "text": "rules?"}, {"role": "assistant", "name": "N", "text": "none"}]
    snap = await ingest(llm_sc, "c", chat)
    assert len(llm_nodes(snap, "rule")) == 1 and "dedupe" not in fake.tasks()
    chat += [{"role": "user", "name": "A", "text": "again?"}, {"role": "assistant", "name": "N", "text": "same"}]
    snap = await ingest(llm_sc, "c", chat)  # the identical rule again: similarity 1.0 -> skip
    assert fake.tasks().count("dedupe") == 1
    assert len(llm_nodes(snap, "rule")) == 1
    fake.overrides["extract"] = {"operations": [
        {"op": "create", "type": "rule", "fields": {"title": "No magic", "constraint": "magic is forbidden in town "
                                                                                        "after dark"}}]}
    fake.overrides["dedupe"] = {"decisions": [{"new": "N1", "action": "merge", "target": "M1", "fields": {
        "title": "No magic", "constraint": "magic is forbidden in town after dark"}}]}
    chat += [{"role": "user", "name": "A", "text": "more?"}, {"role": "assistant", "name": "N", "text": "night"}]
    snap = await ingest(llm_sc, "c", chat)
    rules = llm_nodes(snap, "rule")
    assert len(rules) == 1 and "after dark" in rules[0][1] and rules[0][3] == 5  # merged, range widened


# -- evolution --------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["with_extraction", "separate"])
async def test_evolution_links_and_updates_only_shown_neighbours(llm_sc, fake, mode):
    await llm_sc.settings_service.update_global({"evolve.mode": mode})
    chat = make_chat(random.Random(3), 5)
    snap = await ingest(llm_sc, "c", chat)
    assert evolution_was_asked(fake, mode)
    # at most one evolution call per batch with new memories (never one per memory), or none at all
    assert len([c for c in fake.calls if c["task"] == "evolve"]) <= fake.tasks().count("extract")
    evolved = [n for n in snap["nodes"] if '"context":"Seen again' in n[1]]
    assert evolved and all(n[9] for n in evolved)  # tags set
    nodes = (await llm_sc.memories.list("c", limit=500))["nodes"]
    history = [n for n in nodes if n["evolution"]]
    assert history and all(h["evolution"][-1]["triggered_by"].startswith("n_") for h in history)
    events = await llm_sc.store.read(lambda conn: conn.execute(
        "SELECT count(*) FROM events WHERE chat_id = 'c' AND kind = 'evolve'").fetchone()[0])
    assert events >= len(history)
    assert not any("invented key" in n[1] for n in snap["nodes"])  # M999 was never shown


async def test_evolution_failure_degrades(llm_sc, fake):
    """A failed separate evolution call keeps the batch's memories and marks it to be redone."""
    await llm_sc.settings_service.update_global({"evolve.mode": "separate"})
    fake.garbage_tasks.add("evolve")
    snap = await ingest(llm_sc, "c", make_chat(random.Random(4), 3))
    assert snap["processed_upto"] == 5 and llm_nodes(snap, "character")
    assert not any('"context"' in n[1] for n in snap["nodes"])
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0


# -- maintenance ------------------------------------------------------------------------------------
async def test_maintenance_summaries_rollups_synopsis_reflection_compression(tmp_path, embedder, fake):
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=llm_settings(fake, **MAINTAIN_OFTEN))
    try:
        snap = await ingest(sc, "c", make_chat(random.Random(5), 16))
    finally:
        await sc.close()
    tasks = fake.tasks()
    assert tasks.count("summary") == 8 and tasks.count("synopsis") == 5 and tasks.count("reflect") == 4
    summaries = llm_nodes(snap, "summary")
    assert {n[4] for n in summaries} >= {0, 1, 2}  # levels
    active = [n for n in summaries if not n[5]]
    assert all(sum(1 for n in active if n[4] == lvl) <= 2 for lvl in range(4))  # each level folded at fan-in
    assert len([n for n in llm_nodes(snap, "synopsis") if not n[5]]) == 1
    reflections = llm_nodes(snap, "reflection")
    assert reflections and any(e[1] == "evolves" for e in snap["edges"])
    compressed = [n for n in llm_nodes(snap, "event") if n[4] >= 1]
    assert compressed and "compress" in tasks
    children = [n for n in llm_nodes(snap, "event") if n[4] == 0 and n[5]]
    assert len(children) >= 3  # archived under their summary node


async def test_every_task_asks_with_its_answer_schema(tmp_path, embedder, fake):
    """Each LLM task sends its answer's JSON Schema (a grammar on llama.cpp-style servers), extraction with the
    types it may create; the fake fixture checks that each scripted answer the stages read fits it."""
    settings = llm_settings(fake, **MAINTAIN_OFTEN, **{"evolve.mode": "separate"})
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=settings)
    try:
        await ingest(sc, "c", make_chat(random.Random(5), 16))
    finally:
        await sc.close()
    formats = {c["task"]: c["body"]["response_format"] for c in fake.calls}
    assert {"extract", "evolve", "summary", "synopsis", "reflect", "compress"} <= set(formats)
    assert all(f["type"] == "json_schema" and f["json_schema"]["schema"] == (
        ANSWER_SCHEMA if task == "extract" else ANSWER_SCHEMAS[task]) for task, f in formats.items())
    kinds = ANSWER_SCHEMA["properties"]["operations"]["items"]["anyOf"]
    creates = {k["properties"]["type"]["const"]: k for k in kinds if k["properties"]["op"]["const"] == "create"}
    assert list(creates) == list(CREATABLE) and creates["event"]["properties"]["fields"]["required"] == ["summary"]
    assert "contradicts" in creates["event"]["properties"]["links"]["items"]["properties"]["relation"]["enum"]


async def test_maintenance_failure_degrades(tmp_path, embedder, fake):
    fake.garbage_tasks |= {"summary", "synopsis"}
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=llm_settings(fake, **MAINTAIN_OFTEN))
    try:
        snap = await ingest(sc, "c", make_chat(random.Random(6), 4))
    finally:
        await sc.close()
    assert snap["processed_upto"] == 7 and not llm_nodes(snap, "summary") and llm_nodes(snap, "event")


# -- failures ---------------------------------------------------------------------------------------
async def test_dead_llm_parks_the_batch_and_loses_nothing(llm_sc, fake):
    await llm_sc.settings_service.update_global({"llm.degrade_when_down": False})
    chat = make_chat(random.Random(7), 2)
    await full_sync(llm_sc, "c", chat)
    fake.statuses = [500] * 100
    with pytest.raises(LLMError, match="failed after 2 attempts: HTTP 500"):
        await llm_sc.processor.process_chat("c")
    status = await llm_sc.chats.status("c")
    assert status["processed_upto"] == -1 and status["nodes"] == 0  # nothing half-written
    fake.statuses = []
    snap = await ingest(llm_sc, "c", chat)
    assert snap["processed_upto"] == 3 and llm_nodes(snap, "event")


async def test_dead_llm_degrades_then_the_batches_are_redone(llm_sc, fake):
    """While the LLM is down the chat still gets its heuristic memories; once it answers again the
    batches made without it are undone and redone, ending exactly where a fresh ingest ends."""
    chat = make_chat(random.Random(7), 3)
    await full_sync(llm_sc, "c", chat)
    fake.statuses = [500] * 1000
    await llm_sc.processor.process_chat("c")
    status = await llm_sc.chats.status("c")
    assert status["processed_upto"] == 5 and status["degraded_from"] == 0 and status["nodes"] > 0
    calls = len(fake.calls)
    assert calls == 2  # one failing batch (with its retry); later batches did not wait on the dead LLM
    degraded = await snapshot(llm_sc, "c")
    assert not llm_nodes(degraded, "event")
    fake.statuses = []
    await llm_sc.processor.process_chat("c")  # still inside the retry pause: nothing redone yet
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0
    llm_sc.memory_llm.health.reset()  # the pause is over
    await llm_sc.processor.process_chat("c")
    live = await snapshot(llm_sc, "c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] is None and llm_nodes(live, "event")
    fresh = await ingest(llm_sc, "fresh", chat)
    assert live == fresh


async def test_an_unreadable_answer_does_not_pause_the_llm_for_the_next_batches(llm_sc, fake):
    """A model that answers one batch unreadably (SmolLM2-135M cut off three times in a row) is still asked
    for the next batches: only that batch is made without it, and redone after the retry pause. Before, one
    such answer paused the LLM like an outage, and a bulk ingest made the next 210 messages without it."""
    chat = make_chat(random.Random(7), 3)
    await full_sync(llm_sc, "c", chat)
    attempts = llm_sc.settings["llm.json_retries"] + 2  # the extraction's own retries for unreadable answers
    fake.garbage = attempts
    await llm_sc.processor.process_chat("c")
    status = await llm_sc.chats.status("c")
    assert status["processed_upto"] == 5 and status["degraded_from"] == 0
    assert fake.tasks().count("extract") == attempts + 2  # the two later batches asked, and answered
    assert llm_nodes(await snapshot(llm_sc, "c"), "event")
    await llm_sc.processor.process_chat("c")  # inside the retry pause: the failed batch is not redone yet
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0
    assert fake.tasks().count("extract") == attempts + 2
    llm_sc.memory_llm.health.reset()  # the pause is over
    await llm_sc.processor.process_chat("c")
    live = await snapshot(llm_sc, "c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] is None
    assert live == await ingest(llm_sc, "fresh", chat)


def extract_reads(fake) -> list[list[int]]:
    """The message indexes each extraction call was asked to extract from, call by call."""
    return [[int(i) for i in re.findall(r"^#(\d+) \[", c["body"]["messages"][1]["content"].split(
        "## NEW messages")[1], re.M)] for c in fake.calls if c["task"] == "extract"]


async def test_a_batch_after_a_degraded_one_reads_only_its_own_messages(llm_sc, fake):
    """The batch after one made without the LLM does not reach back over it: that batch is redone by itself
    later, so reading it again doubled the prompt for an answer the redo throws away."""
    await full_sync(llm_sc, "c", make_chat(random.Random(7), 3))
    fake.garbage = llm_sc.settings["llm.json_retries"] + 2  # every attempt of the first batch unreadable
    await llm_sc.processor.process_chat("c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0
    assert extract_reads(fake)[-2:] == [[2, 3], [4, 5]]


async def test_after_an_outage_the_redo_comes_before_new_batches(llm_sc, fake):
    """Messages that came during an outage are processed after the degraded batches are redone, each batch
    reading its own messages: before, the first new batch asked the LLM about the whole degraded range
    (43,517 tokens after one outage with the local model), and the redo then undid that answer."""
    chat = make_chat(random.Random(7), 5)
    await full_sync(llm_sc, "c", chat[:6])
    fake.statuses = [500] * 1000
    await llm_sc.processor.process_chat("c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0
    await full_sync(llm_sc, "c", chat)  # the chat went on meanwhile
    fake.statuses = []
    fake.calls.clear()
    llm_sc.memory_llm.health.reset()  # the pause is over
    await llm_sc.processor.process_chat("c")
    assert extract_reads(fake) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert (await llm_sc.chats.status("c"))["degraded_from"] is None
    assert await snapshot(llm_sc, "c") == await ingest(llm_sc, "fresh", chat)


def test_the_extraction_reads_back_only_as_far_as_its_groups_reach():
    assert unread_from(10, None, 14, 3) == 11  # the replies it was not due for yet
    assert unread_from(13, None, 14, 3) == 14
    assert unread_from(-1, None, 2000, 3) == 2000 - 6 - 16  # llm.mode was none: not the whole history
    assert unread_from(-1, 4, 8, 1) == 8  # a degraded batch is redone by itself
    assert unread_from(9, 12, 10, 1) == 10  # degraded later than this batch: an ordinary batch


async def test_an_llm_switched_on_later_reads_the_recent_messages_not_the_whole_chat(tmp_path, embedder, fake):
    """A chat made with `llm.mode none` whose LLM is switched on: the first call reads the new batch and
    the replies just before it, not the whole history in one prompt (which overflowed the answer)."""
    chat = make_chat(random.Random(5), 30)
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings={"llm.mode": "none"})
    try:
        await full_sync(sc, "c", chat[:56])
        await sc.processor.process_chat("c")
    finally:
        await sc.close()
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=llm_settings(fake))
    try:
        await full_sync(sc, "c", chat)
        await sc.processor.process_chat("c")
    finally:
        await sc.close()
    reads = extract_reads(fake)
    assert reads[0] == list(range(56 - 2 - 16, 58)) and reads[1:] == [[58, 59]]


@pytest.mark.parametrize("fault, words, not_words", [
    ("garbage", "the memory LLM answered, but not with JSON the sidecar can read", "unreachable"),
    ("dead", "the memory LLM is unreachable", "not with JSON"),
])
async def test_the_notice_says_what_went_wrong(llm_sc, fake, fault, words, not_words):
    queue = llm_sc.live.subscribe()
    if fault == "garbage":
        fake.garbage_tasks = {"extract"}
    else:
        fake.statuses = [500] * 1000
    await full_sync(llm_sc, "c", make_chat(random.Random(3), 1))
    await llm_sc.processor.process_chat("c")
    notices = []
    while not queue.empty():
        message = queue.get_nowait()
        if message["type"] == "notice" and message["level"] == "warning":
            notices.append(message["message"])
    assert notices and words in notices[0] and not_words not in notices[0], notices
    assert "got memories without it" in notices[0]


async def test_garbage_json_is_retried_with_a_reminder(llm_sc, fake):
    fake.garbage = 1
    snap = await ingest(llm_sc, "c", make_chat(random.Random(8), 1))
    retry = fake.calls[1]["body"]["messages"]
    assert fake.calls[0]["task"] == fake.calls[1]["task"] == "extract"
    assert retry[-2]["role"] == "assistant" and "not valid JSON" in retry[-1]["content"]
    assert llm_nodes(snap, "event")


async def test_stale_batch_is_dropped_not_written(llm_sc, fake):
    chat = make_chat(random.Random(9), 2)
    await full_sync(llm_sc, "c", chat)
    edited = [dict(m) for m in chat]
    edited[1]["text"] = "Rewritten while the LLM was thinking about Tomas."
    state = {"done": False}

    async def edit_once(task):
        if task == "extract" and not state["done"]:
            state["done"] = True
            await full_sync(llm_sc, "c", edited)

    fake.before_answer = edit_once
    await llm_sc.processor.process_chat("c")
    fake.before_answer = None
    live = await snapshot(llm_sc, "c")
    fresh = await ingest(llm_sc, "fresh", edited)
    assert live == fresh


# -- the property: rollback equals a fresh ingest ---------------------------------------------------
# The defaults batch the LLM extraction over several assistant messages (and extract early on a plot turn)
# while the per-message memories come every message: an edit inside an LLM range must undo that whole range.
DEFAULT_BATCHING = {"extract.every": 3, "extract.smart_trigger": True}


@pytest.mark.parametrize("seed, batching", [(21, {}), (22, {}), (23, {}), (24, DEFAULT_BATCHING),
                                            (25, DEFAULT_BATCHING), (26, DEFAULT_BATCHING)])
async def test_random_edits_equal_fresh_ingest_with_llm(tmp_path, embedder, fake, seed, batching):
    sc = Services.open(tmp_path / "d", embedder=embedder,
                       cli_settings=llm_settings(fake, **MAINTAIN_OFTEN, **batching))
    try:
        rng = random.Random(seed)
        chat = make_chat(rng, 6)
        await ingest(sc, "live", chat)
        for step in range(8):
            op = random_edit(rng, chat, new_turns=make_chat, edited=lambda r: line(r) + " (edited)",
                             swiped=lambda r: line(r) + " (swiped)", max_append=3)
            live = await ingest(sc, "live", chat)
            if step % 3 == 2 or step == 7:
                fresh = await ingest(sc, f"fresh-{step}", chat)
                assert live == fresh, f"diverged after step {step} ({op})"
        if not batching:  # one extraction per reply reaches every maintenance cadence in this short chat
            assert {"summary", "rollup", "synopsis", "reflect", "compress"} <= set(fake.tasks())
        assert evolution_was_asked(fake, "with_extraction")
    finally:
        await sc.close()


async def test_rollback_after_evolution_and_maintenance_restores_exactly(tmp_path, embedder, fake):
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=llm_settings(fake, **MAINTAIN_OFTEN))
    try:
        chat = make_chat(random.Random(10), 8)
        before = await ingest(sc, "c", chat)
        chat2 = chat + make_chat(random.Random(11), 8)
        after = await ingest(sc, "c", chat2)
        assert any('"context"' in n[1] for n in after["nodes"]) and llm_nodes(after, "reflection")
        restored = await ingest(sc, "c", chat)  # the 16 new messages deleted
        assert restored == before
    finally:
        await sc.close()


# -- recall rerank ----------------------------------------------------------------------------------
async def test_rerank_picks_and_orders_and_falls_back_on_a_hang(llm_sc, fake):
    chat = make_chat(random.Random(12), 10)
    await ingest(llm_sc, "c", chat)
    query = {"query": "What did Elena say about the vault?", "budget_tokens": 2000, "max_memories": 6}
    plain = await recall(llm_sc, "c", query)
    assert "rerank" not in fake.tasks()  # off by default
    await llm_sc.settings_service.update_global({"recall.rerank": True, "recall.rerank_timeout_s": 0.5})
    ranked = await recall(llm_sc, "c", query)
    call = [c for c in fake.calls if c["task"] == "rerank"]
    assert len(call) == 1 and "R1" in call[0]["body"]["messages"][1]["content"]
    evidence = [m for m in ranked["memories"] if not m["core"]]  # the synopsis is not max_memories' to cut
    assert "degraded" not in ranked and 0 < len(evidence) <= 6
    assert all("elena" in (m["label"] + ranked["text"]).lower() or "vault" in ranked["text"].lower()
               for m in ranked["memories"] if not m["core"])
    fake.hang = True
    fallback = await recall(llm_sc, "c", query)
    assert fallback["degraded"].startswith("rerank timed out")
    assert [m["id"] for m in fallback["memories"]] == [m["id"] for m in plain["memories"]]  # the scored order


async def test_an_edit_after_the_degraded_batches_keeps_them_marked(llm_sc, fake):
    chat = make_chat(random.Random(17), 4)
    await full_sync(llm_sc, "c", chat)
    fake.statuses = [500] * 1000
    await llm_sc.processor.process_chat("c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0
    chat[6] = {**chat[6], "text": "An edit late in the chat."}
    await full_sync(llm_sc, "c", chat)  # undoes only the last batch
    await llm_sc.processor.process_chat("c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] == 0  # the earlier degraded batches still need redoing
    fake.statuses = []
    llm_sc.memory_llm.health.reset()
    await llm_sc.processor.process_chat("c")
    assert (await llm_sc.chats.status("c"))["degraded_from"] is None
    assert await snapshot(llm_sc, "c") == await ingest(llm_sc, "fresh", chat)


# -- the defaults: one LLM call for several replies -------------------------------------------------
async def test_the_llm_reads_several_replies_in_one_call(tmp_path, embedder, fake):
    sc = Services.open(tmp_path / "d", embedder=embedder,
                       cli_settings=llm_settings(fake, **{**DEFAULT_BATCHING, "extract.smart_trigger": False}))
    try:
        chat = make_chat(random.Random(31), 7)
        snap = await ingest(sc, "c", chat)
        extracts = [c for c in fake.calls if c["task"] == "extract"]
        assert len(extracts) == 2  # after the 3rd and the 6th reply; the 7th waits for two more
        new = extracts[0]["body"]["messages"][1]["content"].split("## NEW messages")[1]
        assert all(f"#{i} [" in new for i in range(6))  # one call read all six messages
        status = await sc.chats.status("c")
        assert status["processed_upto"] == 13  # while the per-message memories exist for every message
        assert len([n for n in snap["nodes"] if n[0] == "event" and n[-1] == "heuristic"]) >= 14
        # LLM memories cover the messages their call read (a dedupe merge may widen one across both calls)
        assert {(n[2], n[3]) for n in llm_nodes(snap, "event")} <= {(0, 5), (6, 11), (0, 11)}
    finally:
        await sc.close()


async def test_a_plot_turn_is_extracted_at_once(tmp_path, embedder, fake):
    sc = Services.open(tmp_path / "d", embedder=embedder, cli_settings=llm_settings(fake, **DEFAULT_BATCHING))
    try:
        chat = [{"role": "user", "name": "Alex", "text": "What is going on?"},
                {"role": "assistant", "name": "Elena", "text": "Suddenly Marcus confesses the secret: he plans to "
                                                               "betray us at Greywater! Did you hear that?!"}]
        await ingest(sc, "c", chat)
        assert fake.tasks().count("extract") == 1  # the smart trigger did not wait for three replies
    finally:
        await sc.close()


def test_tag_blocks_are_removed_like_the_regex_they_replace():
    """remove_tag_blocks scans once instead of backtracking (a message full of unclosed tags stalled a batch);
    on any input it removes exactly what `<x>.*?</x>` removed."""
    import re

    from stbme.pipeline.heuristic import clean_text

    reference = re.compile(r"<(think|thinking|analysis|reasoning)>.*?</\1>", re.S | re.I)
    rng = random.Random(5)
    parts = ["<think>", "</think>", "<THINK>", "</Think>", "<analysis>", "</analysis >", "text ", "x\n",
             "<reasoning>", "</reasoning>", "<thinking>", "</thinking>", "<b>"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert clean_text(text) == re.sub(r"[ \t]+", " ", reference.sub(" ", text)).strip(), text
    assert strip_tags("a <think>b</think> c <analysis x='1'>d", "think,analysis") == "a c"
    assert clean_text("<think>" * 5000 + "kept") == "<think>" * 5000 + "kept"
