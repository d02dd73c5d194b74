"""Operations a parsed answer asks for but the pipeline leaves out are counted and said (issue 20 item 9: a real
135M model made 0 memories from 7 extractions, its answers valid JSON that followed no schema, and nothing said
why). One log line per answer with the counts by reason, the counts in /health llm.usage.dropped and `stbme
stats`, the model's own words in a DEBUG line."""

from __future__ import annotations

import logging

import orjson
import pytest

from conftest import full_sync
from llm_fixtures import fake, llm_sc, llm_settings  # noqa: F401
from test_llm_pipeline import evolve_around_locked_elena, llm_nodes, snapshot

CHAT = [{"role": "user", "name": "A", "text": "Where is the key?"},
        {"role": "assistant", "name": "N", "text": "Elena hides the brass key under the bell tower."}]

# What a small model writes: the right container, the wrong contents.
OFF_SCHEMA = {"operations": [
    {"op": "create", "type": "weather", "fields": {"name": "Elena"}},             # a type the schema has not
    {"op": "update", "id": "M42", "fields": {"state": "hidden"}},                 # a key it was never shown
    {"op": "create", "type": "event", "fields": {}},                              # nothing to remember
    {"op": "create", "type": "event", "fields": {"title": "  "}},                 # only blank text
    "Elena hid the key",                                                          # not an operation at all
    {"op": "create", "type": "character", "fields": {"name": "Elena", "state": "keeps a secret"},
     "links": [{"target": "M77", "relation": "related"}]},                       # kept; its link is not
]}
EXPECTED = {"bad_link_target": 1, "bad_reference": 1, "empty_fields": 2, "not_an_object": 1, "unknown_type": 1}


async def test_left_out_operations_are_counted_and_logged(llm_sc, fake, caplog):
    fake.overrides["extract"] = OFF_SCHEMA
    caplog.set_level(logging.DEBUG, logger="stbme")
    await full_sync(llm_sc, "c", CHAT)
    await llm_sc.processor.process_chat("c")

    snap = await snapshot(llm_sc, "c")
    assert [orjson.loads(n[1])["name"] for n in llm_nodes(snap, "character")] == ["Elena"]
    usage = (await llm_sc.health.report())["llm"]["usage"]
    assert usage["dropped"] == {"extract": EXPECTED}                    # before: no such key, nothing said
    lines = [r for r in caplog.records if "left out" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO         # one line per answer, not per operation
    assert ("extract answer for chat c messages 0-1: 6 items, 1 kept; left out: bad_link_target 1, "
            "bad_reference 1, empty_fields 2, not_an_object 1, unknown_type 1") in lines[0].getMessage()
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "extract answer" in r.getMessage()]
    assert said and '"type":"weather"' in said[0]                        # what the model wrote, for the next engineer

    events = await llm_sc.store.read(lambda conn: conn.execute(
        "SELECT data FROM events WHERE chat_id = 'c' AND kind = 'extract'").fetchall())
    assert orjson.loads(events[-1][0])["dropped"] == EXPECTED


async def test_an_answer_with_nothing_usable_is_a_warning(llm_sc, fake, caplog):
    fake.overrides["extract"] = {"operations": [{"op": "create", "type": "note", "fields": {"text": "x"}},
                                                {"op": "create", "type": "event", "fields": {}}]}
    caplog.set_level(logging.INFO, logger="stbme")
    await full_sync(llm_sc, "c", CHAT)
    await llm_sc.processor.process_chat("c")
    lines = [r for r in caplog.records if "left out" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING and "2 items, 0 kept" in lines[0].getMessage()


@pytest.mark.parametrize("mode", ["with_extraction", "separate"])
async def test_left_out_evolution_is_counted(llm_sc, fake, mode, caplog):
    # The fake's decisions also name an invented key (M999, n_not_a_key) and update a memory locked here.
    caplog.set_level(logging.INFO, logger="stbme")
    await evolve_around_locked_elena(llm_sc, mode)
    dropped = (await llm_sc.health.report())["llm"]["usage"]["dropped"]["evolve"]
    assert dropped["bad_reference"] >= 2 and dropped["locked"] >= 1, dropped
    assert any(r.getMessage().startswith("evolve answer for chat c") and "left out" in r.getMessage()
               for r in caplog.records)


# What SmolLM2-135M wrote when held to the answer schema (the real-model run, issue 20 item 9): the right
# shape, no words of its own. None of it is a memory; a real text beside it is.
SAYS_NOTHING = {"operations": [
    {"op": "create", "type": "event", "fields": {"summary": "M1", "title": "M1", "status": "completed"}},
    {"op": "create", "type": "event", "fields": {"summary": "][", "title": "]["}},
    {"op": "create", "type": "event", "fields": {"title": "...", "summary": "..."}},
    {"op": "create", "type": "event", "fields": {"summary": "M1, M2, N1,N3,M4"}},
    {"op": "create", "type": "event", "fields": {"summary": "}}]}\n#45 [user Alex]: 我递给沈砚一杯茶"}},
    {"op": "create", "type": "event", "fields": {"title": "M2", "summary": "Elena hides the brass key"}},
]}


async def test_a_memory_that_says_nothing_is_left_out(llm_sc, fake):
    fake.overrides["extract"] = SAYS_NOTHING
    await full_sync(llm_sc, "c", CHAT)
    await llm_sc.processor.process_chat("c")
    events = [orjson.loads(n[1]) for n in llm_nodes(await snapshot(llm_sc, "c"), "event")]
    assert events == [{"summary": "Elena hides the brass key", "title": "Elena hides the brass ke"}]  # its title was a key
    usage = (await llm_sc.health.report())["llm"]["usage"]
    assert usage["dropped"] == {"extract": {"says_nothing": 5}}
