"""Progress a person can read: messages processed of stored, memories embedded of made, and a steady time
left, in /health, the chat status, the live channel and the server log."""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import HashEmbedder, full_sync, settle, wait_for

from stbme.api import create_app
from stbme.api.keys import services_key
from stbme.services import Services
from stbme.store.queries import chat_row
from stbme.usecases.progress import LOG_EVERY_S, WINDOW_BATCHES, ProgressTracker, format_duration


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chat(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "name": "Alex" if i % 2 == 0 else "Elena",
             "text": f"Message {i}: the caravan crosses dune number {i} under a pale sky."} for i in range(n)]


@pytest.fixture
async def tracked(sidecar):
    """A tracker on a real store with a chat of 40 messages, on a hand-moved clock."""
    await full_sync(sidecar, "c", chat(40))
    await settle(sidecar, "c")
    clock = Clock()
    return ProgressTracker(sidecar.store, sidecar.live, lambda: sidecar.embeddings.id, clock=clock), clock, sidecar


async def test_the_time_left_comes_from_the_recent_pace_and_stays_steady(tracked):
    tracker, clock, sc = tracked
    tracker.started("c", 0, 2000)
    etas = []
    for batch in range(1, 60):
        clock.now += 1.0 if batch % 10 else 6.0      # steady 16 messages a second, with a hiccup every 10th
        await tracker.batch_done("c", batch * 16, 2000)
        etas.append(tracker.working()[0]["eta_s"])
    assert etas[0] is None                             # too early to tell
    known = [e for e in etas if e is not None]
    assert len(known) >= 55
    # The long-run pace is 160 messages per 15 s. Once the window holds its batches, every estimate keeps
    # to it within 25%, hiccups included (before that it cannot have seen one: within a factor of 2).
    for batch, eta in zip(range(60 - len(known), 60), known):
        truth = (2000 - batch * 16) / (160 / 15)
        margin = 0.25 if batch > WINDOW_BATCHES else 1.0
        assert (1 - margin / 2) * truth <= eta <= (1 + margin) * truth, (batch, eta, truth)
    late = known[-30:]
    assert all(abs(a - b) <= 0.2 * a for a, b in zip(late, late[1:])), late   # no jumps from batch to batch


async def test_progress_of_a_working_chat_in_health_status_and_live(tracked):
    tracker, clock, sc = tracked
    queue = sc.live.subscribe()
    tracker.started("c", 10, 40)
    for i in range(4):
        clock.now += 1.0
        await tracker.batch_done("c", 12 + 2 * i, 40)
    snap = tracker.working()[0]
    assert snap["chat_id"] == "c" and snap["working"] is True
    assert snap["messages"] == {"done": 18, "total": 40, "percent": 45.0}
    assert snap["embedding"]["total"] > 0 and snap["rate_per_s"] == 2.0 and snap["eta_s"] == 11.0
    messages = []
    while not queue.empty():
        messages.append(queue.get_nowait())
    progress = [m for m in messages if m["type"] == "progress"]
    assert progress and progress[-1]["task"] == "extract" and progress[-1]["chat_id"] == "c"
    assert {"done", "total", "eta_s", "embedded", "embed_total", "working"} <= set(progress[-1])
    await tracker.finished("c")
    assert tracker.working() == []
    status = await tracker.chat("c")
    assert status["working"] is False and status["eta_s"] is None


async def test_a_log_line_every_few_seconds_while_working(tracked, caplog):
    tracker, clock, sc = tracked
    tracker.started("c", 0, 40)
    with caplog.at_level(logging.INFO, logger="stbme.progress"):
        for i in range(1, 31):
            clock.now += 0.5                           # a batch every half second for 15 s
            await tracker.batch_done("c", i, 40)
        await tracker.finished("c")
    lines = [r.getMessage() for r in caplog.records if r.name == "stbme.progress"]
    working = [line for line in lines if "messages processed" in line]
    assert 15 / LOG_EVERY_S - 1 <= len(working) <= 15 / LOG_EVERY_S + 1
    assert "chat 'c': 11/40 messages processed (27.5%)" in working[1] and "about 14 s left" in working[1]
    assert "caught up" in lines[-1]


def test_durations_read_well():
    assert format_duration(None) == "time left unknown yet"
    assert format_duration(42) == "about 42 s left"
    assert format_duration(200) == "about 3 min 20 s left"
    assert format_duration(3900) == "about 1 h 05 min left"


