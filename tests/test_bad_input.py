"""Bad input on a running sidecar (issue 9): each is a 4xx that names the field, and nothing is stored."""

from __future__ import annotations

import asyncio
import logging

import numpy as np
import orjson
import pytest
from conftest import DEADLINE_S, SILVER_KEY_CHAT, HashEmbedder, full_sync, settle, wait_for_sync
from test_api import assert_error, node_by_text, ok_json, url

from stbme.api.app import create_app
from stbme.api.keys import services_key
from stbme.errors import BadRequest
from stbme.store import Store
from stbme.store.settings import save_settings
from stbme.tokens import count_tokens

HUGE = [2**63, 2**64 - 1, 2**31, -(2**63) - 1]


def sc_of(client):
    return client.server.app[services_key]


async def chat_count(client) -> int:
    return len((await ok_json(await client.get("/v1/chats")))["chats"])


# -- integers that would overflow SQLite ---------------------------------------------------------------------
@pytest.mark.parametrize("value", HUGE)
async def test_sync_integers_are_bounded(client, value):
    message = {"index": 0, "role": "user", "name": "A", "text": "hi"}
    cases = [({"length": 1, "messages": [message | {"swipe_id": value}]}, "messages[0].swipe_id"),
             ({"length": value, "messages": []}, "length"),
             ({"length": 1, "messages": [message | {"index": value}]}, "messages[0].index"),
             ({"length": 3, "messages": [], "anchors": [{"index": value, "chain": "x"}]}, "anchors[0].index")]
    for body, field in cases:
        await assert_error(await client.post(url("big", "/sync"), json=body), 400, field)
    assert await chat_count(client) == 0


@pytest.mark.parametrize("doc, field", [
    ({"format": "stbme-sidecar", "version": 1, "nodes": [
        {"type": "event", "fields": {"summary": "x"}, "seq_range": [0, 2**63]}]}, "nodes[0].seq_range"),
    ({"format": "stbme-sidecar", "version": 1, "nodes": [
        {"type": "event", "fields": {"summary": "ok"}},
        {"type": "event", "fields": {"summary": "x"}, "seq_range": [-(2**31) - 1, 1]}]}, "nodes[1].seq_range"),
    ({"nodes": [{"type": "event", "fields": {"summary": "x"}, "seqRange": [2**64 - 1, 1]}], "edges": []},
     "nodes[0].seqRange"),
    ({"nodes": [{"type": "event", "fields": {"summary": "x"}, "seq": 2**63, "createdTime": 1}], "edges": []},
     "nodes[0].seq"),
    ({"nodes": [{"type": "event", "fields": {"summary": "x"}, "seqRange": [1, 2]}], "edges": [],
      "lastProcessedSeq": 2**63}, "lastProcessedSeq"),
])
async def test_import_integers_are_bounded(client, doc, field):
    await full_sync(client, "target", SILVER_KEY_CHAT)
    await settle(sc_of(client), "target")
    before = await sc_of(client).transfer.export_chat("target")
    for mode in ("merge", "replace"):
        await assert_error(await client.post(url("target", f"/import?mode={mode}"), json=doc), 400, field)
    after = await sc_of(client).transfer.export_chat("target")
    assert [n["id"] for n in after["nodes"]] == [n["id"] for n in before["nodes"]]


async def test_huge_numbers_in_memory_fields_are_stored_as_given(client):
    """Field values are JSON text, not INTEGER columns: a huge number is kept, not a 500."""
    node = (await ok_json(await client.post(url("c", "/nodes"), json={
        "type": "event", "fields": {"summary": "a big number", "count": 2**64 - 1}})))["node"]
    assert node["fields"]["count"] == 2**64 - 1


