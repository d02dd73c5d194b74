"""A first ingest in heuristic mode: every message is keyword-searchable before the embedding is done,
the newest messages are embedded first, a recall embeds only the question, and
a recall does not wait for an HNSW index that is still loading."""

from __future__ import annotations

import asyncio

import pytest

from stbme.services import Services

from conftest import HashEmbedder, full_sync, recall, settle, wait_for


class GatedEmbedder(HashEmbedder):
    """The deterministic embedder, with a gate on passages and a log of what was embedded."""

    def __init__(self):
        super().__init__()
        self.gate = asyncio.Event()
        self.passages: list[list[str]] = []
        self.queries: list[str] = []

    async def embed_passages(self, texts):
        await self.gate.wait()
        self.passages.append(list(texts))
        return await super().embed_passages(texts)

    async def embed_query(self, text):
        self.queries.append(text)
        return await super().embed_query(text)

    warming = False

    @property
    def ready(self):
        return not self.warming


def roleplay(n: int) -> list[dict]:
    chat = []
    for i in range(n):
        if i % 2 == 0:
            chat.append({"role": "user", "name": "Alex", "text": f"I ask about the lantern, turn {i}."})
        else:
            chat.append({"role": "assistant", "name": "Elena",
                         "text": f"Elena trims the wick and talks about harbour number{i} at length."})
    return chat


@pytest.fixture
async def gated(tmp_path):
    emb = GatedEmbedder()
    sc = Services.open(tmp_path / "data", embedder=emb)
    await sc.start()
    yield sc, emb
    emb.gate.set()
    await sc.close()


async def test_keywords_work_before_any_embedding_then_newest_first(gated):
    sc, emb = gated
    chat = roleplay(400)
    await full_sync(sc, "c", chat)

    async def extracted():
        status = await sc.chats.status("c")
        return status["processed_upto"] == len(chat) - 1

    await wait_for(extracted, "every message to be extracted while the embedder is held")
    assert emb.passages == []
    # keyword recall of an old message works although nothing is embedded yet
    hit = await recall(sc, "c", {"query": "harbour number21", "budget_tokens": 300})
    assert "number21" in hit["text"]
    emb.gate.set()
    await settle(sc, "c")
    first = " ".join(emb.passages[0])
    assert "number399" in first or "number397" in first, "the newest messages are embedded first"
    assert "number1 " not in first


async def test_recall_embeds_only_the_question(gated):
    sc, emb = gated
    emb.gate.set()
    chat = roleplay(40)
    await full_sync(sc, "c", chat)
    await settle(sc, "c")
    emb.queries.clear()
    recent = [{"role": m["role"], "name": m["name"], "text": m["text"]} for m in chat[-4:]]
    result = await recall(sc, "c", {"query": "*She leans closer.* Tell me about harbour number7", "recent": recent})
    # the recent turns are in the prompt already: they lend names to a reference, they are not searched
    assert emb.queries == ["Tell me about harbour number7"]
    assert "number7" in result["text"] and result["query"]["text"] == "Tell me about harbour number7"


async def test_recall_answers_from_keywords_while_the_index_loads(gated):
    sc, emb = gated
    emb.gate.set()
    await full_sync(sc, "c", roleplay(40))
    await settle(sc, "c")
    sc.indexes.vectors._items.pop("c", None)  # as after a restart: not loaded yet
    lock = sc.indexes.vectors._loading.setdefault("c", asyncio.Lock())
    await lock.acquire()  # a load is under way (the warm-up's)
    result = await recall(sc, "c", {"query": "harbour number7", "budget_tokens": 300})
    assert "number7" in result["text"] and "loading" in result["degraded"]
    assert sc.indexes.vectors._load_tasks  # the load goes on; a later recall does not start another
    again = await recall(sc, "c", {"query": "harbour number7", "budget_tokens": 300})
    assert "loading" in again["degraded"] and len(sc.indexes.vectors._load_tasks) == 1
    lock.release()
    await wait_for(lambda: sc.indexes.vectors.loaded("c") is not None, "the index to finish loading")
    again = await recall(sc, "c", {"query": "harbour number7", "budget_tokens": 300})
    assert "degraded" not in again and any(m["score_parts"]["vector"] > 0 for m in again["memories"])


async def test_recall_answers_from_keywords_while_the_model_warms_up(gated):
    sc, emb = gated
    emb.gate.set()
    await full_sync(sc, "c", roleplay(40))
    await settle(sc, "c")
    emb.queries.clear()
    emb.warming = True  # as while LocalEmbedder.warm_up() maps the model after a start
    result = await recall(sc, "c", {"query": "harbour number7", "budget_tokens": 300})
    assert "number7" in result["text"] and "loading" in result["degraded"] and emb.queries == []
    emb.warming = False
    again = await recall(sc, "c", {"query": "harbour number7", "budget_tokens": 300})
    assert "degraded" not in again and emb.queries == ["harbour number7"]
