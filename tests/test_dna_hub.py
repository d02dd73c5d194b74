"""The DNA hub on loopback with two sidecars: heartbeats, publishing and fetching genes and capsules."""

from __future__ import annotations

import pytest

from conftest import HashEmbedder, free_port, full_sync, settle
from stbme.api.app import create_app
from stbme.api.keys import services_key
from stbme.api.hub import create_hub_app

TOKEN = "hub-secret"


@pytest.fixture
async def hub(aiohttp_server, tmp_path):
    return await aiohttp_server(create_hub_app(tmp_path / "hub", token=TOKEN))


async def sidecar_client(aiohttp_client, path, hub_url, node_id, token=TOKEN):
    app = create_app(path, embedder=HashEmbedder(), cli_settings={
        "network.enabled": True, "network.hub_url": hub_url, "network.node_id": node_id, "network.token": token})
    return await aiohttp_client(app)


async def test_two_sidecars_share_genes_and_capsules(hub, aiohttp_client, tmp_path):
    url = str(hub.make_url("")).rstrip("/")
    a = await sidecar_client(aiohttp_client, tmp_path / "a", url, "node-a")
    b = await sidecar_client(aiohttp_client, tmp_path / "b", url, "node-b")
    # a has a chat with content; its heartbeat carries numbers only
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: we decided the secret vault code is 4417.)"},
            {"role": "assistant", "name": "Elena", "text": "The code is safe with me."}]
    await full_sync(a, "private", chat)
    await settle(a.server.app[services_key], "private")
    for client in (a, b):
        resp = await client.post("/v1/dna/hub/heartbeat")
        assert resp.status == 200, await resp.text()
    nodes = (await (await hub_client_get(aiohttp_client, hub, "/nodes")).json())["nodes"]
    assert [n["node_id"] for n in nodes] == ["node-a", "node-b"]
    stats_a = next(n for n in nodes if n["node_id"] == "node-a")
    assert stats_a["stats"]["chats"] == 1 and stats_a["stats"]["directives"] == 1
    assert "recall" in stats_a["capabilities"]
    raw = await hub_raw_dump(hub)
    assert "4417" not in raw and "vault" not in raw and "private" not in raw  # chat content never leaves
    # a publishes its own gene and a capsule; b fetches them by id
    gene = (await (await a.post("/v1/dna/genes", json={
        "name": "Names matter", "triggers": [{"type": "error", "pattern": "name"}],
        "actions": [{"op": "create_directive", "importance": 9}, {"op": "pin"}]})).json())["gene"]
    capsule = (await (await a.post("/v1/dna/capsules", json={
        "name": "Careful", "gene_ids": [gene["id"], "gene_correction_fix"], "strategy": "conservative"})).json())["capsule"]
    assert (await a.post(f"/v1/dna/hub/publish/genes/{gene['id']}")).status == 200
    assert (await a.post(f"/v1/dna/hub/publish/capsules/{capsule['id']}")).status == 200
    resp = await b.post(f"/v1/dna/hub/fetch/genes/{gene['id']}")
    fetched = (await resp.json())["gene"]
    assert resp.status == 200 and fetched["origin"] == "hub"
    assert (fetched["name"], fetched["triggers"], fetched["actions"]) == (gene["name"], gene["triggers"], gene["actions"])
    resp = await b.post(f"/v1/dna/hub/fetch/capsules/{capsule['id']}")
    got = (await resp.json())
    assert resp.status == 200, got
    got = got["capsule"]
    assert resp.status == 200 and got["gene_ids"] == capsule["gene_ids"] and got["strategy"] == "conservative"
    assert (await b.get(f"/v1/dna/genes/{gene['id']}")).status == 200
    # fetching again updates in place; an unknown id is a clear 404
    assert (await b.post(f"/v1/dna/hub/fetch/genes/{gene['id']}")).status == 200
    missing = await b.post("/v1/dna/hub/fetch/genes/gene_nope")
    assert missing.status == 404 and "hub" in (await missing.json())["error"]
    events = await b.server.app[services_key].dna_assets.events(kind="hub_fetch")
    assert len(events) == 3


async def hub_client_get(aiohttp_client, hub, path):
    import aiohttp
    async with aiohttp.ClientSession() as session:
        async with session.get(hub.make_url(path), headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
            await resp.read()
            return resp


async def hub_raw_dump(hub) -> str:
    from stbme.api.hub import hub_store_key
    rows = await hub.app[hub_store_key].read(lambda conn: (conn.execute("SELECT * FROM hub_nodes").fetchall(),
                                                           conn.execute("SELECT * FROM hub_assets").fetchall()))
    return str([tuple(r) for r in rows[0]] + [tuple(r) for r in rows[1]])


async def test_hub_requires_its_token(hub, aiohttp_client, tmp_path):
    url = str(hub.make_url("")).rstrip("/")
    c = await sidecar_client(aiohttp_client, tmp_path / "c", url, "node-c", token="wrong")
    resp = await c.post("/v1/dna/hub/heartbeat")
    data = await resp.json()
    assert resp.status == 503 and "401" in data["error"]


async def test_a_dead_hub_never_affects_the_chat(aiohttp_client, tmp_path):
    c = await sidecar_client(aiohttp_client, tmp_path / "c", f"http://127.0.0.1:{free_port()}", "node-c")
    resp = await c.post("/v1/dna/hub/heartbeat")
    data = await resp.json()
    assert resp.status == 503 and "unreachable" in data["error"]
    chat = [{"role": "user", "name": "Alex", "text": "I want slower pacing, don't rush the romance."},
            {"role": "assistant", "name": "Elena", "text": "Alright."}]
    await full_sync(c, "c", chat)
    sc = c.server.app[services_key]
    await settle(sc, "c")
    result = await (await c.post("/v1/chats/c/recall", json={"query": "pacing"})).json()
    assert "slower pacing" in result["text"]
    status = (await (await c.get("/v1/dna/hub")).json())["hub"]
    assert status["enabled"] and status["last_error"]


async def test_hub_off_by_default(client):
    resp = await client.post("/v1/dna/hub/heartbeat")
    data = await resp.json()
    assert resp.status == 409 and data["field"] == "network.enabled"


async def test_hub_rejects_bad_assets(hub):
    import aiohttp
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession() as s:
        async with s.post(hub.make_url("/genes"), json={"node_id": "n", "gene": {"name": "x", "triggers": [],
                                                                                  "actions": []}}, headers=headers) as r:
            assert r.status == 400 and (await r.json())["field"] == "triggers"
        async with s.post(hub.make_url("/heartbeat"), json={"stats": {}}, headers=headers) as r:
            assert r.status == 400 and (await r.json())["field"] == "node_id"
        async with s.post(hub.make_url("/heartbeat"), json={"node_id": "n", "stats": {"chats": 2, "leak": "text"}},
                          headers=headers) as r:
            assert r.status == 200
        async with s.get(hub.make_url("/nodes"), headers=headers) as r:
            assert (await r.json())["nodes"][0]["stats"] == {"chats": 2}  # only numbers are kept
