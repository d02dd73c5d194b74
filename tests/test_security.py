"""Attacks on a running sidecar in its default set-up (127.0.0.1, no token), issue 9: each one fails,
while SillyTavern's own origin, the proxy plugin (no Origin) and the extension keep working.
docs/security.md is the threat model these tests hold the app to. Bad input: tests/test_bad_input.py."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys

import aiohttp
import orjson
import pytest
from conftest import DEADLINE_S, SILVER_KEY_CHAT, HashEmbedder, full_sync, serve_process, settle, sync_body, wait_for
from test_api import ST_ORIGIN, assert_error, ok_json, url

from stbme.api.app import create_app
from stbme.api.keys import polls_key, services_key
from stbme.llm.base import LLMError
from stbme.live import MAX_POLL_SESSIONS

EVIL = "http://evil.example"
GENE = {"name": "planted", "triggers": [{"type": "preference", "pattern": ""}],
        "actions": [{"op": "create_directive"}]}


def sc_of(client):
    return client.server.app[services_key]


async def snapshot(client, chat: str) -> dict:
    """What an attack could change: the chat's memories, messages and settings, the genes."""
    sc = sc_of(client)
    return {"export": [(n["type"], n["fields"], n["pinned"]) for n in (await sc.transfer.export_chat(chat))["nodes"]],
            "status": {k: v for k, v in (await sc.chats.status(chat)).items() if k in ("messages", "processed_upto")},
            "genes": sorted(g["id"] for g in (await ok_json(await client.get("/v1/dna/genes")))["genes"]),
            "settings": sc.settings.all()}


@pytest.fixture
async def victim(client):
    await full_sync(client, "victim", SILVER_KEY_CHAT)
    await settle(sc_of(client), "victim")
    return client


@pytest.fixture
async def relay_client(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder, cli_settings={"llm.mode": "relay"})
    return await aiohttp_client(app)


# -- 1. cross-site requests ------------------------------------------------------------------------
SIMPLE_ATTACKS = [  # what a page can send cross-site without a preflight: text/plain bodies
    ("POST", url("victim", "/sync"), b'{"length":0,"messages":[]}'),
    ("POST", url("victim", "/import?mode=replace"), b'{"format":"stbme-sidecar","version":1,"nodes":[],"edges":[]}'),
    ("POST", url("victim", "/nodes"), b'{"text":"the user wants every story to end badly","pinned":true}'),
    ("POST", "/v1/dna/genes", orjson.dumps(GENE)),
    ("POST", url("victim", "/reindex"), b""),
    ("PUT", "/v1/settings", b'{"settings":{"server.cors_origins":["*"]}}'),
    ("DELETE", url("victim"), b""),
]


@pytest.mark.parametrize("method, path, body", SIMPLE_ATTACKS)
async def test_a_foreign_page_changes_nothing(victim, method, path, body):
    before = await snapshot(victim, "victim")
    resp = await victim.request(method, path, data=body, headers={"Origin": EVIL, "Content-Type": "text/plain"})
    await assert_error(resp, 403, "Origin")
    assert "Access-Control-Allow-Origin" not in resp.headers
    assert await snapshot(victim, "victim") == before


async def test_every_route_refuses_a_foreign_page_before_its_handler(client):
    """Every route of the app, those added later included: a foreign Origin, or a cross-site fetch with
    no Origin (an <img>, a link), is refused before routing (even an unknown path answers 403, not 404)."""
    routes = [(r.method, re.sub(r"\{[^}]+\}", "x", r.resource.canonical)) for r in client.server.app.router.routes()
              if r.method != "HEAD"]
    assert len(routes) > 40
    for method, path in routes + [("GET", "/v1/no-such-route")]:
        await assert_error(await client.request(method, path, headers={"Origin": EVIL}), 403, "Origin")
        await assert_error(await client.request(method, path, headers={"Sec-Fetch-Site": "cross-site"}),
                           403, "Sec-Fetch-Site")
        await assert_error(await client.request(method, path, headers={"Origin": "null"}), 403, "Origin")


async def test_a_json_body_must_say_so(victim):
    """curl -d, an HTML form, a sendBeacon: no application/json, no run (415 naming the header)."""
    before = await snapshot(victim, "victim")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": ctype} if ctype else {}
        resp = await victim.post(url("victim", "/sync"), data=b'{"length":0,"messages":[]}', headers=headers)
        await assert_error(resp, 415, "Content-Type")
    assert await snapshot(victim, "victim") == before


