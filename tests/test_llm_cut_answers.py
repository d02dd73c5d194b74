"""Answers cut off at the token limit (a real small model writes past any cap: issue 20 item 9). A list task
whose answer is cut in every attempt keeps the operations written whole, never the half one; an answer with
no whole operation still falls back to heuristic memories, as before."""

from __future__ import annotations

import orjson

from conftest import full_sync
from llm_fixtures import fake, llm_sc, llm_settings  # noqa: F401
from stbme.llm.jsonrepair import salvage_items
from test_llm_pipeline import llm_nodes, snapshot

CHAT = [{"role": "user", "name": "A", "text": "Where is the key?"},
        {"role": "assistant", "name": "N", "text": "Elena hides the brass key under the bell tower."}]


def event(summary: str) -> dict:
    return {"op": "create", "type": "event", "fields": {"summary": summary}}


async def run(sc, chat_id: str) -> tuple[dict, list[str]]:
    queue = sc.live.subscribe()
    await full_sync(sc, chat_id, CHAT)
    await sc.processor.process_chat(chat_id)
    warnings = []
    while not queue.empty():
        message = queue.get_nowait()
        if message["type"] == "notice" and message["level"] == "warning":
            warnings.append(message["message"])
    return await snapshot(sc, chat_id), warnings


def summaries(snap: dict) -> list[str]:
    return sorted(orjson.loads(n[1])["summary"] for n in llm_nodes(snap, "event"))


async def test_a_cut_answer_keeps_its_whole_operations(llm_sc, fake):
    # The fake cuts every answer in half: the cut falls inside the long third operation.
    fake.overrides["extract"] = {"operations": [event("Elena hides the key"), event("The bell tower rings"),
                                                event("A long account " + "of the tower " * 150)]}
    fake.truncate = 1000
    snap, warnings = await run(llm_sc, "c")
    assert summaries(snap) == ["Elena hides the key", "The bell tower rings"]  # before: [] (heuristics only)
    assert not any("A long account" in n[1] for n in snap["nodes"])          # the half operation is not kept
    assert (await llm_sc.chats.status("c"))["degraded_from"] is None
    assert any("cut off" in w and "2 complete items" in w for w in warnings), warnings
    assert [c["task"] for c in fake.calls[:3]] == ["extract"] * 3               # asked again with more room first
    tasks = (await llm_sc.health.report())["llm"]["usage"]["tasks"]
    assert "extract:salvaged" in tasks and "extract:cut_off" in tasks


async def test_a_cut_answer_without_a_whole_operation_falls_back(llm_sc, fake):
    fake.overrides["extract"] = {"operations": [event("A long account " + "of the tower " * 150), event("Later")]}
    fake.truncate = 1000
    snap, warnings = await run(llm_sc, "c")
    assert summaries(snap) == []
    assert [n for n in snap["nodes"] if n[-1] == "heuristic"]                   # the chat still has its memories
    assert (await llm_sc.chats.status("c"))["degraded_from"] is not None       # and is redone when the LLM answers
    assert warnings and "got memories without it" in warnings[0], warnings


async def test_a_retry_that_fails_outright_keeps_what_the_cut_answer_had(llm_sc, fake):
    fake.overrides["extract"] = {"operations": [event("Elena hides the key"),
                                                event("A long account " + "of the tower " * 150)]}
    fake.truncate = 1

    async def fail_the_retries(task):
        if len(fake.calls) >= 2:  # the retry meets a server error (every HTTP retry too)
            fake.statuses = [500] * 100

    fake.before_answer = fail_the_retries
    snap, warnings = await run(llm_sc, "c")
    assert summaries(snap) == ["Elena hides the key"]
    assert any("1 complete items" in w for w in warnings), warnings


async def test_an_answer_cut_once_is_asked_again_not_salvaged(llm_sc, fake):
    fake.overrides["extract"] = {"operations": [event("Elena hides the key"),
                                                event("A long account " + "of the tower " * 150)]}
    fake.truncate = 1
    snap, warnings = await run(llm_sc, "c")
    assert len(summaries(snap)) == 2 and not any("cut off" in w for w in warnings)


def test_salvage_keeps_only_objects_written_whole():
    text = '{"operations": [{"op": "create", "fields": {"summary": "a } in a string"}, "links": [{"t": "M1"}]},\n' \
           '  {"op": "create", "fields": {"summary": "b"}}, {"op": "create", "fields": {"summary": "cu'
    assert [o["fields"]["summary"] for o in salvage_items(text, "operations")] == ["a } in a string", "b"]
    assert salvage_items("```json\n[{\"a\": 1}, {\"b\": 2", None) == [{"a": 1}]
    assert salvage_items('{"summary": "the story so fa', None) == []                 # no list: nothing to keep
    assert salvage_items('{"new": "N1", "links": [{"id": "M1"}, {"id"', "results") == []  # not the task's list
    assert salvage_items('{"results": [{"a": 1}, {"b": oops}, {"c": 3}, {"d', "results") == [{"a": 1}]
