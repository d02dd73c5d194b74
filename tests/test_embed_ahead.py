"""Embedding ahead on a long first ingest (heuristic mode): the texts the newest messages' memories will
have are embedded into the cache, newest first, while older messages are still being extracted; the
memories then find their vectors there, and nothing is embedded twice."""

from __future__ import annotations

import asyncio

import orjson

from stbme.graph.model import node_text
from stbme.pipeline.heuristic import event_texts, speakers_before
from stbme.pipeline.sync import load_messages
from stbme.store.queries import chat_row
from stbme.usecases.processing import AHEAD_MIN_MESSAGES, AHEAD_STEP_MESSAGES, AHEAD_TEXTS_PER_CALL

from conftest import full_sync, settle, wait_for

LONG_REPLY = ("Elena trims the wick of the harbour lantern and tells of the night the tide rose over the quay. "
              "She says the fishermen of Saltmere still leave a candle in every window for the drowned, and "
              "that her brother Tobin kept the old ledger of every ship that never came home. ") * 3


def roleplay(n: int) -> list[dict]:
    """Alex asks, Elena answers; every fourth reply is long enough to be cut into several memories."""
    return [{"role": "user", "name": "Alex", "text": f"Hey Elena, what about the lantern, turn {i}?"} if i % 2 == 0
            else {"role": "assistant", "name": "Elena",
                  "text": (LONG_REPLY if i % 4 == 1 else "") + f"Elena answers number{i} with a smile."}
            for i in range(n)]


async def event_texts_stored(sc, chat_id: str) -> list[str]:
    rows = await sc.store.read(lambda conn: conn.execute(
        "SELECT fields FROM nodes WHERE chat_id = ? AND type = 'event' AND archived = 0", (chat_id,)).fetchall())
    return [node_text(orjson.loads(r["fields"])) for r in rows]


async def test_the_predicted_texts_are_exactly_the_memories_texts(sidecar):
    chat = roleplay(24)
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    messages = await sidecar.store.read(lambda conn: load_messages(conn, "c", 0))
    chunk_tokens = sidecar.settings.get("extract.chunk_tokens", "c")
    predicted = event_texts(messages, chunk_tokens=chunk_tokens, speakers=set())
    stored = await event_texts_stored(sidecar, "c")
    assert len(predicted) > len(messages)              # long replies are cut: more memories than messages
    assert sorted(predicted) == sorted(stored)


async def test_the_predicted_texts_leave_out_the_chat_names_a_message_addresses(sidecar):
    """As the memories' texts do: from any message on, whatever the messages before it are."""
    chat = [{"role": "assistant", "name": "艾琳", "text": "你好，我是艾琳。我今天去了集市，买了一篮苹果。"}]
    chat += [{"role": "user", "name": "小明", "text": f"艾琳，第{i}天你去了哪里？"} if i % 2 == 0 else
             {"role": "assistant", "name": "艾琳", "text": f"我第{i}天去了河边，小明。"} for i in range(1, 12)]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    messages = await sidecar.store.read(lambda conn: load_messages(conn, "c", 0))
    chunk_tokens = sidecar.settings.get("extract.chunk_tokens", "c")
    stored = await event_texts_stored(sidecar, "c")
    assert sorted(event_texts(messages, chunk_tokens=chunk_tokens, speakers=set())) == sorted(stored)
    later = await sidecar.store.read(lambda conn: speakers_before(conn, "c", 5))
    assert set(event_texts(messages[5:], chunk_tokens=chunk_tokens, speakers=later)) <= set(stored)
    assert "小明: 第2天你去了哪里？" in stored and "艾琳: 我第3天去了河边。" in stored


async def test_the_newest_messages_are_embedded_ahead_and_their_memories_reuse_the_vectors(sidecar, embedder):
    n = 3 * AHEAD_STEP_MESSAGES + AHEAD_MIN_MESSAGES
    await sidecar.settings_service.update_chat("c", {"extract.enabled": False})   # stored, not extracted
    await full_sync(sidecar, "c", roleplay(n))
    calls = []
    original = embedder.embed_passages

    async def recording(texts):
        calls.append(list(texts))
        return await original(texts)

    embedder.embed_passages = recording
    await sidecar.processor._embed_ahead("c")          # nothing extracts meanwhile: it covers every message
    messages = await sidecar.store.read(lambda conn: load_messages(conn, "c", 0))
    chunk_tokens = sidecar.settings.get("extract.chunk_tokens", "c")
    low = messages[-AHEAD_STEP_MESSAGES].index
    speakers = await sidecar.store.read(lambda conn: speakers_before(conn, "c", low))
    newest = event_texts(messages[-AHEAD_STEP_MESSAGES:][::-1], chunk_tokens=chunk_tokens, speakers=speakers)
    embedded = [t for call in calls for t in call]
    newest = list(dict.fromkeys(newest))
    assert embedded[:len(newest)] == newest, "the newest messages go first (each text once)"
    assert max(map(len, calls)) <= AHEAD_TEXTS_PER_CALL   # a slice at a time: one core, beside the extraction
    assert len(embedded) == len(set(embedded)) and set(embedded) == set(event_texts(messages, chunk_tokens=chunk_tokens, speakers=set()))

    calls.clear()
    await sidecar.settings_service.update_chat("c", {"extract.enabled": None})
    await sidecar.chats.process_now("c")
    await settle(sidecar, "c")
    again = {t for call in calls for t in call}
    assert not again & set(await event_texts_stored(sidecar, "c")), "a memory's text was embedded twice"
    assert again, "the name anchors, which are not predicted, are embedded as usual"