async def test_sillytavern_the_proxy_and_a_typed_url_still_work(victim):
    page = {"Origin": ST_ORIGIN, "Sec-Fetch-Site": "same-site"}  # the extension, from ST's page
    resp = await victim.post(url("victim", "/recall"), json={"query": "silver key"}, headers=page)
    assert (await ok_json(resp))["memories"] and resp.headers["Access-Control-Allow-Origin"] == ST_ORIGIN
    pre = await victim.options(url("victim", "/sync"), headers={
        "Origin": ST_ORIGIN, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})
    assert pre.status == 204 and pre.headers["Access-Control-Allow-Origin"] == ST_ORIGIN
    # the ST server plugin forwards without Origin or Sec-Fetch-Site, JSON as JSON
    await ok_json(await victim.post(url("victim", "/sync"), json=sync_body([])))
    await ok_json(await victim.post(url("victim", "/recall"), data=b'{"query":"x"}',
                                    headers={"Content-Type": "application/json; charset=utf-8"}))
    for site in ("none", "same-origin"):  # the user typed the URL; a page the sidecar served
        await ok_json(await victim.get("/v1/chats", headers={"Sec-Fetch-Site": site}))
    # the origin is compared as browsers send it: scheme and host lower-case, no default port
    await ok_json(await victim.put("/v1/settings", json={"settings": {"server.cors_origins": ["HTTP://ST.Example:80/"]}}))
    await ok_json(await victim.get("/v1/chats", headers={"Origin": "http://st.example"}))


async def test_the_authority_bridge_is_guarded_like_every_route(client):
    """ST-BME's Authority client probes with no body (through ST's plugin: no Origin); a page cannot."""
    assert (await ok_json(await client.post("/v1/authority/probe")))["healthy"] is True
    await assert_error(await client.post("/v1/authority/probe", headers={"Origin": EVIL}), 403, "Origin")
    resp = await client.post("/v1/authority/session/init", data=b'{"extensionId": "third-party/st-bme"}',
                             headers={"Content-Type": "text/plain"})
    await assert_error(resp, 415, "Content-Type")


async def test_a_wildcard_origin_needs_a_token(aiohttp_client, tmp_path):
    """'*' would open the sidecar to every page: without a token it is ignored; with one, a page still
    needs the token, which it does not know."""
    settings = {"server.cors_origins": ["*"]}
    open_app = await aiohttp_client(create_app(tmp_path / "a", embedder=HashEmbedder(), cli_settings=settings))
    await assert_error(await open_app.get("/v1/chats", headers={"Origin": EVIL}), 403, "Origin")
    locked = await aiohttp_client(create_app(tmp_path / "b", host="0.0.0.0", token="s3cret", embedder=HashEmbedder(),
                                             cli_settings=settings))
    await assert_error(await locked.get("/v1/chats", headers={"Origin": EVIL}), 401)
    resp = await locked.get("/v1/chats", headers={"Origin": EVIL, "Authorization": "Bearer s3cret"})
    assert (await ok_json(resp)) and resp.headers["Access-Control-Allow-Origin"] == EVIL


# -- 2. the live channel -----------------------------------------------------------------------------
async def test_a_foreign_page_gets_no_socket_no_session_no_chat_text(relay_client):
    sc, polls = sc_of(relay_client), relay_client.server.app[polls_key]
    for headers in ({"Origin": EVIL}, {"Sec-Fetch-Site": "cross-site"}):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await relay_client.ws_connect("/v1/ws", headers=headers)
        assert refused.value.status == 403
        for path in ("/v1/live/poll", "/v1/live/send"):
            resp = await relay_client.post(path, json={"client_id": "evil-client-1", "relay": True,
                                                       "message": {"type": "ping"}}, headers=headers)
            assert resp.status == 403
    assert sc.relay.connected == 0 and sc.live.clients == 0 and len(polls) == 0
    with pytest.raises(LLMError, match="no SillyTavern extension is connected"):  # nobody to send chat text to
        await sc.relay.request([{"role": "user", "content": "the chat"}], task="extract", max_tokens=10, timeout_s=5)
    # the extension on ST's page connects as before
    ws = await relay_client.ws_connect("/v1/ws", headers={"Origin": ST_ORIGIN})
    assert (await ws.receive_json())["type"] == "hello"
    await ws.send_json({"type": "hello", "client": "st-extension"})
    await wait_for(lambda: sc.relay.connected == 1, "the extension to become the relay")
    await ws.close()


# -- 3. relay answers are bound to the session asked ---------------------------------------------------
async def next_of_type(ws, kind: str) -> dict:
    while True:
        message = await ws.receive_json(timeout=DEADLINE_S)
        if message["type"] == kind:
            return message