# -- settings that cannot work -------------------------------------------------------------------------------
@pytest.mark.parametrize("updates, field", [
    ({"embed.provider": "openai"}, "embed.openai_url"),
    ({"embed.provider": "openai", "embed.openai_url": "   "}, "embed.openai_url"),
    ({"embed.openai_url": "localhost:11434/v1"}, "embed.openai_url"),
    ({"llm.mode": "openai"}, "llm.url"),
    ({"llm.url": "ftp://x"}, "llm.url"),
    ({"network.enabled": True}, "network.hub_url"),
    ({"network.hub_url": "hub.lan:8770"}, "network.hub_url"),
    ({"server.cors_origins": ["http://127.0.0.1:8000/index.html"]}, "server.cors_origins"),
    ({"server.cors_origins": ["null"]}, "server.cors_origins"),
])
async def test_settings_that_cannot_work_are_refused_before_saving(client, tmp_path, updates, field):
    before = (await ok_json(await client.get("/v1/settings")))["settings"]
    await assert_error(await client.put("/v1/settings", json={"settings": updates}), 400, field)
    assert (await ok_json(await client.get("/v1/settings")))["settings"] == before
    # the same rule for `stbme serve --setting`: refused, nothing saved
    with pytest.raises(BadRequest) as refused:
        create_app(tmp_path / "cli", embedder=HashEmbedder(), cli_settings=updates)
    assert refused.value.field == field
    store = Store.open(tmp_path / "cli" / "stbme.sqlite3")
    try:
        assert store.read_sync(lambda conn: conn.execute("SELECT count(*) FROM settings").fetchone()[0]) == 0
    finally:
        store.close()


async def test_a_stored_value_that_is_not_json_is_set_aside_until_saved_again(aiohttp_client, tmp_path):
    """A row edited by hand ('800x', '{oops'), global or per chat: the sidecar starts with the default (or the
    global value), says so, and the next save repairs it (before: the start failed on orjson.loads)."""
    data = tmp_path / "data"
    store = Store.open(data / "stbme.sqlite3")
    store.write_sync(lambda conn: conn.executemany("INSERT INTO settings (scope, name, value) VALUES (?,?,?)", [
        ("", "recall.budget_tokens", "800x"), ("some chat", "recall.max_memories", "{oops"),
        ("", "inject.depth", "3")]))
    store.close()
    client = await aiohttp_client(create_app(data, embedder=HashEmbedder()))
    health = await ok_json(await client.get("/health"))
    messages = {d["field"]: d["message"] for d in health["settings_degraded"]}
    assert set(messages) == {"recall.budget_tokens", "recall.max_memories"}
    assert "'800x' is not JSON" in messages["recall.budget_tokens"] and "--chat 'some chat'" in messages["recall.max_memories"]
    settings = (await ok_json(await client.get(url("some chat", "/settings"))))["settings"]
    assert settings["recall.budget_tokens"] == 800 and settings["recall.max_memories"] == 12 and settings["inject.depth"] == 3
    await ok_json(await client.put("/v1/settings", json={"settings": {"recall.budget_tokens": 900}}))
    await ok_json(await client.put(url("some chat", "/settings"), json={"settings": {"recall.max_memories": 8}}))
    assert (await ok_json(await client.get("/health")))["settings_degraded"] == []
    settings = (await ok_json(await client.get(url("some chat", "/settings"))))["settings"]
    assert settings["recall.budget_tokens"] == 900 and settings["recall.max_memories"] == 8


async def test_a_stored_combination_that_cannot_work_degrades_until_fixed(aiohttp_client, tmp_path, caplog):
    data = tmp_path / "data"
    store = Store.open(data / "stbme.sqlite3")
    store.write_sync(lambda conn: save_settings(conn, {"llm.mode": "openai", "llm.url": "", "recall.budget_tokens": "x",
                                                       "inject.depth": 3}))
    store.write_sync(lambda conn: save_settings(conn, {"recall.max_memories": 10**9}, scope="some chat"))
    store.close()
    with caplog.at_level(logging.WARNING, logger="stbme.settings"):
        client = await aiohttp_client(create_app(data, embedder=HashEmbedder()))
    assert "llm.url is empty" in caplog.text and "recall.budget_tokens" in caplog.text
    health = await ok_json(await client.get("/health"))
    assert {d["field"] for d in health["settings_degraded"]} == {"llm.url", "recall.budget_tokens",
                                                                 "recall.max_memories"}
    settings = (await ok_json(await client.get(url("some chat", "/settings"))))["settings"]
    assert settings["llm.mode"] == "none" and settings["recall.budget_tokens"] == 800
    assert settings["recall.max_memories"] == 12 and settings["inject.depth"] == 3  # good values are kept
    # fixing half of the stored combination brings the other half back
    data = await ok_json(await client.put("/v1/settings", json={"settings": {"llm.url": "http://127.0.0.1:9/v1"}}))
    assert data["settings"]["llm.mode"] == "openai"
    assert sc_of(client).memory_llm.client.id != "none"
    health = await ok_json(await client.get("/health"))
    assert {d["field"] for d in health["settings_degraded"]} == {"recall.budget_tokens", "recall.max_memories"}


