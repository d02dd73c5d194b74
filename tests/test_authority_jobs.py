"""Authority jobs on the sidecar's job queue: create, get, list (key-cursor pages), idempotency, cancel,
requeue, timeouts, and the trivium.reindex job really rebuilding the indexes."""

from __future__ import annotations

from authority_fixtures import NS, AuthorityClient, authority, http, item, upsert, vec  # noqa: F401
from conftest import wait_for


async def finished(client, job_id: str, status: str = "completed") -> dict:
    async def done():
        job = (await client.call(f"/jobs/{job_id}", method="GET"))["job"]
        return job if job["status"] == status else None

    return await wait_for(done, f"job {job_id} to be {status}")


async def test_delay_job_runs_on_the_queue(authority, http):
    before = await authority.call("/jobs/list", {"page": {"limit": 5}})
    assert before["jobs"] == [] and before["page"] == {"hasMore": False, "nextCursor": ""}
    created = (await authority.call("/jobs/create", {"type": "delay", "payload": {
        "durationMs": 10, "message": "smoke", "chatId": "chat-1"}, "idempotencyKey": "k1"}))["job"]
    assert created["type"] == "delay" and created["status"] in ("queued", "running", "completed")
    assert created["idempotencyKey"] == "k1" and isinstance(created["id"], str)
    job = await finished(authority, created["id"])
    assert job["progress"] == 1.0 and job["result"]["message"] == "smoke" and job["error"] is None
    # the same idempotency key gives the same job back, not a second one
    again = (await authority.call("/jobs/create", {"type": "delay", "payload": {}, "idempotencyKey": "k1"}))["job"]
    assert again["id"] == created["id"]
    listed = await authority.call("/jobs/list", {"page": {"limit": 5}, "filter": {"chatId": "chat-1"}})
    assert [j["id"] for j in listed["jobs"]] == [created["id"]]
    assert (await authority.call("/jobs/list", {"filter": {"chatId": "other"}}))["jobs"] == []


async def test_list_pages_by_key(authority):
    ids = [(await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 0}}))["job"]["id"]
           for _ in range(7)]
    seen, cursor = [], ""
    while True:
        page = await authority.call("/jobs/list", {"page": {**({"cursor": cursor} if cursor else {}), "limit": 3}})
        seen += [j["id"] for j in page["jobs"]]
        if not page["hasMore"]:
            break
        cursor = page["nextCursor"]
    assert seen == list(reversed(ids))  # newest first, each once


async def test_cancel_a_running_job_and_requeue_it(authority):
    job = (await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 60000}}))["job"]
    await finished(authority, job["id"], "running")
    conflict = await authority.call(f"/jobs/{job['id']}/requeue", {}, expect=409)
    assert conflict["field"] == "id"
    cancelled = (await authority.call(f"/jobs/{job['id']}/cancel", {}))["job"]
    assert cancelled["status"] == "cancelled"
    # the handler stops at once and its end does not overwrite the cancellation
    follower = (await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 0}}))["job"]
    await finished(authority, follower["id"])
    assert (await authority.call(f"/jobs/{job['id']}", method="GET"))["job"]["status"] == "cancelled"
    requeued = (await authority.call(f"/jobs/{job['id']}/requeue", {}))["job"]
    assert requeued["status"] in ("queued", "running") and requeued["id"] == job["id"]
    await authority.call(f"/jobs/{job['id']}/cancel", {})


async def test_timeouts_and_refusals(authority, http):
    job = (await authority.call("/jobs/create", {"type": "delay", "timeoutMs": 50,
                                                 "payload": {"durationMs": 5000}}))["job"]
    failed = await finished(authority, job["id"], "failed")
    assert "timed out" in failed["error"]
    data = await authority.call("/jobs/create", {"type": "authority.vector.rebuild", "payload": {}}, expect=400)
    assert data["field"] == "type" and "delay" in data["error"]
    data = await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 10 ** 9}})
    bad = await finished(authority, data["job"]["id"], "failed")
    assert "durationMs" in bad["error"]
    await authority.call("/jobs/999999", method="GET", expect=404)
    await authority.call("/jobs/not-a-number/cancel", {}, expect=404)
    other = AuthorityClient(http, "another-extension")
    await other.call(f"/jobs/{job['id']}", method="GET", expect=404)  # jobs are private to their extension


async def test_each_extension_may_queue_only_so_many_jobs(authority, http):
    from stbme.authority.jobs import MAX_OPEN_JOBS

    jobs = [(await authority.call("/jobs/create", {"type": "delay", "idempotencyKey": f"k{i}",
                                                   "payload": {"durationMs": 60000}}))["job"]
            for i in range(MAX_OPEN_JOBS)]
    refused = await authority.call("/jobs/create", {"type": "delay", "payload": {}}, expect=429)
    assert f"{MAX_OPEN_JOBS} jobs" in refused["error"]
    # the same idempotency key still answers with its job; another extension has its own allowance
    again = await authority.call("/jobs/create", {"type": "delay", "idempotencyKey": "k0", "payload": {}})
    assert again["job"]["id"] == jobs[0]["id"]
    await AuthorityClient(http, "another-extension").call("/jobs/create", {"type": "delay", "payload": {}})
    await authority.call(f"/jobs/{jobs[-1]['id']}/cancel", {})
    await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 0}})
    for job in jobs[:-1]:
        await authority.call(f"/jobs/{job['id']}/cancel", {})


async def test_no_job_runs_past_the_ceiling(authority, monkeypatch):
    import stbme.authority.jobs as jobs

    monkeypatch.setattr(jobs, "MAX_RUN_MS", 100)
    job = (await authority.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 30000}}))["job"]
    assert "timed out after 100 ms" in (await finished(authority, job["id"], "failed"))["error"]