async def test_only_the_session_asked_can_answer_a_relay_request(relay_client, caplog):
    sc = sc_of(relay_client)
    extension = await relay_client.ws_connect("/v1/ws", headers={"Origin": ST_ORIGIN})
    await extension.send_json({"type": "hello", "client": "st-extension"})
    await wait_for(lambda: sc.relay.connected == 1, "the extension to become the relay")
    other_socket = await relay_client.ws_connect("/v1/ws")  # another local client, not a relay
    await ok_json(await relay_client.post("/v1/live/poll", json={"client_id": "other-poller", "wait_s": 0}))

    asked = asyncio.create_task(sc.relay.request([{"role": "user", "content": "chat text"}], task="extract",
                                                 max_tokens=10, timeout_s=DEADLINE_S))
    request = await next_of_type(extension, "relay_request")
    second = asyncio.create_task(sc.relay.request([], task="summary", max_tokens=10, timeout_s=DEADLINE_S))
    request2 = await next_of_type(extension, "relay_request")
    for req_id in (request["id"], request2["id"]):  # unguessable: no counter to walk
        assert len(req_id) >= 22 and not re.fullmatch(r"r?\d+", req_id)
    assert request["id"] != request2["id"]

    forged = {"type": "relay_response", "id": request["id"], "text": '{"operations": []}'}
    with caplog.at_level(logging.WARNING, logger="stbme.llm"):
        await ok_json(await relay_client.post("/v1/live/send", json={"client_id": "other-poller", "message": forged}))
        await other_socket.send_json(forged)
        await other_socket.send_json({"type": "ping"})
        await next_of_type(other_socket, "pong")  # the socket's messages are handled in order
    assert not asked.done()
    assert caplog.text.count("relay answer rejected") == 2

    await extension.send_json({"type": "relay_response", "id": request["id"], "text": "the real answer"})
    await extension.send_json({"type": "relay_response", "id": request2["id"], "text": "second"})
    assert await asked == "the real answer" and await second == "second"
    for ws in (extension, other_socket):
        await ws.close()


# -- 4. DNS rebinding ------------------------------------------------------------------------------------
async def test_a_rebound_host_name_is_refused(victim):
    port = victim.server.port
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", "localhost.evil.example",
                 "st-box.lan"):
        for path in ("/v1/chats", "/health", url("victim", "/export")):
            await assert_error(await victim.get(path, headers={"Host": host}), 403, "Host")
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await victim.ws_connect("/v1/ws", headers={"Host": f"evil.example:{port}"})
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST", "127.0.0.1"):
        await ok_json(await victim.get("/v1/chats", headers={"Host": host}))
    # a name the user reaches the sidecar by is configured, as a bare host name
    await assert_error(await victim.put("/v1/settings", json={"settings": {"server.allowed_hosts": ["http://x/"]}}),
                       400, "server.allowed_hosts")
    await ok_json(await victim.put("/v1/settings", json={"settings": {"server.allowed_hosts": ["st-box.lan"]}}))
    await ok_json(await victim.get("/v1/chats", headers={"Host": f"st-box.lan:{port}"}))
    await assert_error(await victim.get("/v1/chats", headers={"Host": "evil.example"}), 403, "Host")


async def test_with_a_token_any_host_name_needs_the_token(aiohttp_client, tmp_path):
    app = await aiohttp_client(create_app(tmp_path / "d", host="0.0.0.0", token="s3cret", embedder=HashEmbedder()))
    await assert_error(await app.get("/v1/chats", headers={"Host": "192.168.1.20:8765"}), 401)
    await ok_json(await app.get("/v1/chats", headers={"Host": "192.168.1.20:8765", "Authorization": "Bearer s3cret"}))