# -- chat ids, strict types --------------------------------------------------------------------------------------
@pytest.mark.parametrize("chat_path, field", [("x" * 513, "chat_id"), ("%20%20", "chat_id"), ("a%00b", "chat_id")])
async def test_per_chat_settings_check_the_chat_id(client, chat_path, field):
    path = f"/v1/chats/{chat_path}/settings"
    await assert_error(await client.put(path, json={"settings": {"recall.budget_tokens": 100}}), 400, field)
    await assert_error(await client.get(path), 400, field)
    assert sc_of(client).settings._chat == {}
    rows = await sc_of(client).store.read(lambda conn: conn.execute("SELECT count(*) FROM settings").fetchone()[0])
    assert rows == 0


async def test_types_are_strict(client):
    await full_sync(client, "c1", SILVER_KEY_CHAT)
    await settle(sc_of(client), "c1")
    node = await node_by_text(client, "c1", "red umbrella")
    await ok_json(await client.post(url("c1", f"/nodes/{node['id']}/lock")))
    total = (await ok_json(await client.get(url("c1", "/nodes?archived=all"))))["total"]
    for unlock in ("false", "true", 0, 1, None, []):
        await assert_error(await client.patch(url("c1", f"/nodes/{node['id']}"), json={"unlock": unlock}),
                           400, "unlock")
    assert (await ok_json(await client.get(url("c1", f"/nodes/{node['id']}"))))["node"]["locked"] is True
    for value in (True, False, {"nested": 1}):
        await assert_error(await client.post(url("c1", "/nodes"), json={"type": "event", "fields": {
            "summary": "x", "flag": value}}), 400, "fields.flag")
        await assert_error(await client.patch(url("c1", f"/nodes/{node['id']}"), json={"fields": {"flag": value}}),
                           400, "fields.flag")
    for name in ("pinned", "locked"):
        await assert_error(await client.post(url("c1", "/nodes"), json={"text": "x", name: "true"}), 400, name)
    await assert_error(await client.post(url("c1", "/nodes"), json={"text": "x", "importance": "9"}), 400, "importance")
    await assert_error(await client.put("/v1/settings", json={"settings": {"recall.enabled": "false"}}),
                       400, "recall.enabled")
    await assert_error(await client.put("/v1/settings", json={"settings": {"recall.budget_tokens": True}}),
                       400, "recall.budget_tokens")
    gene = {"name": "g", "triggers": [{"type": "preference", "pattern": ""}], "actions": [{"op": "create_directive"}]}
    await assert_error(await client.post("/v1/dna/genes", json={**gene, "enabled": "false"}), 400, "enabled")
    await assert_error(await client.post("/v1/dna/genes", json={
        **gene, "actions": [{"op": "create_directive", "importance": True}]}), 400, "actions[0].importance")
    await assert_error(await client.post(url("c1", "/recall"), json={"query": "x", "recent": [{"text": 5}]}),
                       400, "recent[0].text")
    assert (await ok_json(await client.get(url("c1", "/nodes?archived=all"))))["total"] == total  # nothing created


