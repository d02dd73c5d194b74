"""SillyTavern's multi-user mode (issue 20 item 7): each ST account named by the server plugin
(`X-STBME-Account`) has its own memory; a browser cannot name one; hostile names stay inside the data
directory; without the header the default namespace is what it always was. Real app over HTTP."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from conftest import (DEADLINE_S, SILVER_KEY_CHAT, full_sync, one_line_error, serve_process, settle, st_chat_file,
                      st_message, sync_body)
from test_api import ST_ORIGIN, assert_error, ok_json, url
from test_cli import run

from authority_fixtures import AuthorityClient
from stbme.accounts import ACCOUNTS_DIR, account_dir_name
from stbme.api.app import create_app
from stbme.api.keys import accounts_key, services_key
from stbme.errors import Unavailable

CHAT = "Elena - 2024-05-01@12h00m00s"   # the same ST chat file name in two accounts


def as_account(handle: str) -> dict:
    return {"X-STBME-Account": quote(handle, safe="")}


@pytest.fixture
async def app_client(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder,
                     cli_settings={"server.cors_origins": [ST_ORIGIN]})
    return await aiohttp_client(app)


def space(client, handle: str):
    return client.server.app[accounts_key].opened()[handle]


class AccountHttp:
    """The test client as the plugin sends for one account: the header on every request."""

    def __init__(self, client, handle: str):
        self.client, self.headers = client, as_account(handle)

    def request(self, method, path, **kw):
        return self.client.request(method, path, headers={**self.headers, **kw.pop("headers", {})}, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, **kw):
        return self.request("POST", path, **kw)

    def put(self, path, **kw):
        return self.request("PUT", path, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


async def nodes(http, chat: str) -> dict[str, str]:
    """The chat's memories: id -> their fields as text."""
    data = await ok_json(await http.get(url(chat, "/nodes"), params={"limit": "500", "archived": "all"}))
    return {n["id"]: str(n["fields"]) for n in data["nodes"]}


async def texts(http, chat: str) -> set[str]:
    return set((await nodes(http, chat)).values())


async def test_two_accounts_with_the_same_chat_see_only_their_own(app_client):
    alice, bob = AccountHttp(app_client, "alice"), AccountHttp(app_client, "bob")
    await full_sync(alice, CHAT, SILVER_KEY_CHAT)
    await full_sync(bob, CHAT, [{**m, "text": f"bob's own line: {m['text'].replace('silver', 'golden')}"}
                                for m in SILVER_KEY_CHAT[:-1]])
    await settle(space(app_client, "alice"), CHAT)
    await settle(space(app_client, "bob"), CHAT)

    alice_texts, bob_texts = await texts(alice, CHAT), await texts(bob, CHAT)
    alice_events = {t for t in alice_texts if "summary" in t}
    bob_events = {t for t in bob_texts if "summary" in t}
    assert len(alice_events) >= 4 and len(bob_events) >= 4
    assert all("bob's own line" not in t for t in alice_texts)
    assert all("bob's own line" in t for t in bob_events)
    for http in (alice, bob):   # every message is "still in the prompt" in chats this short
        await ok_json(await http.put(url(CHAT, "/settings"), json={"settings": {"recall.exclude_recent_messages": 0}}))
    recalled = await ok_json(await bob.post(url(CHAT, "/recall"), json={"query": "where is the golden key"}))
    assert recalled["memories"] and "golden" in recalled["text"]
    assert {m["id"] for m in recalled["memories"]} <= set(await nodes(bob, CHAT))
    recalled = await ok_json(await alice.post(url(CHAT, "/recall"), json={"query": "bob's own line golden key"}))
    assert "silver" in recalled["text"] and "golden" not in recalled["text"]
    statuses = [(await ok_json(await h.get(url(CHAT, "/status"))))["messages"] for h in (alice, bob)]
    assert statuses == [len(SILVER_KEY_CHAT), len(SILVER_KEY_CHAT) - 1]

    # Nothing reached the default namespace, which lists no chat.
    assert (await ok_json(await app_client.get("/v1/chats")))["chats"] == []
    assert [c["chat_id"] for c in (await ok_json(await bob.get("/v1/chats")))["chats"]] == [CHAT]

    # One account's wipe and settings leave the other's alone.
    await ok_json(await bob.put(url(CHAT, "/settings"), json={"settings": {"recall.budget_tokens": 321}}))
    await ok_json(await alice.delete(url(CHAT)))
    await assert_error(await alice.get(url(CHAT, "/status")), 404)
    assert await texts(bob, CHAT) == bob_texts
    assert (await ok_json(await alice.get(url(CHAT, "/settings"))))["settings"]["recall.budget_tokens"] != 321

    # Each account's memory is its own database under <data dir>/accounts/.
    data_dir = app_client.server.app[services_key].data_dir
    for handle in ("alice", "bob"):
        assert (data_dir / ACCOUNTS_DIR / account_dir_name(handle) / "stbme.sqlite3").is_file()
        assert space(app_client, handle).data_dir.parent == data_dir / ACCOUNTS_DIR