class GatedEmbedder(HashEmbedder):
    """Embeds the first `free` batches at once, then waits for the gate: the chat stays mid-way."""

    def __init__(self, free: int):
        super().__init__()
        self.free = free
        self.gate = asyncio.Event()

    async def embed_passages(self, texts):
        if self.calls >= self.free:
            await self.gate.wait()
        return await super().embed_passages(texts)


async def test_health_and_status_while_a_long_chat_is_processed(aiohttp_client, tmp_path, monkeypatch):
    embedder = GatedEmbedder(free=3)
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder))
    sc = client.server.app[services_key]
    original_next = sc.processor.runner.run_next

    async def held_after_the_first_batch(chat_id, stages):  # mid-way until the test has looked
        if (await sc.store.read(lambda conn: chat_row(conn, chat_id)))["processed_upto"] >= 0:
            await embedder.gate.wait()
        return await original_next(chat_id, stages)

    monkeypatch.setattr(sc.processor.runner, "run_next", held_after_the_first_batch)
    await sc.settings_service.update_global({"extract.every": 1})
    await full_sync(client, "long", chat(120))

    async def waiting_on_the_embedder():  # a batch reported, its memories not embedded yet
        status = await (await client.get("/v1/chats/long/status")).json()
        embedding = status["progress"]["embedding"]
        # /health shows a batch once it is reported, a moment after its commit (which the status shows)
        work = (await (await client.get("/health")).json())["progress"]
        return (status["progress"]["messages"]["done"] > 0 and embedding["done"] < embedding["total"] and work
                and work[0]["messages"]["done"] > 0 and (status, work[0]))

    status, work = await wait_for(waiting_on_the_embedder, "the chat to be processed part of the way")
    assert status["progress"]["working"] is True and status["progress"]["messages"]["total"] == 120
    assert 0 < status["progress"]["messages"]["done"] < 120
    assert work["chat_id"] == "long" and work["working"] is True and work["messages"]["total"] == 120
    assert 0 < work["messages"]["done"] < 120 and 0 < work["messages"]["percent"] < 100
    embedder.gate.set()
    final = await settle(sc, "long")
    assert final["progress"]["messages"] == {"done": 120, "total": 120, "percent": 100.0}
    assert final["progress"]["embedding"]["percent"] == 100.0 and final["progress"]["working"] is False
    assert (await (await client.get("/health")).json())["progress"] == []


async def test_process_now_queues_what_is_left_and_refuses_when_extraction_is_off(client):
    sc = client.server.app[services_key]
    await sc.settings_service.update_chat("c", {"extract.enabled": False})
    await full_sync(client, "c", chat(10))
    status = await (await client.get("/v1/chats/c/status")).json()
    assert status["processed_upto"] == -1 and status["jobs"]["pending"] == 0
    resp = await client.post("/v1/chats/c/process", json={})
    assert resp.status == 409 and (await resp.json())["field"] == "extract.enabled"
    await sc.settings_service.update_chat("c", {"extract.enabled": None})
    data = await (await client.post("/v1/chats/c/process", json={})).json()
    # The worker is woken before the answer reads the progress: it may have done some or all of it already.
    assert data["queued"] is True and data["progress"]["messages"]["total"] == 10
    assert 0 <= data["progress"]["messages"]["done"] <= 10
    final = await settle(sc, "c")
    assert final["progress"]["messages"]["done"] == 10
    again = await (await client.post("/v1/chats/c/process", json={})).json()
    assert again["queued"] is False                   # nothing left to do
    assert (await client.post("/v1/chats/nope/process", json={})).status == 404


async def test_the_last_messages_without_a_reply_are_processed_when_every_message_is_asked_for(client):
    """A chat that ends with the user's message (a file brought in whole): a sync leaves that message for
    its reply, "process now" makes its memory too, so the chat reaches 100% and the message is found."""
    sc = client.server.app[services_key]
    messages = chat(9) + [{"role": "user", "name": "Alex", "text": "Tomorrow we sail to the saffron islands."}]
    messages[8] = {**messages[8], "role": "user", "name": "Alex"}    # two user messages at the end
    await full_sync(client, "c", messages)
    status = await settle(sc, "c")
    assert status["progress"]["messages"] == {"done": 8, "total": 10, "percent": 80.0}   # waiting for a reply
    data = await (await client.post("/v1/chats/c/process", json={})).json()
    assert data["queued"] is True
    status = await settle(sc, "c")
    assert status["progress"]["messages"] == {"done": 10, "total": 10, "percent": 100.0}
    await sc.settings_service.update_chat("c", {"recall.exclude_recent_messages": 0})
    found = await (await client.post("/v1/chats/c/recall", json={"query": "saffron islands", "reinforce": False})).json()
    assert "saffron islands" in found["text"]
    # the reply comes: processing goes on after it, and a change at the end lowers the request
    await full_sync(client, "c", messages + [{"role": "assistant", "name": "Elena", "text": "Pack the charts."}])
    status = await settle(sc, "c")
    assert status["progress"]["messages"]["done"] == 11
    await full_sync(client, "c", messages[:9] + [{"role": "user", "name": "Alex", "text": "No, we stay home."}])
    status = await settle(sc, "c")
    assert status["progress"]["messages"] == {"done": 9, "total": 10, "percent": 90.0}   # not asked for again


