"""llm.mode = relay: a real aiohttp WebSocket client stands in for the ST extension and answers the
sidecar's relay_request messages (with the scripted answers of the fake OpenAI server)."""

from __future__ import annotations

import asyncio
import random

import orjson
import pytest

from conftest import DEADLINE_S, full_sync, wait_for
from fake_openai import answer
from stbme.api.app import create_app
from stbme.api.keys import services_key
from stbme.llm.base import LLMError
from stbme.llm.relay import RelayChannel
from stbme.pipeline.extract import ANSWER_SCHEMA as EXTRACT_SCHEMA
from llm_fixtures import PER_MESSAGE
from test_sync_rollback import make_chat


@pytest.fixture
async def relay_client(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder, cli_settings={"llm.mode": "relay", **PER_MESSAGE})
    return await aiohttp_client(app)


async def extension(client, *, served: list | None = None, hello: bool = True):
    """Connect like the extension; answer every relay_request until closed. Returns (ws, task)."""
    ws = await client.ws_connect("/v1/ws")
    assert (await ws.receive_json())["type"] == "hello"
    if hello:
        await ws.send_json({"type": "hello", "client": "st-extension", "version": "test"})

    async def serve():
        async for msg in ws:
            data = msg.json()
            if data.get("type") != "relay_request":
                continue
            if served is not None:
                served.append(data)
            system, user = data["messages"][0]["content"], data["messages"][1]["content"]
            task = system.split("]", 1)[0].removeprefix("[stbme:")
            await ws.send_json({"type": "relay_response", "id": data["id"], "text": orjson.dumps(answer(task, user)).decode()})

    return ws, asyncio.create_task(serve())


async def llm_node_count(sc, chat_id="c"):
    return await sc.store.read(lambda conn: conn.execute(
        "SELECT count(*) FROM nodes WHERE chat_id = ? AND source = 'llm'", (chat_id,)).fetchone()[0])


async def test_relay_runs_extraction_through_the_extension(relay_client):
    sc = relay_client.server.app[services_key]
    served = []
    ws, task = await extension(relay_client, served=served)
    await wait_for(lambda: sc.relay.connected, "the relay client to attach")
    await full_sync(relay_client, "c", make_chat(random.Random(1), 2))
    await wait_for(lambda: _processed(sc, 3))
    assert await llm_node_count(sc) > 0
    assert served[0]["task"] == "extract" and served[0]["max_tokens"] == 1200
    assert served[0]["messages"][0]["role"] == "system"
    # the answer's shape goes with it, as the openai client sends it (the extension hands it to generateRaw)
    assert served[0]["schema"] == EXTRACT_SCHEMA and served[0]["schema"]["required"] == ["operations"]
    health = await (await relay_client.get("/health")).json()
    assert health["llm"]["relay_clients"] == 1 and health["llm"]["usage"]["tasks"]["extract"]["calls"] >= 2
    await ws.close()
    task.cancel()


async def _processed(sc, upto):
    return (await sc.chats.status("c"))["processed_upto"] >= upto


async def test_without_extension_the_job_is_parked_then_resumed(relay_client):
    sc = relay_client.server.app[services_key]
    await sc.settings_service.update_global({"llm.degrade_when_down": False})
    await full_sync(relay_client, "c", make_chat(random.Random(2), 1))

    async def parked():
        status = await sc.chats.status("c")
        return status["jobs"]["last_error"] and "no SillyTavern extension is connected" in status["jobs"]["last_error"]

    await wait_for(parked)
    status = await sc.chats.status("c")
    assert status["processed_upto"] == -1 and status["nodes"] == 0  # nothing lost, nothing half-written
    ws, task = await extension(relay_client)  # connecting resumes the parked job
    await wait_for(lambda: _processed(sc, 1))
    assert await llm_node_count(sc) > 0
    await ws.close()
    task.cancel()


async def test_without_extension_memories_are_made_without_llm_then_redone(relay_client):
    sc = relay_client.server.app[services_key]
    await full_sync(relay_client, "c", make_chat(random.Random(2), 1))

    async def degraded():
        status = await sc.chats.status("c")
        return status["degraded_from"] == 0 and status["processed_upto"] == 1 and status["jobs"]["pending"] == 0

    await wait_for(degraded)
    assert (await sc.chats.status("c"))["nodes"] > 0 and await llm_node_count(sc) == 0  # heuristic only
    ws, task = await extension(relay_client)  # the LLM is reachable again: the batch is redone with it
    await wait_for(lambda: llm_node_count(sc))
    status = await sc.chats.status("c")
    assert status["degraded_from"] is None and status["processed_upto"] == 1
    await ws.close()
    task.cancel()