async def test_the_default_namespace_is_unchanged(app_client):
    """No header (a single-user ST, the CLI) and ST's own `default-user` reach the memory there was."""
    await full_sync(app_client, CHAT, SILVER_KEY_CHAT[:4])
    await settle(app_client.server.app[services_key], CHAT)
    plain = await texts(app_client, CHAT)
    assert plain and await texts(AccountHttp(app_client, "default-user"), CHAT) == plain
    assert app_client.server.app[accounts_key].opened() == {}
    assert not (app_client.server.app[services_key].data_dir / ACCOUNTS_DIR).exists()
    # A single-user ST's page keeps the direct route.
    resp = await app_client.get("/v1/chats", headers={"Origin": ST_ORIGIN})
    assert [c["chat_id"] for c in (await ok_json(resp))["chats"]] == [CHAT]


async def test_a_browser_cannot_name_an_account(app_client):
    await full_sync(AccountHttp(app_client, "alice"), CHAT, SILVER_KEY_CHAT[:2])
    for headers in ({"Origin": ST_ORIGIN}, {"Sec-Fetch-Site": "same-origin"}):
        resp = await app_client.get("/v1/chats", headers={**headers, **as_account("alice")})
        data = await assert_error(resp, 403, "X-STBME-Account")
        assert "plugin" in data["error"]
    # The CORS preflight never lets a page send the header either.
    resp = await app_client.options("/v1/chats", headers={"Origin": ST_ORIGIN, "Access-Control-Request-Method": "GET",
                                                          "Access-Control-Request-Headers": "x-stbme-account"})
    assert "x-stbme-account" not in resp.headers.get("Access-Control-Allow-Headers", "").lower()


async def test_direct_browser_route_is_refused_once_accounts_exist(app_client, aiohttp_client, embedder):
    resp = await app_client.get("/v1/chats", headers={"Origin": ST_ORIGIN})
    await ok_json(resp)                                   # no accounts yet: the direct route works
    await ok_json(await AccountHttp(app_client, "alice").get("/v1/chats"))
    for path in ("/v1/chats", "/v1/settings", url(CHAT, "/status"), "/v1/authority/probe"):
        data = await assert_error(await app_client.get(path, headers={"Origin": ST_ORIGIN}), 403, "X-STBME-Account")
        assert "/api/plugins/stbme" in data["error"]
    await ok_json(await app_client.get("/health", headers={"Origin": ST_ORIGIN}))   # the connection check
    await ok_json(await app_client.get("/v1/chats"))     # a local program (the CLI): the default namespace

    # Known from disk after a restart.
    data_dir = app_client.server.app[services_key].data_dir
    await app_client.close()
    again = await aiohttp_client(create_app(data_dir, embedder=embedder,
                                            cli_settings={"server.cors_origins": [ST_ORIGIN]}))
    await assert_error(await again.get("/v1/chats", headers={"Origin": ST_ORIGIN}), 403, "X-STBME-Account")