# -- bodies that never arrive, queries that are too long, lines that are too long ------------------------------
async def test_a_body_shorter_than_its_content_length_gets_408(client):
    await ok_json(await client.put("/v1/settings", json={"settings": {"server.body_timeout_s": 1}}))
    reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
    try:
        writer.write(b"POST /v1/chats/slow/sync HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"length\": 0")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), DEADLINE_S)  # the server closes: read() returns
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), raw[:200]
    data = orjson.loads(body)
    assert data["status"] == 408 and data["field"] == "Content-Length" and "server.body_timeout_s" in data["error"]
    assert await chat_count(client) == 0


def test_a_client_that_hangs_up_mid_body_is_one_line_in_the_log(tmp_path):
    """A closed tab or a cancelled fetch in the middle of a body: aiohttp logged a traceback at ERROR for it
    (issue 20). Now one INFO line per request, nothing stored, and the server keeps answering."""
    import socket
    import urllib.request

    from conftest import serve_process

    log = tmp_path / "serve.log"
    with serve_process(tmp_path / "data", log_path=log) as base:
        host, port = base.removeprefix("http://").split(":")
        for path, framing in (("/v1/chats/gone/sync", b"Content-Length: 100000"),
                              ("/v1/chats/gone/recall", b"Transfer-Encoding: chunked"),
                              ("/v1/authority/session/init", b"Content-Length: 5000")):
            with socket.create_connection((host, int(port))) as sock:
                sock.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             b"Content-Type: application/json\r\n" + framing + b"\r\n\r\n"
                             + (b"400\r\n" if b"chunked" in framing else b"") + b'{"length": 2, "messages": [')
        wait_for_sync(lambda: log.read_text().count("closed the connection before its body arrived") == 3,
                      "three hung-up requests in the log")
        with urllib.request.urlopen(base + "/v1/chats", timeout=DEADLINE_S) as resp:
            assert orjson.loads(resp.read())["chats"] == []
    text = log.read_text()
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]


class RecordingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.queries: list[str] = []

    async def embed_query(self, text) -> np.ndarray:
        self.queries.append(text)
        return await super().embed_query(text)


async def test_only_the_end_of_a_long_recall_query_is_embedded_and_searched(aiohttp_client, tmp_path):
    embedder = RecordingEmbedder()
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder))
    await full_sync(client, "c1", SILVER_KEY_CHAT)
    await settle(sc_of(client), "c1")
    cap = sc_of(client).settings["recall.max_query_tokens"]
    query = "lorem ipsum dolor " * 11_000 + "where is the silver key"
    recent = [{"role": "user", "name": "A", "text": "filler words " * 20_000}]
    embedder.queries.clear()
    data = await ok_json(await client.post(url("c1", "/recall"), json={"query": query, "recent": recent}))
    assert embedder.queries and all(count_tokens(q) <= cap for q in embedder.queries)
    assert any(q.endswith("where is the silver key") for q in embedder.queries)
    assert any("silver key" in m["label"] for m in data["memories"])  # the end of the query still finds it
    too_long = "x" * (sc_of(client).settings["server.max_message_chars"] + 1)
    await assert_error(await client.post(url("c1", "/recall"), json={"query": too_long}), 400, "query")


async def test_query_numbers_must_be_finite(client):
    for since in ("nan", "inf", "-1e999", "soon"):
        await assert_error(await client.get(f"/v1/dna/events?since={since}"), 400, "since")


async def test_over_long_url_or_header_is_one_log_line(client, caplog):
    with caplog.at_level(logging.DEBUG):
        resp = await client.get("/v1/chats?q=" + "a" * 9000)
        assert resp.status == 400
        reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n")
        await writer.drain()
        assert (await asyncio.wait_for(reader.read(), DEADLINE_S)).startswith(b"HTTP/1.0 400")
        writer.close()
    bad = [r for r in caplog.records if "8190 bytes" in r.getMessage()]
    assert len(bad) == 2, [r.getMessage() for r in caplog.records]
    for record in bad:
        assert record.exc_info is None and record.exc_text is None and "\n" not in record.getMessage()
        assert len(record.getMessage()) <= 500
    assert not any(r.exc_info for r in caplog.records)