async def test_a_plain_live_client_is_not_a_relay(relay_client):
    sc = relay_client.server.app[services_key]
    ws = await relay_client.ws_connect("/v1/ws")
    await ws.receive_json()
    await ws.send_json({"type": "ping"})
    assert (await ws.receive_json())["type"] == "pong"
    assert sc.relay.connected == 0
    await ws.close()


async def test_extension_errors_and_disconnects_fail_the_request_at_once():
    channel = RelayChannel()
    sent = []
    peer = channel.attach(sent.append)
    pending = asyncio.create_task(channel.request([{"role": "user", "content": "x"}], task="summary",
                                                  max_tokens=10, timeout_s=DEADLINE_S))
    await wait_for(lambda: sent, "the request to reach the extension")
    assert sent[0]["type"] == "relay_request" and sent[0]["task"] == "summary"
    assert channel.resolve({"type": "relay_response", "id": sent[0]["id"], "error": "No API connected"}, peer)
    with pytest.raises(LLMError, match="could not run the relayed LLM request: No API connected"):
        await pending
    assert not channel.resolve({"type": "relay_response", "id": sent[0]["id"], "text": "late"}, peer)  # ignored
    pending = asyncio.create_task(channel.request([], task="summary", max_tokens=10, timeout_s=DEADLINE_S))
    await wait_for(lambda: len(sent) == 2, "the second request to reach the extension")
    channel.detach(peer)
    with pytest.raises(LLMError, match="disconnected before answering"):
        await pending


async def test_relay_request_times_out_cleanly():
    channel = RelayChannel()
    channel.attach(lambda message: None)  # an extension that never answers
    with pytest.raises(LLMError, match="did not answer the relayed extract request within 0.1 s"):
        await channel.request([], task="extract", max_tokens=10, timeout_s=0.1)
    with pytest.raises(LLMError, match="no SillyTavern extension is connected"):
        await RelayChannel().request([], task="extract", max_tokens=10, timeout_s=1)


async def test_a_relayed_answer_past_what_max_tokens_allows_is_refused():
    from stbme.llm.base import LLMAnswerError, answer_byte_limit
    from stbme.llm.relay import RelayLLM

    channel = RelayChannel()
    llm = RelayLLM(channel, max_tokens=100, timeout_s=DEADLINE_S)
    texts = iter(["x" * (answer_byte_limit(100) + 1), '{"summary": "fine"}'])
    peer = None

    def extension(message):  # answers at once, like an extension on a fast ST connection
        asyncio.get_running_loop().call_soon(channel.resolve, {"type": "relay_response", "id": message["id"],
                                                               "text": next(texts)}, peer)

    peer = channel.attach(extension)
    with pytest.raises(LLMAnswerError, match="ignored max_tokens"):
        await llm.complete([{"role": "user", "content": "x"}], task="summary")
    assert (await llm.complete([{"role": "user", "content": "x"}], task="summary")).text == '{"summary": "fine"}'
    assert llm.usage.snapshot()["tasks"]["summary"]["failures"] == 1


async def test_a_request_for_more_tokens_waits_in_proportion():
    """A CPU model writes at its own pace: llm.relay_timeout_s is for an answer of llm.max_tokens, and a
    cut answer's retry, asking twice the room, may take twice as long (issue 20 item 9: a real model was cut
    off mid-answer by the relay's timeout)."""
    from stbme.llm.relay import RelayLLM

    waits = []

    class Channel(RelayChannel):
        async def request(self, messages, *, task, max_tokens, timeout_s, schema=None):
            waits.append((max_tokens, timeout_s))
            return '{"summary": "fine"}'

    llm = RelayLLM(Channel(), max_tokens=1200, timeout_s=600)
    for asked in (None, 600, 2400):
        await llm.complete([{"role": "user", "content": "x"}], task="summary", max_tokens=asked)
    assert waits == [(1200, 600), (600, 600), (2400, 1200)]