@pytest.mark.parametrize("handle", ["../../outside", "..", "/etc/passwd", "a\\..\\..\\b", "灯塔 ユーザー",
                                    "x" * 200, "CON", ".hidden", "%2e%2e%2f"])
async def test_hostile_account_names_stay_in_the_data_dir(app_client, handle):
    http = AccountHttp(app_client, handle)
    await full_sync(http, CHAT, SILVER_KEY_CHAT[:2])
    data_dir = app_client.server.app[services_key].data_dir
    home = space(app_client, handle).data_dir
    assert home.parent == data_dir / ACCOUNTS_DIR and home.name == account_dir_name(handle)
    assert home.resolve().is_relative_to((data_dir / ACCOUNTS_DIR).resolve())
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in home.name) and len(home.name) <= 61
    assert {p.name for p in data_dir.parent.iterdir()} == {data_dir.name}   # nothing beside the data dir
    assert [c["chat_id"] for c in (await ok_json(await http.get("/v1/chats")))["chats"]] == [CHAT]


async def test_account_names_that_are_refused(app_client):
    for raw in ("", "x" * 201, "%ff%fe", quote("tab\there"), quote("nul\x00")):
        resp = await app_client.get("/v1/chats", headers={"X-STBME-Account": raw})
        await assert_error(resp, 400, "X-STBME-Account")
    assert app_client.server.app[accounts_key].opened() == {}
    assert not (app_client.server.app[services_key].data_dir / ACCOUNTS_DIR).exists()


async def test_names_differing_in_case_or_punctuation_are_different_accounts(app_client):
    handles = ["bob", "Bob", "b.o.b", "b-o-b"]
    assert len({account_dir_name(h) for h in handles}) == len(handles)
    for i, handle in enumerate(handles):
        await full_sync(AccountHttp(app_client, handle), f"chat-{i}", SILVER_KEY_CHAT[:2])
    for i, handle in enumerate(handles):
        chats = (await ok_json(await AccountHttp(app_client, handle).get("/v1/chats")))["chats"]
        assert [c["chat_id"] for c in chats] == [f"chat-{i}"]


async def test_authority_protocol_follows_the_account(app_client):
    alice = AuthorityClient(AccountHttp(app_client, "alice"))
    bob = AuthorityClient(AccountHttp(app_client, "bob"))
    for client, who in ((alice, "alice"), (bob, "bob")):
        await client.call("/fs/private/write-file", {"path": "graph/state.json", "content": who, "encoding": "utf8"})
    for client, who in ((alice, "alice"), (bob, "bob")):
        read = await client.call("/fs/private/read-file", {"path": "graph/state.json", "encoding": "utf8"})
        assert read["content"] == who
    await AuthorityClient(app_client).call("/fs/private/read-file", {"path": "graph/state.json"}, expect=404)
    # Alice's session means nothing in Bob's memory, nor in the default namespace.
    for http in (AccountHttp(app_client, "bob"), app_client):
        stolen = AuthorityClient(http)
        stolen.token = alice.token
        await stolen.call("/fs/private/read-file", {"path": "graph/state.json"}, expect=401)


async def test_accounts_share_the_operators_embedding_and_server_settings(app_client):
    alice = AccountHttp(app_client, "alice")
    await ok_json(await app_client.put("/v1/settings", json={"settings": {"recall.budget_tokens": 777}}))
    settings = (await ok_json(await alice.get("/v1/settings")))["settings"]
    assert settings["recall.budget_tokens"] == 777          # a new account starts from the default's settings
    assert settings["server.cors_origins"] == [ST_ORIGIN]
    for name, value in (("embed.batch_size", 8), ("server.max_sync_messages", 5)):
        await assert_error(await alice.put("/v1/settings", json={"settings": {name: value}}), 400, name)
    await ok_json(await alice.put("/v1/settings", json={"settings": {"recall.budget_tokens": 100}}))
    assert (await ok_json(await app_client.get("/v1/settings")))["settings"]["recall.budget_tokens"] == 777
    root = app_client.server.app[services_key]
    assert space(app_client, "alice").embeddings.embedder.owner is root.embeddings.embedder


