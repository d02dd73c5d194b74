"""The live channel over HTTP long-poll (for the ST proxy plugin route): notices, progress and the LLM
relay without a WebSocket."""

from __future__ import annotations

import asyncio
import random

import pytest

import orjson

from conftest import full_sync, wait_for
from fake_openai import answer
from stbme.api.app import create_app
from stbme.api.keys import polls_key, services_key
from llm_fixtures import PER_MESSAGE
from test_sync_rollback import make_chat

CLIENT = "phone-client-1"


async def poll(client, wait_s=5, relay=False):
    resp = await client.post("/v1/live/poll", json={"client_id": CLIENT, "wait_s": wait_s, "relay": relay})
    data = await resp.json()
    assert resp.status == 200, data
    return data["messages"]


async def test_poll_returns_notices_and_empty_after_the_wait(client):
    sc = client.server.app[services_key]
    assert await poll(client, wait_s=0) == []  # opens the session
    sc.live.notice("info", "hello phone")
    messages = await poll(client)
    assert messages == [{"type": "notice", "level": "info", "message": "hello phone", "chat_id": None}]
    assert await poll(client, wait_s=0.05) == []


async def test_poll_waits_for_the_next_message(client):
    sc = client.server.app[services_key]
    await poll(client, wait_s=0)
    waiting = asyncio.create_task(poll(client, wait_s=30))
    session = client.server.app[polls_key].get(CLIENT)
    await wait_for(lambda: session.busy, "the poll to be waiting")
    assert not waiting.done()
    sc.live.publish({"type": "progress", "task": "extract", "chat_id": "c", "done": 1, "total": 2, "eta_s": 1})
    assert (await waiting)[0]["type"] == "progress"


async def test_bad_poll_requests_name_the_field(client):
    resp = await client.post("/v1/live/poll", json={"client_id": "x"})
    assert resp.status == 400 and (await resp.json())["field"] == "client_id"
    resp = await client.post("/v1/live/poll", json={"client_id": CLIENT, "wait_s": 500})
    assert resp.status == 400 and (await resp.json())["field"] == "wait_s"
    resp = await client.post("/v1/live/send", json={"client_id": CLIENT, "message": {"type": "ping"}})
    assert (await resp.json())["reply"] == {"type": "pong"}


async def test_expired_session_stops_relaying(client):
    """A closed tab is noticed by a timer within the TTL, with no other client polling."""
    sc = client.server.app[services_key]
    client.server.app[polls_key].ttl_s = 0.3
    await poll(client, wait_s=0, relay=True)
    assert sc.relay.connected == 1
    await wait_for(lambda: sc.relay.connected == 0, "the idle session to expire")
    assert len(client.server.app[polls_key]) == 0


@pytest.fixture
async def relay_poll_client(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder,
                     cli_settings={"llm.mode": "relay", "llm.relay_timeout_s": 10, **PER_MESSAGE})
    return await aiohttp_client(app)


async def test_relay_over_long_poll(relay_poll_client):
    """An extension on the proxy route answers relayed LLM requests through poll + send."""
    client = relay_poll_client
    sc = client.server.app[services_key]
    await poll(client, wait_s=0, relay=True)
    stop = asyncio.Event()

    async def extension():
        while not stop.is_set():
            for message in await poll(client, wait_s=1, relay=True):
                if message["type"] == "relay_request":
                    system, user = message["messages"][0]["content"], message["messages"][1]["content"]
                    task = system.split("]", 1)[0].removeprefix("[stbme:")
                    text = orjson.dumps(answer(task, user)).decode()
                    await client.post("/v1/live/send", json={"client_id": CLIENT, "message": {
                        "type": "relay_response", "id": message["id"], "text": text}})

    task = asyncio.create_task(extension())
    try:
        await full_sync(client, "c", make_chat(random.Random(3), 1))
        async def processed():
            status = await sc.chats.status("c")
            return status if status["processed_upto"] == 1 and status["jobs"]["pending"] == 0 else None

        status = await wait_for(processed, "the relayed extraction")
        assert status["degraded_from"] is None
        kinds = await sc.store.read(lambda conn: [r[0] for r in conn.execute(
            "SELECT DISTINCT source FROM nodes WHERE chat_id = 'c'")])
        assert "llm" in kinds  # memories written by the relayed extraction
    finally:
        stop.set()
        await task
