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
    """Fails while `broken`."""
    broken = True

    async def embed_passages(self, texts):
        from stbme.embed import EmbedError

        if self.broken:
            raise EmbedError("embeddings API unreachable")
        return await super().embed_passages(texts)


async def parked(sc: Services, chat_id: str) -> dict:
    """The chat's status once its job failed and was parked."""
    async def failed():
        status = await sc.chats.status(chat_id)
        return status if status["jobs"]["failed"] else None

    return await wait_for(failed, f"the job of chat {chat_id!r} to be parked")


async def test_embedding_failure_parks_the_job_and_keeps_memories(tmp_path):
    sc = Services.open(tmp_path, embedder=BrokenEmbedder())
    sc.worker.max_attempts = 1
    await sc.start()
    try:
        await sync(sc, "c", sync_body(CHAT, start=0))
        status = await parked(sc, "c")
        assert status["jobs"]["failed"] == 1 and "unreachable" in status["jobs"]["last_error"]
        assert status["nodes"] > 0 and status["unembedded"] == status["nodes"]  # written, not lost
        found = await recall(sc, "c", {"query": "vault code 4417", "budget_tokens": 200})
        assert "4417" in found["text"]  # keywords still find it
    finally:
        await sc.close()


async def test_housekeeping_embeds_what_a_failed_embedder_left_and_only_that(tmp_path, monkeypatch):
    from stbme.usecases import housekeeping

    monkeypatch.setattr(housekeeping, "TICK_S", 3600.0)   # its own timer stays out of the way: the test runs its step
    embedder = BrokenEmbedder()
    sc = Services.open(tmp_path, embedder=embedder)
    sc.worker.max_attempts = 1
    await sc.start()
    try:
        await sync(sc, "c", sync_body(CHAT, start=0))
        left = (await parked(sc, "c"))["unembedded"]
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