async def test_live_poll_is_per_account(app_client):
    alice, bob = AccountHttp(app_client, "alice"), AccountHttp(app_client, "bob")
    for http in (alice, bob):
        await ok_json(await http.post("/v1/live/poll", json={"client_id": "same-client-id", "wait_s": 0}))
    space(app_client, "alice").live.notice("info", "for alice only")
    got = (await ok_json(await alice.post("/v1/live/poll", json={"client_id": "same-client-id", "wait_s": 5})))
    assert any("for alice only" in str(m) for m in got["messages"])
    other = (await ok_json(await bob.post("/v1/live/poll", json={"client_id": "same-client-id", "wait_s": 0})))
    assert not any("for alice only" in str(m) for m in other["messages"])


async def test_account_memories_close_with_the_server(app_client):
    await full_sync(AccountHttp(app_client, "alice"), CHAT, SILVER_KEY_CHAT[:2])
    alice = space(app_client, "alice")
    await app_client.close()
    assert alice._closed and app_client.server.app[accounts_key].opened() == {}
    with pytest.raises(Unavailable):   # a request still running at shutdown opens nothing
        await app_client.server.app[accounts_key].get("bob")


def test_account_dir_name_is_one_safe_component():
    for handle in ("../x", "a/b", "\\", "..", "." * 300, "é" * 300, "\udcff"):
        name = account_dir_name(handle)
        assert Path(name).name == name and name not in (".", "..") and len(name) <= 61


def served_without_a_model(tmp_path: Path) -> Path:
    """A data directory for a `stbme serve` subprocess that loads no model (embeddings unavailable)."""
    from stbme.store import Store
    from stbme.store.settings import save_settings

    data = tmp_path / "served"
    data.mkdir()
    store = Store.open(data / "stbme.sqlite3")
    store.write_sync(lambda conn: save_settings(conn, {"embed.provider": "openai", "embed.openai_url": ""}))
    store.close()
    return data


async def test_accounts_on_a_running_stbme_serve(tmp_path):
    """The attack on a real `stbme serve`: Bob's plugin requests and Alice's page cannot reach Alice's chat."""
    data = served_without_a_model(tmp_path)
    with serve_process(data, stop_timeout=10) as base:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE_S)) as http:
            for handle, count in (("alice", 3), ("bob", 2)):
                async with http.post(base + url(CHAT, "/sync"), headers=as_account(handle),
                                     json=sync_body(SILVER_KEY_CHAT[:count])) as resp:
                    assert resp.status == 200, await resp.text()
            for handle, count in (("alice", 3), ("bob", 2)):
                async with http.get(base + url(CHAT, "/status"), headers=as_account(handle)) as resp:
                    assert (await resp.json())["messages"] == count
            async with http.delete(base + url(CHAT), headers=as_account("bob")) as resp:
                assert resp.status == 200
            async with http.get(base + url(CHAT, "/status"), headers=as_account("alice")) as resp:
                assert (await resp.json())["messages"] == 3
            async with http.get(base + "/v1/chats") as resp:
                assert (await resp.json())["chats"] == []
            async with http.get(base + "/v1/chats", headers={"Origin": "http://127.0.0.1:8000", **as_account("alice")}) as resp:
                assert resp.status == 403 and (await resp.json())["field"] == "X-STBME-Account"
            async with http.get(base + url(CHAT, "/status"), headers={"Origin": "http://127.0.0.1:8000"}) as resp:
                assert resp.status == 403 and (await resp.json())["field"] == "X-STBME-Account"
    assert sorted(p.name for p in (data / ACCOUNTS_DIR).iterdir()) == sorted(map(account_dir_name, ("alice", "bob")))


