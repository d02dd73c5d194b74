"""OpenAIEmbedder against a fake OpenAI-compatible /v1/embeddings server over real HTTP, and the Services
using it end to end. Only the network peer is fake; vectors are bag-of-words so recall behaves."""

from __future__ import annotations

import asyncio

import numpy as np
import orjson
import pytest
from aiohttp import web
from conftest import HashEmbedder, create_node, full_sync, recall, settle, wait_for

from stbme.embed.base import EmbedError
from stbme.embed.openai import OpenAIEmbedder
from stbme.services import Services

DIM = 32


class FakeOpenAI:
    """A scripted /v1/embeddings: each call takes the next mode from `script`, else `default`."""

    def __init__(self):
        self.calls: list[dict] = []
        self.script: list = []
        self.default = "ok"
        self.dim = DIM
        self.reverse = False
        self.release = asyncio.Event()
        self.url = ""
        self.vectors = HashEmbedder(DIM)

    def vector(self, text: str, dim: int) -> list[float]:
        vec = self.vectors.vector(text) if dim == DIM else HashEmbedder(dim).vector(text)
        return (vec * 3.0).tolist()  # not unit length: the client normalises

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append({"auth": request.headers.get("Authorization"), "body": body, "path": request.path})
        mode = self.script.pop(0) if self.script else self.default
        texts = body["input"]
        if mode == "500":
            return web.Response(status=500, text="upstream exploded")
        if mode == "429":
            return web.Response(status=429, text="slow down")
        if mode == "401":
            return web.Response(status=401, text='{"error": {"message": "Incorrect API key provided"}}')
        if mode == "hang":
            await asyncio.wait_for(self.release.wait(), 30)
            return web.Response(status=500)
        if mode == "garbage":
            return web.Response(status=200, text="<html>Welcome to nginx</html>", content_type="text/html")
        if isinstance(mode, tuple) and mode[0] == "raw":
            return web.Response(status=200, body=mode[1], content_type="application/json")
        items = [{"object": "embedding", "index": i, "embedding": self.vector(t, self.dim)}
                 for i, t in enumerate(texts)]
        if mode == "short":
            items = items[:-1]
        if self.reverse:
            items.reverse()
        return web.json_response({"object": "list", "data": items, "model": body["model"],
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    @property
    def inputs(self) -> list[list[str]]:
        return [c["body"]["input"] for c in self.calls]


@pytest.fixture
async def fake(aiohttp_server):
    fake = FakeOpenAI()
    app = web.Application()
    app.router.add_post("/v1/embeddings", fake.handle)
    server = await aiohttp_server(app)
    fake.url = str(server.make_url("/v1"))
    yield fake
    fake.release.set()  # let hanging handlers finish so the server closes at once


@pytest.fixture
async def make_embedder(fake):
    made = []

    def make(**kw) -> OpenAIEmbedder:
        options = {"key": "sk-test", "batch_size": 32, "timeout_s": 5, "retries": 2, "backoff_s": 0.01} | kw
        emb = OpenAIEmbedder(options.pop("url", fake.url), options.pop("model", "text-embedding-3-small"),
                             **options)
        made.append(emb)
        return emb

    yield make
    for emb in made:
        await emb.close()


def expected(texts: list[str]) -> np.ndarray:
    return np.vstack([HashEmbedder(DIM).vector(t) for t in texts])


TEXTS = ["the silver key", "an old oak tree", "the lighthouse", "a red umbrella", "the dragon Vorthax"]


# -- the client -----------------------------------------------------------------------------------
async def test_batches_and_normalises(fake, make_embedder):
    emb = make_embedder(batch_size=2)
    vectors = await emb.embed_passages(TEXTS)
    assert fake.inputs == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    assert vectors.shape == (5, DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors, expected(TEXTS), atol=1e-5)
    assert emb.dim == DIM
    assert all(c["path"] == "/v1/embeddings" and c["body"]["model"] == "text-embedding-3-small" for c in fake.calls)
    query = await emb.embed_query("the dragon Vorthax")
    assert query.shape == (DIM,) and np.allclose(query, expected(["the dragon Vorthax"])[0], atol=1e-5)
    assert len(fake.calls) == 4


async def test_empty_input_makes_no_call(fake, make_embedder):
    vectors = await make_embedder().embed_passages([])
    assert vectors.shape[0] == 0 and fake.calls == []


async def test_rows_are_ordered_by_index(fake, make_embedder):
    fake.reverse = True
    vectors = await make_embedder().embed_passages(TEXTS)
    assert fake.inputs == [TEXTS]
    assert np.allclose(vectors, expected(TEXTS), atol=1e-5)


@pytest.mark.parametrize("status", ["500", "429"])
async def test_retries_then_succeeds(fake, make_embedder, status):
    fake.script = [status, status]
    vectors = await make_embedder(retries=2).embed_passages(TEXTS[:2])
    assert len(fake.calls) == 3 and fake.inputs[0] == fake.inputs[2] == TEXTS[:2]
    assert np.allclose(vectors, expected(TEXTS[:2]), atol=1e-5)


async def test_gives_up_after_the_retries(fake, make_embedder):
    fake.default = "500"
    with pytest.raises(EmbedError) as info:
        await make_embedder(retries=2).embed_passages(TEXTS)
    assert len(fake.calls) == 3
    message = info.value.message
    assert "3 attempts" in message and "HTTP 500" in message and "upstream exploded" in message
    assert fake.url in message
    assert info.value.status == 503


async def test_client_error_is_not_retried(fake, make_embedder):
    fake.default = "401"
    with pytest.raises(EmbedError) as info:
        await make_embedder(retries=3).embed_passages(TEXTS)
    assert len(fake.calls) == 1
    assert "HTTP 401" in info.value.message and "Incorrect API key" in info.value.message
    assert "check embed.openai_key" in info.value.message  # the advice names the setting at fault


async def test_hang_is_a_timeout_error(fake, make_embedder):
    fake.default = "hang"
    with pytest.raises(EmbedError) as info:
        await make_embedder(timeout_s=0.2, retries=1).embed_passages(TEXTS)
    # Both attempts timed out: the message counts them. (How many reached the fake within 0.2 s depends on
    # the machine's load, so the fake's count is not asserted.)
    assert "failed after 2 attempts: no answer within 0.2 s (embed.timeout_s)" in info.value.message


async def test_unreachable_server(make_embedder, unused_tcp_port_factory):
    emb = make_embedder(url=f"http://127.0.0.1:{unused_tcp_port_factory()}/v1", retries=1)
    with pytest.raises(EmbedError) as info:
        await emb.embed_passages(TEXTS)
    assert "2 attempts" in info.value.message and "Connect" in info.value.message


async def test_garbage_body_is_a_clear_error(fake, make_embedder):
    fake.default = "garbage"
    with pytest.raises(EmbedError) as info:
        await make_embedder().embed_passages(TEXTS)
    assert "not JSON" in info.value.message and "nginx" in info.value.message


@pytest.mark.parametrize("body, words", [
    (b'{"error": {"message": "model not found"}}', ["unexpected", "model not found"]),
    (b'[1, 2, 3]', ["unexpected"]),
    (b'{"data": "vectors"}', ["unexpected"]),
    (b'{"data": [[0.1, 0.2]]}', ["unexpected"]),
    (b'{"data": [{"vector": [0.1, 0.2]}]}', ["unexpected", "embedding"]),
    (b'{"data": [{"embedding": "0.1,0.2"}]}', ["unexpected"]),
    (b'{"data": [{"embedding": 0.5}]}', ["unexpected"]),
    (b'{"data": [{"embedding": []}]}', ["unexpected"]),
    (b'{"data": [{"embedding": [0.1, null]}]}', ["unexpected"]),
    (b'{"data": [{"embedding": [0.1, NaN]}]}', ["not JSON"]),
])
async def test_wrong_shape_is_a_clear_error(fake, make_embedder, body, words):
    fake.default = ("raw", body)
    with pytest.raises(EmbedError) as info:
        await make_embedder().embed_passages(["one text"])
    for word in words:
        assert word in info.value.message


async def test_ragged_vectors_are_an_error(fake, make_embedder):
    fake.default = ("raw", b'{"data": [{"index": 0, "embedding": [0.1, 0.2]}, {"index": 1, "embedding": [0.3]}]}')
    with pytest.raises(EmbedError, match="unexpected"):
        await make_embedder().embed_passages(["a", "b"])


async def test_wrong_count_is_an_error(fake, make_embedder):
    fake.default = "short"
    with pytest.raises(EmbedError) as info:
        await make_embedder().embed_passages(TEXTS[:3])
    assert "2 vectors for 3 texts" in info.value.message


async def test_dimension_change_is_an_error(fake, make_embedder):
    emb = make_embedder()
    await emb.embed_passages(TEXTS[:2])
    assert emb.dim == DIM
    fake.dim = 8
    with pytest.raises(EmbedError) as info:
        await emb.embed_query("another text")
    assert f"from {DIM} to 8" in info.value.message
    assert emb.dim == DIM


async def test_api_key_is_sent_as_bearer(fake, make_embedder):
    await make_embedder(key="sk-secret-123").embed_query("hello")
    await make_embedder(key="").embed_query("hello")
    assert fake.calls[0]["auth"] == "Bearer sk-secret-123"
    assert fake.calls[1]["auth"] is None


async def test_url_forms(fake, make_embedder):
    await make_embedder(url=fake.url + "/").embed_query("a")
    await make_embedder(url=fake.url + "/embeddings").embed_query("b")
    assert [c["path"] for c in fake.calls] == ["/v1/embeddings", "/v1/embeddings"]
    with pytest.raises(EmbedError) as info:
        OpenAIEmbedder("", "model")
    assert info.value.field == "embed.openai_url"
    a, b = make_embedder(model="m1"), make_embedder(model="m2")
    assert a.id != b.id and "m1" in a.id  # the id names the vector space


# -- the sidecar using it -------------------------------------------------------------------------
MESSAGES = [
    {"role": "user", "name": "Alex", "text": "Where did you hide the silver key?"},
    {"role": "assistant", "name": "Elena", "text": "I buried the silver key under the old oak tree."},
    {"role": "user", "name": "Alex", "text": "Shall we go fishing at the harbour?"},
    {"role": "assistant", "name": "Elena", "text": "Bring the red umbrella, it will rain."},
    {"role": "user", "name": "Alex", "text": "What sleeps in the north?"},
    {"role": "assistant", "name": "Elena", "text": "The dragon Vorthax sleeps in the northern mountains."},
    {"role": "user", "name": "Alex", "text": "hmm"},
    {"role": "assistant", "name": "Elena", "text": "Nothing else to report."},
]
MORE = [
    {"role": "user", "name": "Alex", "text": "We leave at dawn with the merchant caravan."},
    {"role": "assistant", "name": "Elena", "text": "I will pack bread and a brass lantern for the caravan."},
    {"role": "user", "name": "Alex", "text": "ok"},
    {"role": "assistant", "name": "Elena", "text": "Good night."},
    {"role": "user", "name": "Alex", "text": "night"},
    {"role": "assistant", "name": "Elena", "text": "Sleep well."},
]


def openai_settings(fake, **extra) -> dict:
    return {"embed.provider": "openai", "embed.openai_url": fake.url, "embed.openai_model": "fake-embed",
            "embed.openai_key": "sk-fake", "embed.batch_size": 4, "embed.retries": 0} | extra


async def test_sidecar_opened_with_openai_provider(tmp_path, fake):
    sc = Services.open(tmp_path / "data", cli_settings=openai_settings(fake))
    await sc.start()
    try:
        await full_sync(sc, "c1", MESSAGES)
        await settle(sc, "c1")
        result = await recall(sc, "c1", {"query": "where is the silver key buried?"})
        assert "oak tree" in result["text"]
        assert any("silver key" in t for batch in fake.inputs for t in batch)
    finally:
        await sc.close()


async def test_sidecar_opened_with_openai_down_loses_nothing(tmp_path, fake):
    fake.default = "500"  # down from the start: the dimension is not even known yet
    sc = Services.open(tmp_path / "data", cli_settings=openai_settings(fake))
    await sc.start()
    try:
        result = await full_sync(sc, "c1", MESSAGES)
        assert result["status"] == "synced" and result["stored_length"] == len(MESSAGES)

        async def stored():
            return (await sc.chats.status("c1"))["processed_upto"] == len(MESSAGES) - 1

        await wait_for(stored, "the memories of the chat")
        status = await sc.chats.status("c1")
        assert status["nodes"] >= len(MESSAGES) and status["unembedded"] > 0
        found = await sc.memories.list("c1", contains="silver key")
        assert found["total"] == 2
        assert "oak tree" in (await recall(sc, "c1", {"query": "where is the silver key buried?"}))["text"]
        # back up: the next write embeds everything pending, and recall uses the vectors
        fake.default = "ok"
        node = await create_node(sc, "c1", {"text": "The lighthouse keeper is called Brannoc"})
        assert (await sc.chats.status("c1"))["unembedded"] == 0
        result = await recall(sc, "c1", {"query": "who keeps the lighthouse?"})
        assert node["id"] in {m["id"] for m in result["memories"]}
        assert (await sc.health.report())["embedder"]["dim"] == DIM
    finally:
        await sc.close()


async def test_reindex_before_the_dimension_is_known(tmp_path, fake):
    fake.default = "500"
    sc = Services.open(tmp_path / "data", cli_settings=openai_settings(fake))
    await sc.start()
    try:
        await full_sync(sc, "c1", MESSAGES)

        async def stored():
            return (await sc.chats.status("c1"))["processed_upto"] == len(MESSAGES) - 1

        await wait_for(stored, "the memories of the chat")
        fake.default = "ok"
        result = await sc.embedding.reindex("c1")
        assert result["indexed"] == (await sc.chats.status("c1"))["nodes"]
    finally:
        await sc.close()


async def test_restart_after_switching_to_openai(tmp_path, fake):
    sc = Services.open(tmp_path / "data", embedder=HashEmbedder())
    await sc.start()
    try:
        await full_sync(sc, "c1", MESSAGES)
        await settle(sc, "c1")
        await sc.settings_service.update_global(openai_settings(fake))

        async def switched():
            return (await sc.health.report())["embedder"]["id"].startswith("openai:")

        await wait_for(switched, "the switch")
    finally:
        await sc.close()
    sc = Services.open(tmp_path / "data")  # the saved settings now say openai
    await sc.start()
    try:
        assert sc.embeddings.id.startswith("openai:")
        status = await settle(sc, "c1")
        assert status["unembedded"] == 0
        assert "oak tree" in (await recall(sc, "c1", {"query": "where is the silver key buried?"}))["text"]
    finally:
        await sc.close()


@pytest.fixture
async def openai_sidecar(tmp_path, fake):
    """A started sidecar switched at runtime from another embedder to the fake OpenAI-compatible API."""
    sc = Services.open(tmp_path / "data", embedder=HashEmbedder())
    await sc.start()
    await sc.settings_service.update_global(openai_settings(fake))

    async def switched():
        health = await sc.health.report()
        return health["embedder"]["id"].startswith("openai:") and health["embedder"]["reembedding"] is None

    await wait_for(switched, "the switch to the openai embedder")
    assert (await sc.health.report())["embedder"]["dim"] == DIM
    yield sc
    await sc.close()


async def test_sidecar_end_to_end_with_openai(openai_sidecar, fake):
    sc = openai_sidecar
    assert sc.embeddings.id == f"openai:{fake.url}/embeddings#fake-embed"
    await full_sync(sc, "c1", MESSAGES)
    status = await settle(sc, "c1")
    assert status["unembedded"] == 0 and status["nodes"] >= len(MESSAGES)
    sent = [t for batch in fake.inputs for t in batch]
    assert any("silver key under the old oak tree" in t for t in sent)
    assert all(len(batch) <= 4 for batch in fake.inputs)  # embed.batch_size
    assert all(c["auth"] == "Bearer sk-fake" for c in fake.calls)
    calls = len(fake.calls)
    result = await recall(sc, "c1", {"query": "where is the silver key buried?"})
    assert "oak tree" in result["text"]
    assert result["memories"][0]["score_parts"]["vector"] > 0.3
    assert len(fake.calls) == calls + 1 and fake.inputs[-1] == ["where is the silver key buried?"]


async def test_sidecar_with_openai_down_loses_nothing(openai_sidecar, fake):
    sc = openai_sidecar
    await full_sync(sc, "c1", MESSAGES)
    await settle(sc, "c1")
    fake.default = "500"

    result = await full_sync(sc, "c1", MESSAGES + MORE)  # the sync itself never waits for embeddings
    assert result["status"] == "synced" and result["stored_length"] == len(MESSAGES + MORE)

    async def stored():
        found = await sc.memories.list("c1", contains="caravan")
        return found["total"] == 2 and found

    found = await wait_for(stored, "the memories of the new messages")
    assert {n["seq_range"][0] for n in found["nodes"]} == {8, 9}
    status = await sc.chats.status("c1")
    assert status["unembedded"] > 0 and status["messages"] == len(MESSAGES + MORE)
    # a manual memory is kept too
    node = await create_node(sc, "c1", {"text": "The caravan master is called Brannoc"})
    assert (await sc.memories.get("c1", node["id"]))["fields"]["summary"] == "The caravan master is called Brannoc"
    assert (await sc.chats.status("c1"))["unembedded"] >= 3

    # back up: the pending memories get embedded and found by meaning
    fake.default = "ok"
    await sc.embedding.reindex("c1")
    status = await sc.chats.status("c1")
    assert status["unembedded"] == 0
    result = await recall(sc, "c1", {"query": "who is the caravan master?"})
    assert node["id"] in {m["id"] for m in result["memories"]}


async def test_retried_job_embeds_after_an_outage(openai_sidecar, fake):
    sc = openai_sidecar
    await full_sync(sc, "c1", MESSAGES)
    await settle(sc, "c1")
    fake.default = "500"
    await full_sync(sc, "c1", MESSAGES + MORE)

    async def failed():
        return (await sc.chats.status("c1"))["jobs"]["last_error"]

    assert "HTTP 500" in await wait_for(failed, "the job to fail")
    fake.default = "ok"

    async def retried():  # the worker retries after its backoff (2 s) and marks the job done
        status = await sc.chats.status("c1")
        return status["jobs"]["pending"] == 0 and status["jobs"]["last_error"] is None and status

    status = await wait_for(retried, "the retried job")
    assert status["unembedded"] == 0


async def test_recall_falls_back_to_keywords_when_the_api_is_down(openai_sidecar, fake):
    sc = openai_sidecar
    await full_sync(sc, "c1", MESSAGES)
    await settle(sc, "c1")
    fake.default = "500"
    result = await recall(sc, "c1", {"query": "where is the silver key buried?"})
    assert "oak tree" in result["text"]


async def test_switch_to_a_dead_api_keeps_the_old_embedder(tmp_path, fake):
    sc = Services.open(tmp_path / "data", embedder=HashEmbedder())
    await sc.start()
    try:
        await full_sync(sc, "c1", MESSAGES)
        await settle(sc, "c1")
        fake.default = "500"
        await sc.settings_service.update_global(openai_settings(fake))

        async def failed():
            return (await sc.health.report())["embedder"]["last_error"]

        error = await wait_for(failed, "the failed switch")
        assert "HTTP 500" in error
        assert (await sc.health.report())["embedder"]["id"] == "test:hash-128"
        assert "oak tree" in (await recall(sc, "c1", {"query": "where is the silver key buried?"}))["text"]
    finally:
        await sc.close()


async def test_secret_key_is_not_in_the_settings_view(openai_sidecar):
    assert openai_sidecar.settings.all()["embed.openai_key"] == "***"
    assert orjson.dumps(await openai_sidecar.health.report()).find(b"sk-fake") == -1