async def test_the_authority_lane_takes_turns_between_extensions(http):
    """4 jobs run at once; when a slot frees, an extension that has not run yet goes before one that just
    did, whatever the job ids (before: the oldest job, so one extension's queue held up every other)."""
    a, e = AuthorityClient(http, "ext-a"), AuthorityClient(http, "ext-e")
    async def create(client, ms):
        return (await client.call("/jobs/create", {"type": "delay", "payload": {"durationMs": ms}}))["job"]["id"]
    a1, a2 = await create(a, 3000), await create(a, 200)
    long = [await create(AuthorityClient(http, f"ext-{n}"), 8000) for n in "bcd"]  # keep three slots busy
    e1 = await create(e, 200)
    await finished(a, a2)
    e_done, a2_started = [(await c.call(f"/jobs/{i}", method="GET"))["job"] for c, i in ((e, e1), (a, a2))]
    assert e_done["status"] == "completed", "ext-e's job waited behind ext-a's second job"
    assert e_done["updatedAt"] <= a2_started["updatedAt"]
    for n, job_id in zip("bcd", long):
        await AuthorityClient(http, f"ext-{n}").call(f"/jobs/{job_id}/cancel", {})
    await a.call(f"/jobs/{a1}/cancel", {})


async def test_queued_and_running_jobs_survive_a_restart(aiohttp_client, tmp_path, embedder):
    from stbme.api import create_app

    first = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder))
    client = AuthorityClient(first)
    ids = [(await client.call("/jobs/create", {"type": "delay", "payload": {"durationMs": 60000 if i else 300}}))
           ["job"]["id"] for i in range(3)]
    await finished(client, ids[1], "running")
    await first.close()
    second = AuthorityClient(await aiohttp_client(create_app(tmp_path / "data", embedder=embedder)))
    jobs = {j["id"]: j["status"] for j in (await second.call("/jobs/list", {}))["jobs"]}
    assert set(jobs) == set(ids) and jobs[ids[2]] in ("queued", "running")
    await finished(second, ids[1], "running")  # interrupted, resumed
    for job_id in ids:
        await second.call(f"/jobs/{job_id}/cancel", {})


async def test_reindex_job_rebuilds_the_trivium_indexes(authority, tmp_path):
    await upsert(authority, [item(i) for i in range(25)])
    await authority.call("/trivium/search", {"vector": vec(1), "topK": 1})
    flushed = (await authority.call("/jobs/create", {"type": "trivium.flush", "payload": {}}))["job"]
    assert (await finished(authority, flushed["id"]))["result"]["saved"] == 1
    index_dir = next((tmp_path / "data" / "authority").rglob("indexes"))
    before = {p.name for p in index_dir.iterdir()}
    assert any(name.endswith(".bin") for name in before)
    for path in index_dir.iterdir():  # damage every cache file: the job must not need them
        path.write_bytes(b"garbage")
    job = (await authority.call("/jobs/create", {"type": "trivium.reindex", "payload": {
        "database": "st_bme_vectors"}}))["job"]
    result = (await finished(authority, job["id"]))["result"]
    assert result == {"dims": [16], "indexed": 25, "texts": 25}
    assert not any(p.read_bytes() == b"garbage" for p in index_dir.iterdir())
    hits = await authority.call("/trivium/search-hybrid", {"vector": vec(17), "topK": 1, "queryText": "17"})
    assert hits["results"][0]["externalId"] == "node-017" and hits["results"][0]["namespace"] == NS


async def test_chat_processing_never_waits_behind_authority_jobs(tmp_path):
    """Issue 20, against a running `stbme serve`: 30 Authority sessions (30 extensions) fill the job queue
    with minute-long delay jobs, then a new chat arrives. Its memories must be made while those jobs still
    wait (they have their own lane; before, the one worker ran every job oldest first, so the chat waited
    for all of them), and each extension may queue only so many jobs."""
    import aiohttp

    from conftest import DEADLINE_S, serve_process, sync_body

    from stbme.authority.jobs import MAX_OPEN_JOBS

    chat = [{"role": "user" if i % 2 == 0 else "assistant", "name": "Alex" if i % 2 == 0 else "Elena",
             "text": f"Turn {i}: the lighthouse keeper hides the silver key number {i} under the oak."}
            for i in range(10)]
    with serve_process(tmp_path / "data") as base:
        async with aiohttp.ClientSession(base) as http:
            queued, refused = 0, 0
            for n in range(30):
                client = AuthorityClient(http, f"third-party/flood-{n}")
                while True:
                    token = client.token or await client.init()
                    resp = await http.post("/v1/authority/jobs/create", headers={"x-authority-session-token": token},
                                           json={"type": "delay", "payload": {"durationMs": 60000}})
                    if resp.status == 429:
                        refused += 1
                        assert (await resp.json())["field"] == "type"
                        break
                    assert resp.status == 200, await resp.text()
                    queued += 1
                    assert queued <= 30 * MAX_OPEN_JOBS, "no per-extension cap"
            assert queued == 30 * MAX_OPEN_JOBS and refused == 30
            resp = await http.post("/v1/chats/new-chat/sync", json=sync_body(chat, start=0))
            assert resp.status == 200, await resp.text()

            async def processed():
                status = await (await http.get("/v1/chats/new-chat/status")).json()
                return status["processed_upto"] == 9 and status["jobs"]["pending"] == 0 \
                    and status["unembedded"] == 0
            await wait_for(processed, "the new chat to be processed", timeout=DEADLINE_S * 2)
            still = AuthorityClient(http, "third-party/flood-29")
            jobs = (await still.call("/jobs/list", {"page": {"limit": 100}}))["jobs"]
            assert any(j["status"] == "queued" for j in jobs), "the Authority jobs drained before the chat ran"
