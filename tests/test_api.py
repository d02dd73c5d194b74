"""The HTTP API on the real running app (real SQLite, real HNSW, the deterministic HashEmbedder).

docs/api.md is the contract these tests hold the app to.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import quote

import aiohttp
import pytest
from conftest import DEADLINE_S, SILVER_KEY_CHAT, HashEmbedder, full_sync, settle, sync_body, wait_for

from stbme import config
from stbme.api.app import create_app
from stbme.api.keys import services_key
from stbme.embed.local import LocalEmbedder
from stbme.errors import StbmeError

MISSING = object()
ST_ORIGIN = "http://127.0.0.1:8000"

MESSAGES = SILVER_KEY_CHAT


def url(chat_id: str, rest: str = "") -> str:
    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


async def assert_error(resp, status: int, field=MISSING) -> dict:
    """Every error is JSON {ok: false, error, errors: [error], status, field}."""
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    data = await resp.json()
    assert set(data) == {"ok", "error", "errors", "status", "field"}, data
    assert data["ok"] is False
    assert isinstance(data["error"], str) and data["error"]
    assert data["errors"] == [data["error"]]
    assert data["status"] == status
    assert data["field"] is None or isinstance(data["field"], str)
    if field is not MISSING:
        assert data["field"] == field, data
    return data


async def ok_json(resp, status: int = 200) -> dict:
    data = await resp.json()
    assert resp.status == status, data
    assert data["ok"] is True
    return data


def sc_of(client):
    return client.server.app[services_key]


async def recall(client, chat_id: str, query: str, **extra) -> dict:
    return await ok_json(await client.post(url(chat_id, "/recall"), json={"query": query, **extra}))


async def recalled_ids(client, chat_id: str, query: str) -> set[str]:
    return {m["id"] for m in (await recall(client, chat_id, query))["memories"]}


@pytest.fixture
async def chat(client):
    """Chat 'c1' synced and fully processed; returns its id."""
    await full_sync(client, "c1", MESSAGES)
    await settle(sc_of(client), "c1")
    return "c1"


async def node_by_text(client, chat_id: str, text: str) -> dict:
    data = await ok_json(await client.get(url(chat_id, "/nodes"), params={"q": text, "archived": "all"}))
    assert data["total"] == 1, data
    return data["nodes"][0]


# -- health ---------------------------------------------------------------------------------------
async def test_health(client):
    data = await ok_json(await client.get("/health"))
    assert data["embedder"]["id"] == "test:hash-128"
    assert data["embedder"]["dim"] == 128
    assert data["embedder"]["reembedding"] is None
    assert data["store"]["chats"] == 0 and data["store"]["nodes"] == 0
    assert data["store"]["path"].endswith("stbme.sqlite3")
    assert isinstance(data["store"]["schema_version"], int)
    assert set(data["queue"]) >= {"pending", "running", "failed"}
    assert isinstance(data["version"], str)


async def test_health_counts_chats_and_memories(client, chat):
    data = await ok_json(await client.get("/health"))
    assert data["store"]["chats"] == 1
    assert data["store"]["nodes"] > len(MESSAGES) - 1


# -- settings -------------------------------------------------------------------------------------
async def test_settings_get_returns_every_setting_with_defaults(client):
    data = await ok_json(await client.get("/v1/settings"))
    assert set(data["settings"]) == {s.name for s in config.SETTINGS}
    assert data["settings"]["recall.budget_tokens"] == 800
    assert data["settings"]["server.cors_origins"] == ["http://127.0.0.1:8000", "http://localhost:8000"]


async def test_settings_schema_describes_every_setting(client):
    data = await ok_json(await client.get("/v1/settings/schema"))
    by_name = {s["name"]: s for s in data["settings"]}
    assert set(by_name) == {s.name for s in config.SETTINGS}
    budget = by_name["recall.budget_tokens"]
    assert budget["type"] == "int" and budget["default"] == 800 and budget["group"] == "recall"
    assert budget["per_chat"] is True and budget["secret"] is False
    assert budget["min"] < 800 < budget["max"]
    assert by_name["embed.provider"]["choices"] == ["local", "openai"]
    assert by_name["embed.openai_key"]["secret"] is True
    assert by_name["embed.openai_key"]["default"] == ""
    for entry in data["settings"]:
        assert entry["type"] in ("int", "float", "bool", "str", "choice", "list")
        assert entry["help"]


async def test_settings_put_changes_and_persists(client):
    data = await ok_json(await client.put("/v1/settings", json={"settings": {
        "recall.budget_tokens": 600, "recall.language": "zh", "recall.directive_share": 0.5}}))
    assert data["settings"]["recall.budget_tokens"] == 600
    assert data["settings"]["recall.language"] == "zh"
    again = await ok_json(await client.get("/v1/settings"))
    assert again["settings"]["recall.budget_tokens"] == 600
    # stored in SQLite, not only in memory
    sc = sc_of(client)
    stored = await sc.store.read(lambda conn: dict(conn.execute(
        "SELECT name, value FROM settings WHERE scope = ''").fetchall()))
    assert stored["recall.budget_tokens"] == "600"


@pytest.mark.parametrize("updates, field", [
    ({"recall.budget_tokens": 600, "no.such.setting": 1}, "no.such.setting"),
    ({"recall.budget_tokens": 600, "recall.max_memories": "many"}, "recall.max_memories"),
    ({"recall.budget_tokens": 600, "recall.max_memories": 10_000}, "recall.max_memories"),
    ({"recall.budget_tokens": 600, "recall.language": "fr"}, "recall.language"),
    ({"recall.budget_tokens": 600, "recall.enabled": "yes"}, "recall.enabled"),
    ({"recall.budget_tokens": 600, "server.cors_origins": "http://x"}, "server.cors_origins"),
    ({"recall.budget_tokens": 600, "recall.directive_share": 1.5}, "recall.directive_share"),
])
async def test_settings_put_rejects_bad_key_or_value_and_changes_nothing(client, updates, field):
    before = (await ok_json(await client.get("/v1/settings")))["settings"]
    data = await assert_error(await client.put("/v1/settings", json={"settings": updates}), 400, field)
    assert field in data["error"]
    after = (await ok_json(await client.get("/v1/settings")))["settings"]
    assert after == before
    assert after["recall.budget_tokens"] == 800


async def test_settings_put_needs_a_settings_object(client):
    await assert_error(await client.put("/v1/settings", json={"recall.budget_tokens": 600}), 400, "settings")
    await assert_error(await client.put("/v1/settings", json={"settings": [1, 2]}), 400, "settings")


async def test_secret_settings_are_masked(tmp_path, aiohttp_client):
    app = create_app(tmp_path / "d", embedder=HashEmbedder(),
                     cli_settings={"embed.openai_key": "sk-very-secret"})
    client = await aiohttp_client(app)
    data = await ok_json(await client.get("/v1/settings"))
    assert data["settings"]["embed.openai_key"] == "***"
    assert "sk-very-secret" not in await (await client.get("/v1/settings")).text()


async def test_per_chat_settings_override_and_null_removes(client):
    data = await ok_json(await client.put(url("c1", "/settings"), json={"settings": {
        "recall.budget_tokens": 300, "inject.depth": 2}}))
    assert data["settings"]["recall.budget_tokens"] == 300
    assert data["overrides"] == {"recall.budget_tokens": 300, "inject.depth": 2}
    # other chats and the global value are untouched
    assert (await ok_json(await client.get(url("c2", "/settings"))))["settings"]["recall.budget_tokens"] == 800
    assert (await ok_json(await client.get("/v1/settings")))["settings"]["recall.budget_tokens"] == 800
    got = await ok_json(await client.get(url("c1", "/settings")))
    assert got["settings"]["recall.budget_tokens"] == 300 and got["overrides"]["inject.depth"] == 2
    # a later global change does not beat the override
    await ok_json(await client.put("/v1/settings", json={"settings": {"recall.budget_tokens": 500}}))
    assert (await ok_json(await client.get(url("c1", "/settings"))))["settings"]["recall.budget_tokens"] == 300
    # null removes the override: the global value shows through again
    data = await ok_json(await client.put(url("c1", "/settings"), json={"settings": {"recall.budget_tokens": None}}))
    assert data["overrides"] == {"inject.depth": 2}
    assert data["settings"]["recall.budget_tokens"] == 500


async def test_per_chat_settings_refuse_global_only_and_bad_values(client):
    await assert_error(await client.put(url("c1", "/settings"), json={"settings": {
        "recall.budget_tokens": 300, "index.m": 32}}), 400, "index.m")
    await assert_error(await client.put(url("c1", "/settings"), json={"settings": {
        "recall.budget_tokens": 300, "recall.max_memories": 0}}), 400, "recall.max_memories")
    await assert_error(await client.put(url("c1", "/settings"), json={"settings": {"nope": 1}}), 400, "nope")
    got = await ok_json(await client.get(url("c1", "/settings")))
    assert got["overrides"] == {}


async def test_per_chat_setting_changes_recall(client, chat):
    assert (await recall(client, chat, "silver key"))["memories"]
    await ok_json(await client.put(url(chat, "/settings"), json={"settings": {"recall.enabled": False}}))
    data = await recall(client, chat, "silver key")
    assert data["text"] == "" and data["memories"] == []
    await ok_json(await client.put(url(chat, "/settings"), json={"settings": {"recall.enabled": None}}))
    assert (await recall(client, chat, "silver key"))["memories"]


# -- sync, status, recall -------------------------------------------------------------------------
async def test_sync_status_recall_round_trip(client):
    first = await ok_json(await client.post(url("c1", "/sync"), json=sync_body(MESSAGES)))
    assert first["status"] == "need_more" and first["need_from"] == 0  # never seen this chat
    result = await full_sync(client, "c1", MESSAGES)
    assert result["status"] == "synced" and result["stored_length"] == len(MESSAGES)
    status = await settle(sc_of(client), "c1")
    assert status["processed_upto"] == len(MESSAGES) - 1
    http_status = await ok_json(await client.get(url("c1", "/status")))
    assert http_status["chat_id"] == "c1"
    assert http_status["messages"] == len(MESSAGES)
    assert http_status["processed_upto"] == len(MESSAGES) - 1
    assert http_status["nodes"] >= len(MESSAGES)
    assert http_status["jobs"] == {"pending": 0, "failed": 0, "last_error": None}
    assert http_status["index"]["embedder"] == "test:hash-128"

    data = await recall(client, "c1", "Where is the silver key buried?")
    assert "oak tree" in data["text"]
    top = data["memories"][0]
    assert set(top) >= {"id", "type", "label", "score", "pinned", "score_parts", "seq_range"}
    assert "silver key" in top["label"] and top["seq_range"] in ([0, 0], [1, 1])
    assert 0 < data["tokens"] <= 800
    # a re-sync of the unchanged chat is a cheap check
    again = await ok_json(await client.post(url("c1", "/sync"), json=sync_body(MESSAGES)))
    assert again["status"] == "synced" and again["diverged_at"] is None and again["rolled_back"] == 0


async def test_recall_respects_budget_and_max_memories(client, chat):
    data = await recall(client, chat, "silver key oak tree lighthouse harbour", budget_tokens=50, max_memories=1)
    assert len(data["memories"]) <= 1
    assert data["tokens"] <= 50


async def test_recall_of_unknown_chat_is_empty(client):
    data = await recall(client, "never-synced", "anything")
    assert data["text"] == "" and data["memories"] == []


async def test_status_of_unknown_chat_is_404(client):
    await assert_error(await client.get(url("nope", "/status")), 404, "chat_id")


# -- chats ----------------------------------------------------------------------------------------
async def test_chats_list_and_delete(client, chat):
    await full_sync(client, "other", MESSAGES[:2])
    chats = (await ok_json(await client.get("/v1/chats")))["chats"]
    by_id = {c["chat_id"]: c for c in chats}
    assert set(by_id) == {"c1", "other"}
    assert by_id["c1"]["messages"] == len(MESSAGES) and by_id["c1"]["nodes"] >= len(MESSAGES)
    assert by_id["c1"]["processed_upto"] == len(MESSAGES) - 1
    assert set(by_id["c1"]) >= {"chat_id", "messages", "nodes", "processed_upto", "updated_at"}
    await ok_json(await client.put(url(chat, "/settings"), json={"settings": {"recall.budget_tokens": 300}}))

    deleted = await ok_json(await client.delete(url(chat)))
    assert deleted["deleted"]["messages"] == len(MESSAGES) and deleted["deleted"]["nodes"] >= len(MESSAGES)
    chats = (await ok_json(await client.get("/v1/chats")))["chats"]
    assert [c["chat_id"] for c in chats] == ["other"]
    await assert_error(await client.get(url(chat, "/status")), 404)
    assert (await ok_json(await client.get(url(chat, "/nodes"))))["total"] == 0
    assert (await recall(client, chat, "silver key"))["memories"] == []
    assert (await ok_json(await client.get(url(chat, "/settings"))))["overrides"] == {}
    await assert_error(await client.delete(url(chat)), 404, "chat_id")
    # the chat can come back: a fresh sync rebuilds it
    await full_sync(client, chat, MESSAGES)
    await settle(sc_of(client), chat)
    assert "oak tree" in (await recall(client, chat, "silver key buried"))["text"]


# -- nodes ----------------------------------------------------------------------------------------
async def test_nodes_list_paging_type_and_search(client, chat):
    everything = await ok_json(await client.get(url(chat, "/nodes"), params={"limit": 500}))
    total = everything["total"]
    assert total == len(everything["nodes"]) >= len(MESSAGES)
    ids = [n["id"] for n in everything["nodes"]]
    assert len(set(ids)) == total
    pages = []
    for offset in range(0, total, 3):
        page = await ok_json(await client.get(url(chat, "/nodes"), params={"offset": offset, "limit": 3}))
        assert page["total"] == total and len(page["nodes"]) <= 3
        pages += [n["id"] for n in page["nodes"]]
    assert pages == ids
    past_end = await ok_json(await client.get(url(chat, "/nodes"), params={"offset": total}))
    assert past_end["nodes"] == [] and past_end["total"] == total

    chars = await ok_json(await client.get(url(chat, "/nodes"), params={"type": "character"}))
    assert {n["fields"]["name"] for n in chars["nodes"]} == {"Alex", "Elena"}
    assert all(n["type"] == "character" for n in chars["nodes"])
    events = await ok_json(await client.get(url(chat, "/nodes"), params={"type": "event", "limit": 500}))
    assert events["total"] == len(MESSAGES)

    found = await ok_json(await client.get(url(chat, "/nodes"), params={"q": "silver key"}))
    assert found["total"] == 2
    assert all("silver key" in n["fields"]["summary"] for n in found["nodes"])
    # LIKE wildcards in q are literal
    assert (await ok_json(await client.get(url(chat, "/nodes"), params={"q": "%"})))["total"] == 0
    assert (await ok_json(await client.get(url(chat, "/nodes"), params={"q": "s_lver"})))["total"] == 0

    node = everything["nodes"][0]
    assert set(node) >= {"id", "type", "fields", "label", "importance", "weight", "seq_range", "archived",
                         "locked", "pinned", "tags", "scope", "access_count", "last_access", "created_at",
                         "updated_at", "source"}


async def test_nodes_archived_filter(client, chat):
    node = await node_by_text(client, chat, "red umbrella")
    before = (await ok_json(await client.get(url(chat, "/nodes"))))["total"]
    await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/archive")))
    active = await ok_json(await client.get(url(chat, "/nodes"), params={"limit": 500}))
    assert active["total"] == before - 1 and node["id"] not in {n["id"] for n in active["nodes"]}
    archived = await ok_json(await client.get(url(chat, "/nodes"), params={"archived": "true"}))
    assert [n["id"] for n in archived["nodes"]] == [node["id"]] and archived["nodes"][0]["archived"] is True
    everything = await ok_json(await client.get(url(chat, "/nodes"), params={"archived": "all"}))
    assert everything["total"] == before


async def test_node_get(client, chat):
    node = await node_by_text(client, chat, "red umbrella")
    got = await ok_json(await client.get(url(chat, f"/nodes/{node['id']}")))
    assert got["node"]["id"] == node["id"]
    assert got["node"]["fields"]["summary"] == "Fine, but bring the red umbrella, it will rain."
    assert got["node"]["seq_range"] == [3, 3] and got["node"]["source"] == "heuristic"
    # a node of another chat is not found through this chat
    await assert_error(await client.get(url("c2", f"/nodes/{node['id']}")), 404, "id")


async def test_node_create_manual_remember(client, chat):
    body = {"type": "rule", "fields": {"title": "No magic", "constraint": "Magic does not exist in this world"},
            "importance": 7, "pinned": False, "tags": ["world"]}
    node = (await ok_json(await client.post(url(chat, "/nodes"), json=body)))["node"]
    assert node["type"] == "rule" and node["source"] == "manual"
    assert node["fields"] == body["fields"] and node["importance"] == 7 and node["tags"] == ["world"]
    assert node["id"].startswith("n_") and node["label"] == "No magic"
    assert (await ok_json(await client.get(url(chat, f"/nodes/{node['id']}"))))["node"]["type"] == "rule"
    # rules are core memories: in the block whatever the query
    data = await recall(client, chat, "the dragon in the mountains")
    assert node["id"] in {m["id"] for m in data["memories"]}
    assert "Magic does not exist" in data["text"]


async def test_node_create_text_shorthand(client, chat):
    node = (await ok_json(await client.post(url(chat, "/nodes"), json={
        "text": "Alex is allergic to strawberries"})))["node"]
    assert node["type"] == "event" and node["fields"] == {"summary": "Alex is allergic to strawberries"}
    assert node["source"] == "manual" and node["seq_range"] is None
    assert node["id"] in await recalled_ids(client, chat, "strawberries allergic")
    # survives a re-sync: manual memories are not rolled back
    await full_sync(client, chat, MESSAGES[:-1] + [{**MESSAGES[-1], "text": "Something changed."}])
    await settle(sc_of(client), chat)
    assert (await ok_json(await client.get(url(chat, f"/nodes/{node['id']}"))))["node"]["fields"]["summary"]


async def test_node_create_into_a_new_chat(client):
    node = (await ok_json(await client.post(url("fresh", "/nodes"), json={"text": "The tea is green"})))["node"]
    # Its vector index is loaded and holds it: the first recall never waits for a load (under load the wait
    # ran out, and keywords alone found nothing in a chat of one memory).
    index = await sc_of(client).indexes.vectors.get_within("fresh", 0)
    assert index is not None and node["id"] in index
    assert node["id"] in await recalled_ids(client, "fresh", "green tea")


async def test_node_edit_and_lock(client, chat):
    node = await node_by_text(client, chat, "red umbrella")
    edited = (await ok_json(await client.patch(url(chat, f"/nodes/{node['id']}"), json={
        "fields": {"summary": "Bring the golden chalice to the crypt."}, "importance": 9, "tags": ["quest"]})))["node"]
    assert edited["fields"]["summary"] == "Bring the golden chalice to the crypt."
    assert edited["importance"] == 9 and edited["tags"] == ["quest"]
    assert node["id"] in await recalled_ids(client, chat, "golden chalice crypt")
    assert node["id"] not in await recalled_ids(client, chat, "red umbrella rain")

    locked = (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/lock"))))["node"]
    assert locked["locked"] is True
    await assert_error(await client.patch(url(chat, f"/nodes/{node['id']}"), json={"importance": 2}), 409, "locked")
    assert (await ok_json(await client.get(url(chat, f"/nodes/{node['id']}"))))["node"]["importance"] == 9
    unlocked = (await ok_json(await client.patch(url(chat, f"/nodes/{node['id']}"), json={
        "importance": 2, "unlock": True})))["node"]
    assert unlocked["importance"] == 2 and unlocked["locked"] is False
    # lock / unlock actions
    await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/lock")))
    assert (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/unlock"))))["node"]["locked"] is False
    await ok_json(await client.patch(url(chat, f"/nodes/{node['id']}"), json={"importance": 3}))


async def test_node_edit_rejects_bad_input(client, chat):
    node = await node_by_text(client, chat, "red umbrella")
    path = url(chat, f"/nodes/{node['id']}")
    await assert_error(await client.patch(path, json={"importance": 11}), 400, "importance")
    await assert_error(await client.patch(path, json={"importance": True}), 400, "importance")
    await assert_error(await client.patch(path, json={"tags": "x"}), 400, "tags")
    await assert_error(await client.patch(path, json={"fields": {}}), 400, "fields")
    await assert_error(await client.patch(path, json={"fields": {"summary": None}}), 400, "fields.summary")
    await assert_error(await client.patch(path, json={"colour": "red"}), 400, "colour")
    await assert_error(await client.patch(url(chat, "/nodes/n_missing"), json={"importance": 1}), 404, "id")
    after = (await ok_json(await client.get(path)))["node"]
    assert after["fields"] == node["fields"] and after["importance"] == node["importance"]
    assert after["tags"] == node["tags"]


async def test_pin_unpin(client, chat):
    # A question whose hit (the dragon's message) has no neighbour about the umbrella: the message that
    # "Tell me about the mountains" answers is the umbrella's, so that question would bring it along.
    query = "Where does the dragon Vorthax sleep?"
    node = await node_by_text(client, chat, "red umbrella")
    assert node["id"] not in await recalled_ids(client, chat, query)
    pinned = (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/pin"))))["node"]
    assert pinned["pinned"] is True
    first = (await ok_json(await client.get(url(chat, "/nodes"))))["nodes"][0]
    assert first["id"] == node["id"]  # pinned first in the list
    data = await recall(client, chat, query)
    assert node["id"] in {m["id"] for m in data["memories"]}
    assert next(m for m in data["memories"] if m["id"] == node["id"])["pinned"] is True
    unpinned = (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/unpin"))))["node"]
    assert unpinned["pinned"] is False
    assert node["id"] not in await recalled_ids(client, chat, query)


async def test_archive_and_restore_change_recall(client, chat):
    node = await node_by_text(client, chat, "buried the silver key")
    assert node["id"] in await recalled_ids(client, chat, "where is the silver key buried")
    archived = (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/archive"))))["node"]
    assert archived["archived"] is True
    data = await recall(client, chat, "where is the silver key buried")
    assert node["id"] not in {m["id"] for m in data["memories"]}
    assert "oak tree" not in data["text"]
    restored = (await ok_json(await client.post(url(chat, f"/nodes/{node['id']}/restore"))))["node"]
    assert restored["archived"] is False
    assert node["id"] in await recalled_ids(client, chat, "where is the silver key buried")
    # the index came back too, not only the keyword index
    status = await ok_json(await client.get(url(chat, "/status")))
    assert status["index"]["count"] == status["nodes"]


async def test_edges_list(client, chat):
    edges = (await ok_json(await client.get(url(chat, "/edges"))))["edges"]
    assert edges
    assert set(edges[0]) >= {"id", "from_id", "to_id", "relation", "strength", "inhibitory", "valid_at",
                             "invalid_at", "active"}
    elena = (await ok_json(await client.get(url(chat, "/nodes"), params={"type": "character", "q": "Elena"})))
    elena_id = elena["nodes"][0]["id"]
    mine = (await ok_json(await client.get(url(chat, "/edges"), params={"node": elena_id})))["edges"]
    assert mine and all(elena_id in (e["from_id"], e["to_id"]) for e in mine)
    assert len(mine) < len(edges)
    assert (await ok_json(await client.get(url(chat, "/edges"), params={"node": "n_missing"})))["edges"] == []


# -- export / import ------------------------------------------------------------------------------
def signature(nodes: list[dict], edges: list[dict]) -> tuple[list, list]:
    """What a memory is, without ids and times."""
    def node_key(n):
        return (n["type"], sorted(n["fields"].items()), n["importance"], n["seq_range"], n["archived"],
                n["pinned"], n["locked"], n["tags"], n["level"])

    key_of = {n["id"]: repr(node_key(n)) for n in nodes}
    return (sorted(repr(node_key(n)) for n in nodes),
            sorted((key_of[e["from_id"]], key_of[e["to_id"]], e["relation"], e["inhibitory"]) for e in edges))


async def chat_signature(client, chat_id: str):
    nodes = (await ok_json(await client.get(url(chat_id, "/nodes"), params={"limit": 500, "archived": "all"})))
    edges = (await ok_json(await client.get(url(chat_id, "/edges"))))["edges"]
    return signature(nodes["nodes"], edges)


async def test_export_then_import_merge_and_replace(client, chat):
    # some state beyond the heuristic memories
    umbrella = await node_by_text(client, chat, "red umbrella")
    await client.post(url(chat, f"/nodes/{umbrella['id']}/pin"))
    oak = await node_by_text(client, chat, "buried the silver key")
    await client.post(url(chat, f"/nodes/{oak['id']}/lock"))
    dragon = await node_by_text(client, chat, "dragon Vorthax")
    await client.post(url(chat, f"/nodes/{dragon['id']}/archive"))
    await client.post(url(chat, "/nodes"), json={"type": "rule", "fields": {"title": "T", "constraint": "No guns"},
                                                 "tags": ["a", "b"]})

    resp = await client.get(url(chat, "/export"))
    assert resp.status == 200 and resp.content_type == "application/json"
    doc = await resp.json()
    assert doc["format"] == "stbme-sidecar" and doc["version"] == 1 and doc["chat_id"] == chat
    assert isinstance(doc["exported_at"], float)
    assert all("embedding" not in n and "embedder" not in n for n in doc["nodes"])
    original = await chat_signature(client, chat)
    assert len(doc["nodes"]) == len(original[0]) and len(doc["edges"]) == len(original[1]) > 0

    # the target: the same chat text (e.g. a branch), with extraction off so only the import adds memories
    await ok_json(await client.put(url("copy", "/settings"), json={"settings": {"extract.enabled": False}}))
    await full_sync(client, "copy", MESSAGES)
    await settle(sc_of(client), "copy")
    assert (await ok_json(await client.get(url("copy", "/nodes"))))["total"] == 0

    merged = await ok_json(await client.post(url("copy", "/import"), params={"mode": "merge"}, json=doc))
    assert merged["imported"] == {"nodes": len(doc["nodes"]), "edges": len(doc["edges"])}
    assert merged["skipped"] == []
    assert await chat_signature(client, "copy") == original
    assert "oak tree" in (await recall(client, "copy", "where is the silver key buried"))["text"]
    assert "dragon" not in (await recall(client, "copy", "dragon Vorthax mountains"))["text"]  # still archived
    status = await ok_json(await client.get(url("copy", "/status")))
    assert status["index"]["count"] == status["nodes"]
    # the source chat is unchanged
    assert await chat_signature(client, chat) == original

    # merge again: the chat holds the export's messages, so its memories are tied to them and take the
    # place of the first import's (docs/api.md, "An import stays tied to its chat"): nothing doubles
    again = await ok_json(await client.post(url("copy", "/import"), params={"mode": "merge"}, json=doc))
    assert again["tied_upto"] == len(MESSAGES) - 1 and again["restored_messages"] == 0
    assert await chat_signature(client, "copy") == original
    # replace: exactly the export again
    await ok_json(await client.post(url("copy", "/import"), params={"mode": "replace"}, json=doc))
    assert await chat_signature(client, "copy") == original
    assert "oak tree" in (await recall(client, "copy", "where is the silver key buried"))["text"]


async def test_imported_memories_recallable_in_a_chat_not_synced_yet(client, chat):
    doc = await (await client.get(url(chat, "/export"))).json()
    await ok_json(await client.post(url("fresh", "/import"), json=doc))
    assert "oak tree" in (await recall(client, "fresh", "where is the silver key buried"))["text"]


async def test_import_replace_into_the_synced_chat_keeps_processing_position(client, chat):
    doc = await (await client.get(url(chat, "/export"))).json()
    original = await chat_signature(client, chat)
    await ok_json(await client.post(url(chat, "/import"), params={"mode": "replace"}, json=doc))
    assert await chat_signature(client, chat) == original
    status = await settle(sc_of(client), chat)
    assert status["processed_upto"] == len(MESSAGES) - 1  # not re-extracted into duplicates
    assert await chat_signature(client, chat) == original


async def test_import_rejects_garbage(client):
    await assert_error(await client.post(url("x", "/import"), json=[1, 2]), 400)
    await assert_error(await client.post(url("x", "/import"), json={"hello": "world"}), 400)
    await assert_error(await client.post(url("x", "/import"), json={"format": "stbme-sidecar", "version": 99,
                                                                    "nodes": []}), 400, "version")
    await assert_error(await client.post(url("x", "/import"), params={"mode": "upsert"},
                                         json={"format": "stbme-sidecar", "version": 1, "nodes": []}), 400, "mode")
    assert (await ok_json(await client.get(url("x", "/nodes"))))["total"] == 0


# -- reindex --------------------------------------------------------------------------------------
async def test_reindex(client, chat):
    sc = sc_of(client)
    before = await ok_json(await client.get(url(chat, "/status")))
    sc.indexes.drop(chat)
    for path in (sc.data_dir / "indexes").glob("*"):
        path.unlink()
    ws = await client.ws_connect("/v1/ws")
    assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "hello"
    data = await ok_json(await client.post(url(chat, "/reindex")))
    assert isinstance(data["job_id"], int)
    progress, job = await collect_until_job(ws, chat)
    assert job["state"] == "done" and job["error"] is None
    reindex = [m for m in progress if m["task"] == "reindex"]
    assert reindex and reindex[-1]["done"] == reindex[-1]["total"] == before["nodes"]
    await ws.close()
    status = await settle(sc, chat)
    assert status["index"]["count"] == before["nodes"]
    assert any((sc.data_dir / "indexes").iterdir())  # saved to disk
    assert "oak tree" in (await recall(client, chat, "where is the silver key buried"))["text"]


async def test_reindex_unknown_chat_is_404(client):
    await assert_error(await client.post(url("nope", "/reindex")), 404, "chat_id")


# -- errors ---------------------------------------------------------------------------------------
async def test_every_error_path_has_the_error_shape(client, chat, tmp_path, aiohttp_client):
    node = await node_by_text(client, chat, "red umbrella")
    sync = url("c9", "/sync")
    msg = {"index": 0, "role": "user", "name": "A", "text": "hi"}

    # bodies
    await assert_error(await client.post(sync, data=b"{not json", headers={"Content-Type": "application/json"}),
                       400, None)
    json_type = {"Content-Type": "application/json"}
    await assert_error(await client.post(sync, headers=json_type), 400, None)
    await assert_error(await client.post(sync, data=b"", headers=json_type), 400, None)
    await assert_error(await client.post(sync, data=b"{}"), 415, "Content-Type")
    await assert_error(await client.post(sync, json=[1, 2, 3]), 400, None)
    await assert_error(await client.post(sync, json="text"), 400, None)
    await assert_error(await client.post(url(chat, "/recall"), json=[]), 400, None)
    await assert_error(await client.post(url(chat, "/nodes"), data=b"null", headers=json_type), 400, None)
    await assert_error(await client.put("/v1/settings", data=b"\xff\xfe", headers=json_type), 400, None)
    # routes and methods
    await assert_error(await client.get("/v1/nope"), 404, None)
    await assert_error(await client.get("/"), 404, None)
    await assert_error(await client.post("/v1/chats/c1/sync/extra", json={}), 404, None)
    await assert_error(await client.delete("/v1/settings"), 405, None)
    await assert_error(await client.get(sync), 405, None)
    await assert_error(await client.post("/health"), 405, None)
    # nodes
    await assert_error(await client.get(url(chat, "/nodes/n_missing")), 404, "id")
    await assert_error(await client.post(url(chat, "/nodes/n_missing/pin")), 404, "id")
    await assert_error(await client.post(url(chat, f"/nodes/{node['id']}/explode")), 404, "action")
    await assert_error(await client.post(url(chat, "/nodes"), json={"type": "spaceship", "fields": {"a": "b"}}),
                       400, "type")
    await assert_error(await client.post(url(chat, "/nodes"), json={"type": "rule", "fields": {"title": "x"}}),
                       400, "fields.constraint")
    await assert_error(await client.post(url(chat, "/nodes"), json={"text": "x", "importance": -1}), 400, "importance")
    await assert_error(await client.post(url(chat, "/nodes"), json={"text": 5}), 400)
    await assert_error(await client.post(url(chat, "/nodes"), json={"text": "x" * 200_001}), 400, "fields.summary")
    # sync validation
    await assert_error(await client.post(sync, json={"messages": []}), 400, "length")
    await assert_error(await client.post(sync, json={"length": -1}), 400, "length")
    await assert_error(await client.post(sync, json={"length": "3"}), 400, "length")
    await assert_error(await client.post(sync, json={"length": 1, "messages": {}}), 400, "messages")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"index": "0"}]}),
                       400, "messages[0].index")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"index": -1}]}),
                       400, "messages[0].index")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"index": 1}]}),
                       400, "messages")
    await assert_error(await client.post(sync, json={"length": 5, "messages": [
        msg | {"index": 0}, msg | {"index": 1}, msg | {"index": 3}]}), 400, "messages")
    await assert_error(await client.post(sync, json={"length": 5, "messages": [
        msg | {"index": 2}, msg | {"index": 1}]}), 400, "messages")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"role": "narrator"}]}),
                       400, "messages[0].role")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"text": None}]}),
                       400, "messages[0].text")
    await assert_error(await client.post(sync, json={"length": 1, "messages": ["hi"]}), 400, "messages[0]")
    await assert_error(await client.post(sync, json={"length": 1, "anchors": {}}), 400, "anchors")
    await assert_error(await client.post(sync, json={"length": 1, "anchors": [{"index": 0}]}), 400, "anchors[0]")
    # limits (settings apply at once)
    await ok_json(await client.put("/v1/settings", json={"settings": {
        "server.max_sync_messages": 2, "server.max_message_chars": 100}}))
    three = [msg | {"index": i} for i in range(3)]
    await assert_error(await client.post(sync, json={"length": 3, "messages": three}), 400, "messages")
    await assert_error(await client.post(sync, json={"length": 1, "messages": [msg | {"text": "x" * 101}]}),
                       400, "messages[0].text")
    await assert_error(await client.post(url(chat, "/recall"), json={"query": "q" * 101}), 400, "query")
    await ok_json(await client.post(sync, json={"length": 1, "messages": [msg | {"text": "x" * 100}]}))
    # recall validation
    await assert_error(await client.post(url(chat, "/recall"), json={"query": 5}), 400, "query")
    await assert_error(await client.post(url(chat, "/recall"), json={"query": "q", "recent": "x"}), 400, "recent")
    await assert_error(await client.post(url(chat, "/recall"), json={"query": "q", "budget_tokens": 5}),
                       400, "recall.budget_tokens")
    await assert_error(await client.post(url(chat, "/recall"), json={"query": "q", "max_memories": "all"}),
                       400, "recall.max_memories")
    # query parameters
    await assert_error(await client.get(url(chat, "/nodes"), params={"limit": "abc"}), 400, "limit")
    await assert_error(await client.get(url(chat, "/nodes"), params={"limit": "0"}), 400, "limit")
    await assert_error(await client.get(url(chat, "/nodes"), params={"limit": "501"}), 400, "limit")
    await assert_error(await client.get(url(chat, "/nodes"), params={"offset": "-1"}), 400, "offset")
    await assert_error(await client.get(url(chat, "/nodes"), params={"offset": "1.5"}), 400, "offset")
    await assert_error(await client.get(url(chat, "/nodes"), params={"archived": "maybe"}), 400, "archived")
    await assert_error(await client.post(url(chat, "/import"), params={"mode": "x"}, json={}), 400)
    # chats
    await assert_error(await client.get(url("missing", "/status")), 404, "chat_id")
    await assert_error(await client.delete(url("missing")), 404, "chat_id")
    await assert_error(await client.post(url("x" * 513, "/sync"), json={"length": 0}), 400, "chat_id")
    await assert_error(await client.post(url(" ", "/sync"), json={"length": 0}), 400, "chat_id")
    # settings
    await assert_error(await client.put("/v1/settings", json={"settings": {"bogus": 1}}), 400, "bogus")
    await assert_error(await client.put(url(chat, "/settings"), json={"settings": {"index.m": 8}}), 400, "index.m")
    # locked
    await client.post(url(chat, f"/nodes/{node['id']}/lock"))
    await assert_error(await client.patch(url(chat, f"/nodes/{node['id']}"), json={"importance": 1}), 409, "locked")

    # a body larger than server.max_body_bytes
    small = await aiohttp_client(create_app(tmp_path / "small", embedder=HashEmbedder(),
                                            cli_settings={"server.max_body_bytes": 1024}))
    big = {"length": 1, "messages": [msg | {"text": "x" * 4000}]}
    data = await assert_error(await small.post("/v1/chats/c/sync", json=big), 413, None)
    assert "1024" in data["error"] or "max_body_bytes" in data["error"]
    await assert_error(await small.post("/v1/chats/c/import", json={"nodes": ["x" * 2000]}), 413, None)
    await ok_json(await small.post("/v1/chats/c/sync", json={"length": 1, "messages": [msg]}))


async def test_unexpected_exception_is_a_500_with_the_shape(client, monkeypatch):
    sc = sc_of(client)

    async def broken():
        raise RuntimeError("boom")

    monkeypatch.setattr(sc.chats, "list", broken)
    data = await assert_error(await client.get("/v1/chats"), 500, None)
    assert "boom" not in data["error"]


# -- CORS -----------------------------------------------------------------------------------------
async def test_cors_allowed_origin(client):
    resp = await client.get("/health", headers={"Origin": ST_ORIGIN})
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == ST_ORIGIN
    resp = await client.get("/v1/chats", headers={"Origin": "http://localhost:8000"})
    assert resp.headers["Access-Control-Allow-Origin"] == "http://localhost:8000"
    # errors carry it too, so the page can read the message
    resp = await client.get("/v1/nope", headers={"Origin": ST_ORIGIN})
    assert resp.status == 404 and resp.headers["Access-Control-Allow-Origin"] == ST_ORIGIN

    pre = await client.options("/v1/chats/c1/sync", headers={
        "Origin": ST_ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization"})
    assert pre.status == 204
    assert pre.headers["Access-Control-Allow-Origin"] == ST_ORIGIN
    assert "POST" in pre.headers["Access-Control-Allow-Methods"]
    assert "PATCH" in pre.headers["Access-Control-Allow-Methods"]
    assert "authorization" in pre.headers["Access-Control-Allow-Headers"].lower()
    assert "content-type" in pre.headers["Access-Control-Allow-Headers"].lower()


async def test_cors_other_origin_refused(client):
    evil = "http://evil.example"
    resp = await client.get("/health", headers={"Origin": evil})
    await assert_error(resp, 403, "Origin")  # refused outright (tests/test_security.py: every route)
    assert "Access-Control-Allow-Origin" not in resp.headers
    resp = await client.get("/v1/chats")  # no Origin (curl, the ST server plugin): no CORS headers
    assert resp.status == 200 and "Access-Control-Allow-Origin" not in resp.headers
    pre = await client.options("/v1/chats/c1/sync", headers={
        "Origin": evil, "Access-Control-Request-Method": "POST"})
    data = await assert_error(pre, 403, "Origin")
    assert "server.cors_origins" in data["error"]
    assert "Access-Control-Allow-Origin" not in pre.headers


async def test_cors_origins_is_a_setting(client):
    other = "https://st.example.org"
    await ok_json(await client.put("/v1/settings", json={"settings": {"server.cors_origins": [other]}}))
    resp = await client.get("/health", headers={"Origin": other})
    assert resp.headers["Access-Control-Allow-Origin"] == other
    pre = await client.options("/v1/settings", headers={"Origin": other, "Access-Control-Request-Method": "PUT"})
    assert pre.status == 204
    resp = await client.get("/health", headers={"Origin": ST_ORIGIN})
    assert "Access-Control-Allow-Origin" not in resp.headers  # no longer listed
    pre = await client.options("/v1/settings", headers={"Origin": ST_ORIGIN, "Access-Control-Request-Method": "PUT"})
    assert pre.status == 403


async def test_extra_cors_origins_keep_the_defaults(client):
    lan = "http://192.168.1.10:8000"
    await ok_json(await client.put("/v1/settings", json={"settings": {"server.extra_cors_origins": [lan]}}))
    for origin in (lan, ST_ORIGIN, "http://localhost:8000"):
        resp = await client.get("/health", headers={"Origin": origin})
        assert resp.headers["Access-Control-Allow-Origin"] == origin
        pre = await client.options("/v1/settings", headers={"Origin": origin, "Access-Control-Request-Method": "PUT"})
        assert pre.status == 204
    pre = await client.options("/v1/settings", headers={"Origin": "http://evil.example",
                                                       "Access-Control-Request-Method": "PUT"})
    assert pre.status == 403
    settings = (await ok_json(await client.get("/v1/settings")))["settings"]
    assert settings["server.cors_origins"] == ["http://127.0.0.1:8000", "http://localhost:8000"]


# -- auth -----------------------------------------------------------------------------------------
def test_non_loopback_without_token_is_refused(tmp_path):
    with pytest.raises(StbmeError, match="token"):
        create_app(tmp_path / "d", host="0.0.0.0", embedder=HashEmbedder())
    with pytest.raises(StbmeError):
        create_app(tmp_path / "d", host="192.168.1.20", embedder=HashEmbedder())
    for host in ("127.0.0.1", "localhost", "::1"):
        create_app(tmp_path / host.replace(":", "_"), host=host, embedder=HashEmbedder())


async def test_token_auth(tmp_path, aiohttp_client):
    client = await aiohttp_client(create_app(tmp_path / "d", host="0.0.0.0", token="s3cret",
                                             embedder=HashEmbedder()))
    data = await assert_error(await client.get("/v1/chats"), 401, None)
    assert "Bearer" in data["error"]
    await assert_error(await client.get("/v1/chats", headers={"Authorization": "Bearer wrong"}), 401)
    await assert_error(await client.get("/v1/chats", headers={"Authorization": "Bearer s3cret-and-more"}), 401)
    await assert_error(await client.get("/v1/chats", headers={"Authorization": "Basic s3cret"}), 401)
    await assert_error(await client.get("/v1/chats", headers={"Authorization": "s3cret"}), 401)
    await assert_error(await client.get("/v1/chats", headers={"Authorization": "Bearer"}), 401)
    resp = await client.get("/v1/chats", headers={"Origin": ST_ORIGIN})
    await assert_error(resp, 401)
    assert resp.headers["Access-Control-Allow-Origin"] == ST_ORIGIN  # the page can read why
    await assert_error(await client.post("/v1/chats/c/sync", json={"length": 0}), 401)
    await assert_error(await client.get("/v1/chats?token=s3cret"), 401)  # query token only for the WebSocket
    await assert_error(await client.get("/v1/nope"), 401)  # no route probing without the token
    good = {"Authorization": "Bearer s3cret"}
    assert (await ok_json(await client.get("/v1/chats", headers=good)))["chats"] == []
    await ok_json(await client.post("/v1/chats/c/sync", json={"length": 0}, headers=good))
    await ok_json(await client.get("/v1/chats", headers={"Authorization": "bearer  s3cret "}))  # scheme is caseless
    await ok_json(await client.get("/health"))  # health stays open
    # preflights carry no credentials
    pre = await client.options("/v1/chats", headers={"Origin": ST_ORIGIN, "Access-Control-Request-Method": "GET"})
    assert pre.status == 204
    # the WebSocket: header or ?token=
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await client.ws_connect("/v1/ws")
    assert info.value.status == 401
    ws = await client.ws_connect("/v1/ws?token=s3cret")
    assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "hello"
    await ws.close()
    ws = await client.ws_connect("/v1/ws", headers=good)
    assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "hello"
    await ws.close()


# -- odd chat ids ---------------------------------------------------------------------------------
ODD_IDS = [
    "Elena - 2024-05-01 @12h 30m 15s 123ms",
    "user@example.com",
    "角色卡 艾琳娜 - 2024-5-1 @12h30m",
    "100% sure",
    "a/b/../c",
    "%2F already encoded",
    "tab\tand?query#frag&x=1+2",
    "😀 emoji",
    "x" * 512,
]


@pytest.mark.parametrize("chat_id", ODD_IDS, ids=range(len(ODD_IDS)))
async def test_odd_chat_ids_round_trip(client, chat_id):
    await full_sync(client, chat_id, MESSAGES)
    status = await settle(sc_of(client), chat_id)
    assert status["chat_id"] == chat_id and status["processed_upto"] == len(MESSAGES) - 1
    assert "oak tree" in (await recall(client, chat_id, "where is the silver key buried"))["text"]
    http_status = await ok_json(await client.get(url(chat_id, "/status")))
    assert http_status["chat_id"] == chat_id
    chats = (await ok_json(await client.get("/v1/chats")))["chats"]
    assert [c["chat_id"] for c in chats] == [chat_id]
    nodes = await ok_json(await client.get(url(chat_id, "/nodes")))
    node_id = nodes["nodes"][0]["id"]
    await ok_json(await client.post(url(chat_id, f"/nodes/{node_id}/pin")))
    assert (await client.get(url(chat_id, "/export"))).status == 200
    await ok_json(await client.delete(url(chat_id)))
    assert (await ok_json(await client.get("/v1/chats")))["chats"] == []


async def test_odd_chat_ids_are_distinct(client):
    for chat_id in ("a/b", "a%2Fb", "a b", "a+b"):
        await client.post(url(chat_id, "/nodes"), json={"text": f"memory of {chat_id}"})
    chats = {c["chat_id"] for c in (await ok_json(await client.get("/v1/chats")))["chats"]}
    assert chats == {"a/b", "a%2Fb", "a b", "a+b"}
    for chat_id in chats:
        nodes = (await ok_json(await client.get(url(chat_id, "/nodes"))))["nodes"]
        assert [n["fields"]["summary"] for n in nodes] == [f"memory of {chat_id}"]


async def test_chat_id_length_limit(client):
    await assert_error(await client.post(url("y" * 513, "/sync"), json=sync_body(MESSAGES)), 400, "chat_id")
    await assert_error(await client.post(url("y" * 513, "/recall"), json={"query": "x"}), 400, "chat_id")
    await assert_error(await client.post(url("y" * 513, "/nodes"), json={"text": "x"}), 400, "chat_id")
    assert (await ok_json(await client.get("/v1/chats")))["chats"] == []


# -- WebSocket ------------------------------------------------------------------------------------
async def collect_until_job(ws, chat_id: str, deadline_s: float = DEADLINE_S) -> tuple[list[dict], dict]:
    """Read live messages until a `job` message for the chat; return the progress seen and that job."""
    progress = []
    deadline = time.monotonic() + deadline_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no job message for {chat_id!r}; progress seen: {progress}")
        message = await ws.receive_json(timeout=left)
        if message["type"] == "progress" and message["chat_id"] == chat_id:
            progress.append(message)
        elif message["type"] == "job" and message["chat_id"] == chat_id and message["state"] != "pending":
            return progress, message


async def test_websocket_hello_ping_and_progress(client):
    ws = await client.ws_connect("/v1/ws")
    hello = await ws.receive_json(timeout=DEADLINE_S)
    assert hello == {"type": "hello", "version": hello["version"]} and isinstance(hello["version"], str)
    await ws.send_json({"type": "hello", "client": "st-extension", "version": "test"})
    await ws.send_json({"type": "ping"})
    assert (await ws.receive_json(timeout=DEADLINE_S)) == {"type": "pong"}
    await ws.send_str("not json")
    assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "error"
    await ws.send_json({"type": "ping"})
    assert (await ws.receive_json(timeout=DEADLINE_S)) == {"type": "pong"}
    assert (await ok_json(await client.get("/health")))["live_clients"] == 1

    await full_sync(client, "c1", MESSAGES)
    progress, job = await collect_until_job(ws, "c1")
    assert job == {"type": "job", "chat_id": "c1", "state": "done", "error": None}
    extract = [m for m in progress if m["task"] == "extract"]
    assert extract, progress
    last = extract[-1]
    assert last["done"] == last["total"] == len(MESSAGES)
    assert set(last) == {"type", "task", "chat_id", "done", "total", "eta_s", "embedded", "embed_total", "working"}
    assert last["working"] is False and last["embedded"] == last["embed_total"] > 0
    assert all(0 < m["done"] <= m["total"] for m in extract)
    await ws.close()
    await settle(sc_of(client), "c1")

    async def unsubscribed():  # the server side unsubscribes the closed socket
        return (await ok_json(await client.get("/health")))["live_clients"] == 0

    await wait_for(unsubscribed, "the closed socket to be unsubscribed")


async def test_websocket_two_clients_both_get_messages(client):
    a = await client.ws_connect("/v1/ws")
    b = await client.ws_connect("/v1/ws")
    for ws in (a, b):
        assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "hello"
    await full_sync(client, "c1", MESSAGES)
    for ws in (a, b):
        _, job = await collect_until_job(ws, "c1")
        assert job["state"] == "done"
        await ws.close()


async def test_websocket_closed_on_shutdown(tmp_path, aiohttp_client):
    client = await aiohttp_client(create_app(tmp_path / "d", embedder=HashEmbedder()))
    ws = await client.ws_connect("/v1/ws")
    assert (await ws.receive_json(timeout=DEADLINE_S))["type"] == "hello"
    await client.server.close()
    message = await asyncio.wait_for(ws.receive(), timeout=DEADLINE_S)
    assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
    assert ws.closed or message.type == aiohttp.WSMsgType.CLOSE


# -- /health says the model is ready only when it is ----------------------------------------------------------
class WarmingEmbedder(HashEmbedder):
    """A model that takes its time to load, until the gate opens."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()
        self.warming = False

    async def warm_up(self):
        self.warming = True
        await self.gate.wait()
        self.warming = False

    @property
    def ready(self) -> bool:
        return not self.warming


async def test_health_is_ready_only_when_the_model_is(aiohttp_client, tmp_path):
    embedder = WarmingEmbedder()
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder))
    await full_sync(client, "c1", SILVER_KEY_CHAT)
    await wait_for(lambda: embedder.warming, "the warm-up to start")
    health = await (await client.get("/health")).json()
    assert health["embedder"]["ready"] is False
    recall = await (await client.post("/v1/chats/c1/recall", json={"query": "silver key"})).json()
    assert "still loading" in recall["degraded"]
    embedder.gate.set()

    async def ready():
        return (await (await client.get("/health")).json())["embedder"]["ready"]

    assert await wait_for(ready, "the model to be ready") is True
    await settle(client.server.app[services_key], "c1")


def test_the_local_model_is_ready_once_loaded():
    embedder = LocalEmbedder()
    assert embedder.ready and not embedder.loaded       # a query would load it first
    embedder.load()
    assert embedder.loaded