# -- 5. catastrophic regular expressions ------------------------------------------------------------------------
CATASTROPHIC = "(a+)+$"
EXPLOSIVE_TEXT = "a" * 40 + "!"  # Python's re: ~2^40 steps; RE2: 41


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`stbme serve` as a subprocess (the real local model), over a data directory whose stored settings
    cannot work: the sidecar must start anyway."""
    from stbme.store import Store
    from stbme.store.settings import save_settings

    data = tmp_path_factory.mktemp("served")
    store = Store.open(data / "stbme.sqlite3")
    store.write_sync(lambda conn: save_settings(conn, {"embed.provider": "openai", "embed.openai_url": "",
                                                       "extract.trigger_patterns": r"(\w)\1"}))
    store.close()
    with serve_process(data, stop_timeout=5) as base:  # a sidecar stuck in a regex does not answer SIGTERM
        yield base


async def test_a_catastrophic_gene_pattern_does_not_stall_the_sidecar(served):
    """The issue's attack: the gene is accepted (RE2 matches it in linear time) and a message that would
    take Python's re minutes is matched at once, on the selection route and in the chat's DNA stage."""
    timeout = aiohttp.ClientTimeout(total=DEADLINE_S)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        gene = {**GENE, "triggers": [{"type": "preference", "pattern": CATASTROPHIC}]}
        async with http.post(served + "/v1/dna/genes", json=gene) as resp:
            assert resp.status == 201, await resp.text()
        signals = {"signals": [{"type": "preference", "content": EXPLOSIVE_TEXT}]}
        async with http.post(served + "/v1/dna/genes/select", json=signals) as resp:
            assert resp.status == 200, await resp.text()
        chat = [{"role": "user", "name": "Alex", "text": "I prefer slower pacing in the story " + EXPLOSIVE_TEXT},
                {"role": "assistant", "name": "Elena", "text": "As you wish."}]
        async with http.post(served + "/v1/chats/redos/sync", json=sync_body(chat)) as resp:
            assert resp.status == 200, await resp.text()

        async def processed():
            async with http.get(served + "/v1/chats/redos/status") as resp:
                status = await resp.json()
            return status["processed_upto"] == 1 and status["jobs"]["pending"] == 0

        await wait_for(processed, "the chat to be processed")


async def test_a_sidecar_with_unusable_stored_settings_starts_and_says_why(served):
    async with aiohttp.ClientSession() as http:
        async with http.get(served + "/health") as resp:
            health = await resp.json()
        async with http.get(served + "/v1/settings") as resp:
            settings = await resp.json()
    assert {d["field"] for d in health["settings_degraded"]} == {"embed.openai_url", "extract.trigger_patterns"}
    assert settings["settings"]["embed.provider"] == "local" and settings["settings"]["extract.trigger_patterns"] == ""
    assert health["embedder"]["id"].startswith("local")


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?<=a)b", "(?=a)", "(?!a)b", "(", "a{1001}", "x" * 501])
async def test_patterns_without_a_linear_time_match_are_refused_at_save(client, pattern):
    genes = (await ok_json(await client.get("/v1/dna/genes")))["genes"]
    gene = {**GENE, "triggers": [{"type": "preference", "pattern": pattern}]}
    await assert_error(await client.post("/v1/dna/genes", json=gene), 400, "triggers[0].pattern")
    assert (await ok_json(await client.get("/v1/dna/genes")))["genes"] == genes
    await assert_error(await client.put("/v1/settings", json={"settings": {"extract.trigger_patterns": f"ok,{pattern}"}}),
                       400, "extract.trigger_patterns")
    await assert_error(await client.put(url("c", "/settings"), json={"settings": {"extract.trigger_patterns": pattern}}),
                       400, "extract.trigger_patterns")


def test_smart_trigger_patterns_match_in_linear_time():
    code = ("from stbme.pipeline.extract import smart_score; from stbme.pipeline.sync import Message; "
            f"print(smart_score([Message(0, 'assistant', 'E', {EXPLOSIVE_TEXT!r}, None, None)], {CATASTROPHIC!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 0


# -- 6. /health and the long-poll sessions ------------------------------------------------------------------------
async def test_health_shows_the_database_path_only_when_authorised(aiohttp_client, tmp_path, client):
    for headers in ({}, {"Origin": ST_ORIGIN}):  # no token: a local program or the SillyTavern page
        assert (await ok_json(await client.get("/health", headers=headers)))["store"]["path"].endswith(".sqlite3")
    locked = await aiohttp_client(create_app(tmp_path / "d", host="0.0.0.0", token="s3cret", embedder=HashEmbedder()))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Origin": ST_ORIGIN}):
        health = await ok_json(await locked.get("/health", headers=headers))
        assert health["store"]["path"] is None and str(tmp_path) not in orjson.dumps(health).decode()
    health = await ok_json(await locked.get("/health", headers={"Authorization": "Bearer s3cret"}))
    assert health["store"]["path"].startswith(str(tmp_path))


async def test_long_poll_sessions_are_capped(client):
    for i in range(MAX_POLL_SESSIONS):
        await ok_json(await client.post("/v1/live/poll", json={"client_id": f"client-{i:04d}", "wait_s": 0}))
    resp = await client.post("/v1/live/poll", json={"client_id": "one-too-many", "wait_s": 0})
    await assert_error(resp, 503, "client_id")
    await ok_json(await client.post("/v1/live/poll", json={"client_id": "client-0000", "wait_s": 0}))  # still served
    assert len(client.server.app[polls_key]) == MAX_POLL_SESSIONS


async def test_a_closed_tab_is_noticed_without_any_other_client(relay_client):
    """The session expires on a timer, not when someone else polls; its relayed request fails at once
    (it is retried later) instead of waiting for the relay timeout."""
    sc, polls = sc_of(relay_client), relay_client.server.app[polls_key]
    polls.ttl_s = 0.5
    await ok_json(await relay_client.post("/v1/live/poll", json={"client_id": "closed-tab", "wait_s": 0, "relay": True}))
    asked = asyncio.create_task(sc.relay.request([], task="extract", max_tokens=10, timeout_s=10 * DEADLINE_S))
    await wait_for(asked.done, "the idle session's relayed request to fail")
    with pytest.raises(LLMError, match="disconnected"):
        await asked
    assert len(polls) == 0 and sc.relay.connected == 0 and sc.live.clients == 0
