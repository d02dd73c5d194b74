"""Changing the embedder re-embeds in the background; recall keeps working on the old index until the
new one is ready."""

from __future__ import annotations

import asyncio

from aiohttp import web

from conftest import HashEmbedder, full_sync, recall, settle, wait_for


async def test_switch_embedder_in_background(sidecar, aiohttp_server):
    new_model = HashEmbedder(dim=64, id_suffix="-remote")
    gate = asyncio.Event()
    calls = []

    async def embeddings(request):
        body = await request.json()
        calls.append(len(body["input"]))
        if len(calls) > 1:  # let the probe through, hold the bulk work
            await gate.wait()
        return web.json_response({"data": [{"index": i, "embedding": new_model.vector(t).tolist()}
                                           for i, t in enumerate(body["input"])]})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    server = await aiohttp_server(app)

    chat = []
    for i in range(10):
        chat += [{"role": "user", "name": "Alex", "text": f"Tell me about lantern {i}"},
                 {"role": "assistant", "name": "Elena", "text": f"Lantern {i} burns with a blue flame"}]
    chat[4] = {"role": "user", "name": "Alex", "text": "The vault code is 4417."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    old_id = sidecar.embeddings.id

    await sidecar.settings_service.update_global({"embed.provider": "openai", "embed.openai_url": str(server.make_url("/v1")),
                                   "embed.openai_model": "fake"})
    async def reembedding():
        health = await sidecar.health.report()
        return health if health["embedder"]["reembedding"] and calls[1:] else None

    health = await wait_for(reembedding, "the re-embedding to start")
    assert health["embedder"]["id"] == old_id and health["embedder"]["reembedding"]["total"] > 0
    during = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 200})
    assert "4417" in during["text"]  # the old embedder and index still answer

    gate.set()
    async def switched():
        health = await sidecar.health.report()
        return health if health["embedder"]["id"] != old_id else None

    health = await wait_for(switched, "the switch to the new embedder")
    assert health["embedder"]["id"].startswith("openai:") and health["embedder"]["dim"] == 64
    after = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 200})
    assert "4417" in after["text"]
    status = await sidecar.chats.status("c")
    assert status["unembedded"] == 0
    index = await sidecar.indexes.vectors.get("c")
    assert index.dim == 64 and len(index) == status["nodes"]


async def test_unusable_new_embedder_keeps_the_old_one(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": "hello"}, {"role": "assistant", "name": "E", "text": "hi"}]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    old_id = sidecar.embeddings.id
    await sidecar.settings_service.update_global({"embed.provider": "openai", "embed.openai_url": "http://127.0.0.1:9/v1",
                                   "embed.retries": 0, "embed.timeout_s": 1})
    async def failed():
        health = await sidecar.health.report()
        return health if health["embedder"]["last_error"] else None

    health = await wait_for(failed, "the failed switch to be reported")
    assert health["embedder"]["id"] == old_id and "failed" in health["embedder"]["last_error"]
    assert (await recall(sidecar, "c", {"query": "hello"}))["memories"] is not None