class ClockedEmbedder(HashEmbedder):
    """Every 64 texts take one second of a hand-moved clock; after `free` seconds of it, a call waits for
    the gate."""

    def __init__(self, clock: Clock, free: float):
        super().__init__()
        self.clock, self.free, self.spent = clock, free, 0.0
        self.gate = asyncio.Event()

    async def embed_passages(self, texts):
        if self.spent >= self.free:
            await self.gate.wait()
        self.spent += len(texts) / 64.0
        self.clock.now += len(texts) / 64.0
        return await super().embed_passages(texts)


def talk(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "name": "Alex" if i % 2 == 0 else "Elena",
             "text": f"Message {i}: Kestrel number {i} crosses the {i % 7}th salt marsh at dawn."} for i in range(n)]


async def test_the_time_left_counts_the_vectors_and_the_log_goes_on_while_embedding(tmp_path, caplog):
    """Without an LLM every message is processed first (keyword-searchable at once), then the vectors are
    made: most of the time. The time left and the log lines must cover that part too."""
    clock = Clock()
    embedder = ClockedEmbedder(clock, free=6)
    sc = Services.open(tmp_path / "data", embedder=embedder)
    sc.progress.clock = clock
    await sc.start()
    try:
        with caplog.at_level(logging.INFO, logger="stbme.progress"):
            await full_sync(sc, "c", talk(1200))

            async def embedding_half_way():   # every message processed, some vectors made, the rest waiting
                status = await sc.chats.status("c")
                return embedder.spent >= embedder.free and status["progress"]["messages"]["done"] == 1200 and status

            status = await wait_for(embedding_half_way, "the chat to be embedded part of the way")
            progress = status["progress"]
            left = progress["embedding"]["total"] - progress["embedding"]["done"]
            assert progress["working"] is True and left > 64
            # One second of the clock per 64 vectors, but not for those made ahead while the messages were
            # processed (their memories find them cached).
            ahead = embedder.texts_embedded - progress["embedding"]["done"]
            truth = (left - ahead) / 64.0
            assert progress["eta_s"] is not None and 0.7 * truth <= progress["eta_s"] <= 1.4 * truth, (progress, truth)
            embedder.gate.set()
            final = await settle(sc, "c")
    finally:
        embedder.gate.set()
        await sc.close()
    assert final["progress"]["embedding"]["percent"] == 100.0 and final["progress"]["working"] is False
    lines = [r.getMessage() for r in caplog.records if r.name == "stbme.progress"]
    embedding = [line for line in lines if "1200/1200 messages processed" in line and "memories embedded" in line]
    # the embedding took about (vectors / 64) seconds of the clock: a line every LOG_EVERY_S of it
    seconds = final["progress"]["embedding"]["total"] / 64
    assert len(embedding) >= int(seconds / LOG_EVERY_S) - 1 >= 1, lines
    assert all("left" in line and "unknown" not in line for line in embedding[1:]), embedding
    assert "caught up" in lines[-1]


async def test_the_time_left_while_messages_are_processed_includes_their_vectors(tracked):
    tracker, clock, sc = tracked
    tracker.started("c", 0, 2000, vectors_follow=True)
    for batch in range(1, 11):                       # 16 messages a second
        clock.now += 1.0
        await tracker.batch_done("c", batch * 16, 2000)
    for _ in range(5):                               # another chat measured the vectors: 64 a second
        clock.now += 1.0
        await tracker.embedded("c", 64)
    snap = tracker.working()[0]
    done, embedded, total = snap["messages"]["done"], snap["embedding"]["done"], snap["embedding"]["total"]
    vectors_left = total - embedded + (2000 - done) * total / done
    truth = (2000 - done) / 16 + vectors_left / 64
    assert snap["eta_s"] is not None and 0.8 * truth <= snap["eta_s"] <= 1.25 * truth, (snap, truth)