async def test_without_the_token_no_account_is_opened(aiohttp_client, tmp_path, embedder):
    """/health needs no token; naming an account on it (or anywhere) without the token creates nothing."""
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder, token="s3cret"))
    for path in ("/health", "/v1/chats"):
        await assert_error(await client.get(path, headers=as_account("mallory")), 401)
    assert not (tmp_path / "data" / ACCOUNTS_DIR).exists()
    resp = await client.get("/v1/chats", headers={"Authorization": "Bearer s3cret", **as_account("alice")})
    await ok_json(resp)
    assert (tmp_path / "data" / ACCOUNTS_DIR / account_dir_name("alice")).is_dir()


async def test_past_max_accounts_a_new_account_is_refused_and_the_others_keep_working(aiohttp_client, tmp_path,
                                                                                       embedder):
    """Each account is a database, indexes and a worker: a local program naming accounts without end must
    not make the sidecar open them without end."""
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder,
                                             cli_settings={"server.max_accounts": 2}))
    for handle in ("alice", "bob"):
        await ok_json(await client.post(url(CHAT, "/sync"), headers=as_account(handle), json=sync_body(SILVER_KEY_CHAT[:2])))
    resp = await client.post(url(CHAT, "/sync"), headers=as_account("carol"), json=sync_body(SILVER_KEY_CHAT[:2]))
    body = await assert_error(resp, 403)
    assert body["field"] == "X-STBME-Account" and "server.max_accounts" in body["error"]
    assert sorted(p.name for p in (tmp_path / "data" / ACCOUNTS_DIR).iterdir()) == sorted(
        map(account_dir_name, ("alice", "bob")))
    status = await ok_json(await client.get(url(CHAT, "/status"), headers=as_account("alice")))
    assert status["messages"] == 2
    await ok_json(await client.get("/v1/chats"))   # the default namespace is not an account: never refused


# -- the CLI names an account (`stbme --account`) --------------------------------------------------------------
def cli_stats(data: Path, *account: str) -> dict[str, int]:
    result = run(*account, "stats", "--json", "--data-dir", data)
    return {c["chat_id"]: c["messages"] for c in json.loads(result.stdout)["chats"]}


def test_the_cli_reads_and_writes_one_accounts_memory(tmp_path):
    data = tmp_path / "data"
    chat = st_chat_file(tmp_path / f"{CHAT}.jsonl", [st_message(i % 2 == 0, text) for i, text in
                                                    enumerate(SILVER_KEY_CHAT[:4])])
    run("--account", "alice", "ingest", chat, "--create", "--data-dir", data)
    assert cli_stats(data, "--account", "alice") == {CHAT: 4}
    assert cli_stats(data) == {}
    assert cli_stats(data, "--account", "default-user") == {}
    from_env = run("stats", "--json", "--data-dir", data, env={"STBME_ACCOUNT": "alice"})
    assert [c["chat_id"] for c in json.loads(from_env.stdout)["chats"]] == [CHAT]
    result = run("--account", "bob", "stats", "--data-dir", data, expect=1)
    line = one_line_error(result)
    assert "'bob'" in line and "no memory" in line
    assert [p.name for p in (data / ACCOUNTS_DIR).iterdir()] == [account_dir_name("alice")]
    run("--account", "a\nb", "stats", "--data-dir", data, expect=2)


async def test_the_cli_names_the_account_to_a_running_server(tmp_path):
    data = served_without_a_model(tmp_path)
    with serve_process(data, stop_timeout=10) as base:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE_S)) as http:
            async with http.post(base + url(CHAT, "/sync"), headers=as_account("alice"),
                                 json=sync_body(SILVER_KEY_CHAT[:3])) as resp:
                assert resp.status == 200, await resp.text()
        stats = await asyncio.to_thread(cli_stats, data, "--account", "alice")
        assert stats == {CHAT: 3}
        assert await asyncio.to_thread(cli_stats, data) == {}