async def test_only_the_newest_messages_are_embedded_ahead(sidecar, embedder, monkeypatch):
    from stbme.usecases import processing

    monkeypatch.setattr(processing, "AHEAD_MAX_MESSAGES", AHEAD_MIN_MESSAGES)
    await sidecar.settings_service.update_chat("c", {"extract.enabled": False})
    await full_sync(sidecar, "c", roleplay(3 * AHEAD_MIN_MESSAGES))
    before = embedder.texts_embedded
    await sidecar.processor._embed_ahead("c")
    messages = await sidecar.store.read(lambda conn: load_messages(conn, "c", 0))
    speakers = await sidecar.store.read(lambda conn: speakers_before(conn, "c", messages[-AHEAD_MIN_MESSAGES].index))
    newest = event_texts(messages[-AHEAD_MIN_MESSAGES:], chunk_tokens=sidecar.settings.get("extract.chunk_tokens", "c"),
                         speakers=speakers)
    assert embedder.texts_embedded - before == len(set(newest))


async def test_a_short_backlog_is_not_embedded_ahead(sidecar, embedder):
    await sidecar.settings_service.update_chat("c", {"extract.enabled": False})
    await full_sync(sidecar, "c", roleplay(AHEAD_MIN_MESSAGES - 2))
    before = embedder.calls
    await sidecar.processor._embed_ahead("c")
    assert embedder.calls == before


async def test_an_ingest_embeds_its_newest_messages_ahead_while_it_extracts(sidecar, embedder, monkeypatch):
    """The real flow: after the first batch of a long backlog, the work ahead starts; the extraction is held
    before its second batch until the model was asked for the newest messages' texts, so the order is
    certain (unheld, the rest of this chat is extracted in one more batch, and its own embedding begins)."""
    calls: list[list[str]] = []
    original_embed, original_next = embedder.embed_passages, sidecar.processor.runner.run_next
    chunk_tokens = sidecar.settings.get("extract.chunk_tokens", "c")

    async def newest_texts() -> list[str]:
        messages = await sidecar.store.read(lambda conn: load_messages(conn, "c", 0))
        newest = messages[-AHEAD_STEP_MESSAGES:]
        speakers = await sidecar.store.read(lambda conn: speakers_before(conn, "c", newest[0].index))
        return list(dict.fromkeys(event_texts(newest[::-1], chunk_tokens=chunk_tokens, speakers=speakers)))

    async def recording(texts):
        calls.append(list(texts))
        return await original_embed(texts)

    async def held_after_the_first_batch(chat_id, stages):
        status = await sidecar.store.read(lambda conn: chat_row(conn, chat_id))
        if status["processed_upto"] >= 0:
            wanted = len(await newest_texts())
            await wait_for(lambda: sum(map(len, calls)) >= wanted, "the newest messages embedded ahead")
        return await original_next(chat_id, stages)

    monkeypatch.setattr(embedder, "embed_passages", recording)
    monkeypatch.setattr(sidecar.processor.runner, "run_next", held_after_the_first_batch)
    await full_sync(sidecar, "c", roleplay(4 * AHEAD_STEP_MESSAGES))
    await settle(sidecar, "c")
    newest = await newest_texts()
    embedded = [t for call in calls for t in call]
    assert embedded[:len(newest)] == newest
    assert len(embedded) == len(set(embedded)), "a text was embedded twice"


async def test_the_call_under_way_when_the_extraction_ends_is_finished_not_thrown_away(sidecar, embedder, monkeypatch):
    """The extraction ends while the work ahead waits for the model: its call is let finish (cancelled, its
    vectors were lost and its texts embedded a second time right after)."""
    calls: list[list[str]] = []
    cancelled: list[list[str]] = []
    model_busy, model_free = asyncio.Event(), asyncio.Event()
    original_embed, original_next = embedder.embed_passages, sidecar.processor.runner.run_next

    async def held_model(texts):
        calls.append(list(texts))
        if not model_free.is_set():   # the work ahead's first call (the extraction's start never embeds)
            model_busy.set()
            try:
                await model_free.wait()
            except asyncio.CancelledError:
                cancelled.append(list(texts))
                raise
        return await original_embed(texts)

    async def extraction(chat_id, stages):
        status = await sidecar.store.read(lambda conn: chat_row(conn, chat_id))
        if status["processed_upto"] >= 0:   # after the first batch: once the work ahead's call is under way
            await wait_for(model_busy.is_set, "the work ahead's first model call")
        ctx = await original_next(chat_id, stages)
        if ctx is None:                      # everything is extracted: the call ends only now
            model_free.set()
        return ctx

    monkeypatch.setattr(embedder, "embed_passages", held_model)
    monkeypatch.setattr(sidecar.processor.runner, "run_next", extraction)
    await full_sync(sidecar, "c", roleplay(4 * AHEAD_STEP_MESSAGES))
    await settle(sidecar, "c")
    embedded = [t for call in calls for t in call]
    assert model_busy.is_set() and not cancelled
    assert len(embedded) == len(set(embedded)), "a text was embedded twice"


async def test_work_ahead_that_fails_is_logged_and_raises_nothing(sidecar, monkeypatch, caplog):
    from stbme.usecases import processing

    def broken(messages, *, chunk_tokens):
        raise RuntimeError("a bug in the prediction")

    monkeypatch.setattr(processing, "event_texts", broken)
    await sidecar.settings_service.update_chat("c", {"extract.enabled": False})
    await full_sync(sidecar, "c", roleplay(AHEAD_MIN_MESSAGES + 10))
    await sidecar.processor._embed_ahead("c")
    # Said in the log, not left in a task nobody reads ("Task exception was never retrieved" at exit).
    assert any("embedding ahead for chat 'c' failed" in r.getMessage() for r in caplog.records)
