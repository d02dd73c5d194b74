"""Importing graphs exported by the original ST-BME browser extension (graph v4 flat and v9 latest).

The fixtures under tests/fixtures/ are hand-written in the shape the extension's `exportGraph` produces
(times in milliseconds, UUID ids, `seqRange`, `clusters`, edges with `fromId`/`toId`/`edgeType`, and in
v9 `scope`, `storyTime` and `summaryState`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import full_sync, settle

from stbme.api.keys import services_key

FIXTURES = Path(__file__).parent / "fixtures"
CHAT = "Elena - 2024-5-1 @12h 00m 00s 000ms"

# The chat the graphs were built from: ST-BME had processed it up to message 7 of 10.
MESSAGES = [
    {"role": "user", "name": "Alex", "text": "Where did you hide the silver key?"},
    {"role": "assistant", "name": "Elena", "text": "Under the old oak tree by the lighthouse."},
    {"role": "user", "name": "Alex", "text": "Shall we go fishing at the harbour?"},
    {"role": "assistant", "name": "Elena", "text": "Only if you stop doubting me."},
    {"role": "user", "name": "Alex", "text": "It is starting to rain."},
    {"role": "assistant", "name": "Elena", "text": "Take the umbrella then."},
    {"role": "user", "name": "Alex", "text": "What sleeps in the north?"},
    {"role": "assistant", "name": "Elena", "text": "A dragon, in the mountains."},
    {"role": "user", "name": "Alex", "text": "We should leave at dawn with the caravan."},
    {"role": "assistant", "name": "Elena", "text": "I will pack bread and a lantern for the caravan."},
]


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def url(chat_id: str, rest: str = "") -> str:
    from urllib.parse import quote

    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


async def ok_json(resp, status: int = 200) -> dict:
    data = await resp.json()
    assert resp.status == status, data
    assert data["ok"] is True
    return data


async def import_doc(client, chat_id: str, doc, mode: str = "merge") -> dict:
    return await ok_json(await client.post(url(chat_id, "/import"), params={"mode": mode}, json=doc))


async def nodes_of(client, chat_id: str) -> list[dict]:
    data = await ok_json(await client.get(url(chat_id, "/nodes"), params={"limit": 500, "archived": "all"}))
    assert data["total"] == len(data["nodes"])
    return data["nodes"]


def by_label(nodes: list[dict]) -> dict[str, dict]:
    out = {}
    for node in nodes:
        assert node["label"] not in out, f"duplicate label {node['label']!r}"
        out[node["label"]] = node
    return out


async def synced_chat(client, chat_id: str = CHAT) -> None:
    await full_sync(client, chat_id, MESSAGES)
    await settle(client.server.app[services_key], chat_id)


# -- graph v4 (early flat version) ----------------------------------------------------------------
async def test_v4_nodes(client):
    result = await import_doc(client, CHAT, load("st_bme_graph_v4.json"))
    assert result["imported"] == {"nodes": 10, "edges": 4}
    nodes = by_label(await nodes_of(client, CHAT))
    assert len(nodes) == 10
    assert {n["type"] for n in nodes.values()} == {"event", "character", "location", "rule", "thread", "synopsis",
                                                   "reflection"}
    assert all(n["source"] == "import" and n["id"].startswith("n_") for n in nodes.values())

    key = nodes["Elena buried the silver key under the old oak tree"]
    assert key["type"] == "event"
    assert key["fields"] == {"summary": "Elena buried the silver key under the old oak tree",
                             "participants": "Elena, Alex", "status": "done"}
    assert key["importance"] == 6 and key["seq_range"] == [0, 1]
    assert key["tags"] == ["key", "oak"] and key["archived"] is False
    assert key["created_at"] == 1714550400.0  # ms -> s
    assert key["access_count"] == 3 and key["last_access"] == 1714554000.0
    assert key["level"] == 0 and key["parent_id"] is None and key["children"] == []
    assert key["scope"] == "objective"

    elena = nodes["Elena"]
    assert elena["type"] == "character" and elena["importance"] == 8 and elena["seq_range"] == [1, 7]
    assert elena["fields"]["traits"] == "cautious, loyal"
    rule = nodes["No modern technology"]
    assert rule["type"] == "rule" and rule["importance"] == 9
    assert rule["fields"]["constraint"] == "The story is set in a world without electricity"
    assert nodes["Lighthouse"]["fields"]["features"] == "an old oak tree stands beside it"
    assert nodes["Find the dragon Vorthax"]["tags"] == ["dragon"]
    assert nodes["Elena hides things when she is afraid"]["type"] == "reflection"
    assert nodes["Alex and Elena look for a hidden key while a dragon sleeps in the north"]["type"] == "synopsis"


async def test_v4_compression_hierarchy(client):
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"))
    nodes = by_label(await nodes_of(client, CHAT))
    parent = nodes["A rainy trip to the harbour ended in an argument"]
    argued = nodes["Alex and Elena argued about fishing at the harbour"]
    umbrella = nodes["Elena warned it would rain, so they took the red umbrella"]
    assert parent["level"] == 1 and parent["archived"] is False and parent["seq_range"] == [2, 5]
    assert parent["children"] == [argued["id"], umbrella["id"]]
    for child in (argued, umbrella):
        assert child["parent_id"] == parent["id"] and child["archived"] is True and child["level"] == 0
    assert umbrella["importance"] == 3.5
    active = await ok_json(await client.get(url(CHAT, "/nodes"), params={"limit": 500}))
    assert active["total"] == 8  # the two folded children are archived


async def test_v4_edges(client):
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"))
    label = {n["id"]: n["label"] for n in await nodes_of(client, CHAT)}
    edges = (await ok_json(await client.get(url(CHAT, "/edges"))))["edges"]
    assert len(edges) == 4
    named = {(label[e["from_id"]], label[e["to_id"]]): e for e in edges}
    key = "Elena buried the silver key under the old oak tree"

    involved = named[("Elena", key)]
    assert involved["relation"] == "involved_in" and involved["strength"] == 0.9
    assert involved["inhibitory"] is False and involved["active"] is True
    assert involved["created_at"] == 1714550400.0 and involved["valid_at"] == 1714550400.0
    assert involved["invalid_at"] is None and involved["expired_at"] is None
    assert named[(key, "Lighthouse")]["relation"] == "occurred_at"

    contradicts = named[("Elena hides things when she is afraid", key)]
    assert contradicts["relation"] == "contradicts" and contradicts["inhibitory"] is True  # edgeType 255
    assert contradicts["strength"] == 0.6

    old = named[("Elena", "Lighthouse")]
    assert old["relation"] == "related"  # 'likes' is not a known relation
    assert old["invalid_at"] == 1714557600.0 and old["active"] is False  # history is kept, not active


async def test_v4_skipped_are_reported(client):
    result = await import_doc(client, CHAT, load("st_bme_graph_v4.json"))
    skipped = result["skipped"]
    assert len(skipped) == 4, skipped
    assert any(s.startswith("nodes[10]") and "faction" in s for s in skipped)  # unknown type
    assert any(s.startswith("nodes[11]") and "fields" in s for s in skipped)  # nothing to remember
    assert any(s.startswith("edges[4]") for s in skipped)  # dangling: its target is not in the graph
    assert any(s.startswith("edges[5]") for s in skipped)  # its source was the skipped node


async def test_import_keeps_updated_time(client):
    await import_doc(client, CHAT, load("st_bme_graph_v9.json"))
    nodes = by_label(await nodes_of(client, CHAT))
    assert nodes["The key is hidden"]["updated_at"] == 1714640000.0
    v4 = await import_doc(client, "v4", load("st_bme_graph_v4.json"))
    assert v4["imported"]["nodes"] == 10
    assert by_label(await nodes_of(client, "v4"))["Lighthouse"]["updated_at"] == 1714550400.0


# -- graph v9 (latest version) --------------------------------------------------------------------
async def test_v9_nodes_scope_and_story_time(client):
    result = await import_doc(client, CHAT, load("st_bme_graph_v9.json"))
    assert result["imported"] == {"nodes": 7, "edges": 3}  # 5 nodes + 2 active summaries
    nodes = by_label(await nodes_of(client, CHAT))

    key = nodes["The key is hidden"]  # an event's label is its title
    assert key["fields"]["summary"] == "Elena buried the silver key under the old oak tree"
    assert key["importance"] == 6.5 and key["seq_range"] == [0, 1] and key["tags"] == ["key"]
    assert key["created_at"] == 1714636800.0
    assert key["story_time"]["segmentId"] == "seg-day1" and key["story_time"]["label"] == "Day 1, morning"
    assert key["story_time"]["tense"] == "past"

    pov = nodes["Elena feels that Alex does not trust her with the key"]
    assert pov["type"] == "pov_memory" and pov["scope"] == "pov"
    assert pov["fields"]["certainty"] == "unsure" and pov["fields"]["about"] == "Alex"
    assert nodes["Elena"]["fields"]["inventory"] == "a lantern"
    assert nodes["Elena"]["tags"] == ["main-cast"]
    assert nodes["They sheltered from the rain under the red umbrella"]["archived"] is True
    thread = nodes["Find the dragon Vorthax"]
    assert thread["tags"] == ["dragon", "quest"] and thread["seq_range"] == [6, 7]
    assert "Lantern" not in nodes

    assert len(result["skipped"]) == 2
    assert any(s.startswith("nodes[5]") and "inventory_item" in s for s in result["skipped"])
    assert any(s.startswith("edges[3]") for s in result["skipped"])


async def test_v9_summary_entries(client):
    await import_doc(client, CHAT, load("st_bme_graph_v9.json"))
    summaries = {n["fields"]["summary"]: n for n in await nodes_of(client, CHAT) if n["type"] == "summary"}
    assert set(summaries) == {
        "At the harbour it rained and the two of them quarrelled about fishing.",
        "The hunt for the silver key and the sleeping dragon Vorthax began at the lighthouse.",
    }  # the folded entry is not imported
    small = summaries["At the harbour it rained and the two of them quarrelled about fishing."]
    rollup = summaries["The hunt for the silver key and the sleeping dragon Vorthax began at the lighthouse."]
    assert small["seq_range"] == [4, 7] and small["fields"]["level"] == 0
    assert rollup["seq_range"] == [0, 7] and rollup["fields"]["level"] == 1
    assert small["source"] == "import" and small["archived"] is False


async def test_v9_edges(client):
    await import_doc(client, CHAT, load("st_bme_graph_v9.json"))
    label = {n["id"]: n["label"] for n in await nodes_of(client, CHAT)}
    edges = (await ok_json(await client.get(url(CHAT, "/edges"))))["edges"]
    named = {(label[e["from_id"]], label[e["to_id"]]): e for e in edges}
    pov = "Elena feels that Alex does not trust her with the key"
    assert named[(pov, "The key is hidden")]["inhibitory"] is True
    assert named[("Elena", "The key is hidden")]["strength"] == 0.95
    update = named[("Find the dragon Vorthax", "Elena")]
    assert update["relation"] == "temporal_update"
    assert update["invalid_at"] == 1714644600.0 and update["expired_at"] == 1714648200.0
    assert update["active"] is False


async def test_wrapped_graph_is_accepted(client):
    result = await import_doc(client, CHAT, {"graph": load("st_bme_graph_v9.json")})
    assert result["imported"] == {"nodes": 7, "edges": 3}


# -- processing position --------------------------------------------------------------------------
async def test_replace_takes_last_processed_seq(client):
    sc = client.server.app[services_key]
    await synced_chat(client)
    assert {n["source"] for n in await nodes_of(client, CHAT)} == {"heuristic"}
    await import_doc(client, CHAT, load("st_bme_graph_v9.json"), mode="replace")
    status = await ok_json(await client.get(url(CHAT, "/status")))
    assert status["processed_upto"] == 7 and status["messages"] == len(MESSAGES)
    assert {n["source"] for n in await nodes_of(client, CHAT)} == {"import"}  # heuristic memories replaced

    # the next sync processes only what ST-BME had not: messages 8 and 9
    result = await full_sync(client, CHAT, MESSAGES)
    assert result["queued"] is True and result["rolled_back"] == 0
    status = await settle(sc, CHAT)
    assert status["processed_upto"] == len(MESSAGES) - 1
    new_events = [n for n in await nodes_of(client, CHAT) if n["source"] == "heuristic" and n["type"] == "event"]
    assert sorted(n["seq_range"] for n in new_events) == [[8, 8], [9, 9]]
    assert len([n for n in await nodes_of(client, CHAT) if n["source"] == "import"]) == 7


async def test_replace_uses_history_state_when_last_processed_seq_is_missing(client):
    await synced_chat(client)
    doc = load("st_bme_graph_v4.json")
    del doc["lastProcessedSeq"]
    doc["historyState"]["lastProcessedAssistantFloor"] = 5
    await import_doc(client, CHAT, doc, mode="replace")
    assert (await ok_json(await client.get(url(CHAT, "/status"))))["processed_upto"] == 5


async def test_replace_clamps_last_processed_seq_to_the_chat(client):
    await full_sync(client, CHAT, MESSAGES[:4])
    await settle(client.server.app[services_key], CHAT)
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"), mode="replace")
    assert (await ok_json(await client.get(url(CHAT, "/status"))))["processed_upto"] == 3


async def test_merge_keeps_existing_memories_and_position(client):
    await synced_chat(client)
    before = await nodes_of(client, CHAT)
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"), mode="merge")
    after = await nodes_of(client, CHAT)
    assert len(after) == len(before) + 10
    assert {n["id"] for n in before} <= {n["id"] for n in after}
    assert (await ok_json(await client.get(url(CHAT, "/status"))))["processed_upto"] == len(MESSAGES) - 1


# -- recall ---------------------------------------------------------------------------------------
async def test_imported_memories_are_recallable(client):
    await synced_chat(client)
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"), mode="replace")
    status = await ok_json(await client.get(url(CHAT, "/status")))
    assert status["nodes"] == 8 and status["unembedded"] == 0  # embedded during the import

    data = await ok_json(await client.post(url(CHAT, "/recall"), json={"query": "where is the silver key?"}))
    labels = [m["label"] for m in data["memories"]]
    assert "Elena buried the silver key under the old oak tree" in labels
    assert "The story is set in a world without electricity" in data["text"]  # rules are always injected
    # archived (folded) memories stay out
    data = await ok_json(await client.post(url(CHAT, "/recall"), json={"query": "red umbrella rain harbour"}))
    assert "Elena warned it would rain, so they took the red umbrella" not in [m["label"] for m in data["memories"]]


async def test_imported_v9_summary_is_recallable(client):
    await synced_chat(client)
    await import_doc(client, CHAT, load("st_bme_graph_v9.json"), mode="replace")
    data = await ok_json(await client.post(url(CHAT, "/recall"), json={"query": "the sleeping dragon Vorthax"}))
    assert "The hunt for the silver key and the sleeping dragon Vorthax began" in data["text"]


async def test_export_after_import_keeps_the_hierarchy(client):
    await import_doc(client, CHAT, load("st_bme_graph_v4.json"))
    doc = await (await client.get(url(CHAT, "/export"))).json()
    await import_doc(client, "copy", doc)
    nodes = by_label(await nodes_of(client, "copy"))
    parent = nodes["A rainy trip to the harbour ended in an argument"]
    children = [nodes["Alex and Elena argued about fishing at the harbour"]["id"],
                nodes["Elena warned it would rain, so they took the red umbrella"]["id"]]
    assert parent["children"] == children
    assert all(nodes[label]["parent_id"] == parent["id"] for label in (
        "Alex and Elena argued about fishing at the harbour",
        "Elena warned it would rain, so they took the red umbrella"))
    assert nodes["Elena buried the silver key under the old oak tree"]["tags"] == ["key", "oak"]
    assert len((await ok_json(await client.get(url("copy", "/edges"))))["edges"]) == 4


# -- garbage --------------------------------------------------------------------------------------
async def assert_bad_import(client, body: bytes, *words: str, field=None) -> None:
    resp = await client.post(url("garbage", "/import"), data=body, headers={"Content-Type": "application/json"})
    data = await resp.json()
    assert resp.status == 400, data
    assert data["ok"] is False and data["status"] == 400 and data["errors"] == [data["error"]]
    assert data["field"] == field
    for word in words:
        assert word in data["error"], data["error"]


@pytest.mark.parametrize("body, words", [
    (b"[1, 2, 3]", ("JSON object",)),
    (b'"a graph"', ("JSON object",)),
    (b"42", ("JSON object",)),
    (b"null", ("JSON object",)),
    (b'{"hello": "world"}', ("unrecognised", "ST-BME")),
    (b'{"nodes": [{"type": "event", "fields": {"summary": "x"}}]}', ("unrecognised",)),
    (b'{"nodes": "many", "edges": []}', ("unrecognised",)),
    (b'{"graph": {"nothing": true}}', ("unrecognised",)),
    (b'{"version": 9, "nodes": {"a": 1}, "edges": {}}', ("unrecognised",)),
    (b'{"version": 9, "nodes": [', ("not valid JSON",)),
])
async def test_garbage_is_a_400_naming_the_problem(client, body, words):
    await assert_bad_import(client, body, *words)
    assert (await ok_json(await client.get("/v1/chats")))["chats"] == []


async def test_broken_graph_parts_are_skipped_not_fatal(client):
    doc = load("st_bme_graph_v9.json")
    broken = copy.deepcopy(doc)
    broken["nodes"][0]["clusters"] = 5
    broken["nodes"][0]["childIds"] = "x"
    broken["nodes"][0]["parentId"] = ["not", "an", "id"]
    broken["nodes"][0]["seqRange"] = [True, "7"]
    broken["nodes"][0]["scope"] = {"layer": 5}
    broken["nodes"][1]["_evolutionHistory"] = {"a": 1}
    broken["nodes"].append("not a node")
    broken["nodes"].append({"type": "event", "fields": "not fields"})
    broken["edges"].append(7)
    broken["edges"].append({"fromId": ["x"], "toId": {"y": 1}})
    broken["summaryState"]["entries"].append({"status": "active", "text": "orphan summary", "messageRange": [-1, -1]})
    broken["summaryState"]["entries"].append("junk")
    result = await import_doc(client, CHAT, broken)
    assert result["imported"] == {"nodes": 8, "edges": 3}
    assert any("not an object" in s for s in result["skipped"])
    nodes = by_label(await nodes_of(client, CHAT))
    hidden = nodes["The key is hidden"]
    assert hidden["tags"] == [] and hidden["children"] == [] and hidden["parent_id"] is None
    assert hidden["seq_range"] == [1, 1] and hidden["scope"] == "objective"  # broken seqRange: falls back to seq
    assert nodes["orphan summary"]["seq_range"] is None

    broken = copy.deepcopy(doc)
    broken["edges"] = 5
    broken["summaryState"] = {"entries": 5}
    result = await import_doc(client, "other", broken)
    assert result["imported"] == {"nodes": 5, "edges": 0}


async def test_stbme_export_with_broken_lists_is_a_400(client):
    resp = await client.post(url("x", "/import"), json={"format": "stbme-sidecar", "version": 1, "nodes": 5})
    assert resp.status == 400 and (await resp.json())["field"] == "nodes"
    resp = await client.post(url("x", "/import"), json={"format": "stbme-sidecar", "version": 1, "nodes": [],
                                                        "edges": "e"})
    assert resp.status == 400 and (await resp.json())["field"] == "edges"
