"""The persisted job queue: sync answers at once, pending and interrupted jobs resume after a restart,
failures are parked with their error."""

from __future__ import annotations

from conftest import HashEmbedder, recall, settle, sync, sync_body, wait_for
from stbme.services import Services

CHAT = [{"role": "user", "name": "Alex", "text": "The vault code is 4417."},
        {"role": "assistant", "name": "Elena", "text": "Noted."}] * 3


async def test_interrupted_job_resumes_after_restart(tmp_path):
    sc = Services.open(tmp_path, embedder=HashEmbedder())  # not started: no worker, like a crash before it ran
    result = await sync(sc, "c", sync_body(CHAT, start=0))
    assert result["queued"] and result["processed_upto"] == -1
    await sc.store.write(lambda conn: conn.execute("UPDATE jobs SET state = 'running'"))  # died mid-job
    await sc.close()

    sc = Services.open(tmp_path, embedder=HashEmbedder())
    await sc.start()
    try:
        status = await settle(sc, "c")
        assert status["processed_upto"] == len(CHAT) - 1 and status["nodes"] > 0
        found = await recall(sc, "c", {"query": "vault code", "budget_tokens": 200})
        assert "4417" in found["text"]
    finally:
        await sc.close()


class BrokenEmbedder(HashEmbedder):
    async def embed_passages(self, texts):
        from stbme.embed import EmbedError

        raise EmbedError("embeddings API unreachable")


async def test_embedding_failure_parks_the_job_and_keeps_memories(tmp_path):
    sc = Services.open(tmp_path, embedder=BrokenEmbedder())
    sc.worker.max_attempts = 1
    await sc.start()
    try:
        await sync(sc, "c", sync_body(CHAT, start=0))

        async def parked():
            status = await sc.chats.status("c")
            return status if status["jobs"]["failed"] else None

        status = await wait_for(parked, "the job to be parked")
        assert status["jobs"]["failed"] == 1 and "unreachable" in status["jobs"]["last_error"]
        assert status["nodes"] > 0 and status["unembedded"] == status["nodes"]  # written, not lost
        found = await recall(sc, "c", {"query": "vault code 4417", "budget_tokens": 200})
        assert "4417" in found["text"]  # keywords still find it
    finally:
        await sc.close()


class SwitchableEmbedder(HashEmbedder):
    """Fails while `broken`; counts the texts it embeds."""
    broken = True

    async def embed_passages(self, texts):
        from stbme.embed import EmbedError

        if self.broken:
            raise EmbedError("embeddings API unreachable")
        return await super().embed_passages(texts)


async def test_housekeeping_embeds_what_a_failed_embedder_left_and_only_that(tmp_path):
    embedder = SwitchableEmbedder()
    sc = Services.open(tmp_path, embedder=embedder)
    sc.worker.max_attempts = 1
    await sc.start()
    try:
        await sync(sc, "c", sync_body(CHAT, start=0))

        async def parked():
            status = await sc.chats.status("c")
            return status if status["jobs"]["failed"] else None

        left = (await wait_for(parked, "the job to be parked"))["unembedded"]
        embedder.broken = False
        other = [{"role": "user", "name": "Alex", "text": "The lighthouse key is under the blue stone."},
                 {"role": "assistant", "name": "Elena", "text": "I will fetch it."}]
        await sync(sc, "d", sync_body(other, start=0))
        assert (await settle(sc, "d"))["unembedded"] == 0
        asked, embed_pending = [], sc.embedding.embed_pending

        async def recording(chat_id, **kwargs):
            asked.append(chat_id)
            return await embed_pending(chat_id, **kwargs)

        sc.embedding.embed_pending = recording
        await sc.embedding.backfill()
        assert asked == ["c"] and left > 0
        assert (await sc.chats.status("c"))["unembedded"] == 0
    finally:
        await sc.close()
