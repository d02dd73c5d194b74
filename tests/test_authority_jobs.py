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
