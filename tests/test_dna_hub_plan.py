"""Hub interop with the plan (seed 001, `MemoryNetwork`, lines 325-395), both directions:

- this sidecar's hub client against a hub written only from the plan's client code (what a hub must do for
  that client to work: `POST /heartbeat` -> 200 `{tasks}`, `POST /genes {node_id, gene}` -> 200,
  `GET /genes/{id}?node_id=` -> 200 with the gene as the body);
- the plan's client (its three calls, with aiohttp) against `stbme hub`, run as a real process.
"""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from conftest import HashEmbedder, serve_process
from stbme.api.app import create_app
from stbme.api.keys import services_key

PLAN_GENE = {   # as the plan's GEPAssets.create_gene writes one (lines 235-245)
    "id": "gene_1713370000", "name": "修复 API 超时", "description": "API 超时的修复模板",
    "triggers": [{"type": "error", "pattern": "超时"}, {"type": "correction", "pattern": "不是.*?是"}],
    "actions": ["检查超时设置", {"type": "pin"}, {"step": 2, "do": "增加重试"}, "remember"],
    "created": 1713370000.25, "usage_count": 0,
}


# -- a hub as the plan's client needs it ------------------------------------------------------------
def plan_hub_app(seen: dict) -> web.Application:
    """Only what the plan's client code implies: three routes, JSON in, the bare gene out, no auth."""
    genes = {PLAN_GENE["id"]: PLAN_GENE}

    async def heartbeat(request):
        seen.setdefault("heartbeats", []).append(await request.json())
        return web.json_response({"tasks": []})

    async def share(request):
        body = await request.json()
        seen.setdefault("shared", []).append(body)
        genes[body["gene"]["id"]] = body["gene"]
        return web.Response(text="stored")       # the client only looks at the status

    async def fetch(request):
        seen.setdefault("fetch_node_ids", []).append(request.query.get("node_id"))
        gene = genes.get(request.match_info["gene_id"])
        return web.json_response(gene) if gene else web.Response(status=404)

    app = web.Application()
    app.router.add_post("/heartbeat", heartbeat)
    app.router.add_post("/genes", share)
    app.router.add_get("/genes/{gene_id}", fetch)
    return app


async def sidecar(aiohttp_client, path, hub_url, node_id):
    return await aiohttp_client(create_app(path, embedder=HashEmbedder(), cli_settings={
        "network.enabled": True, "network.hub_url": hub_url, "network.node_id": node_id}))


async def test_our_client_against_the_plans_hub(aiohttp_server, aiohttp_client, tmp_path):
    seen: dict = {}
    hub = await aiohttp_server(plan_hub_app(seen))
    url = str(hub.make_url("")).rstrip("/")
    a = await sidecar(aiohttp_client, tmp_path / "a", url, "node-a")
    # heartbeat: {node_id, stats, capabilities} -> {tasks}
    resp = await a.post("/v1/dna/hub/heartbeat")
    assert resp.status == 200 and (await resp.json())["hub"]["tasks"] == []
    beat = seen["heartbeats"][-1]   # the background loop beats too
    assert beat["node_id"] == "node-a" and isinstance(beat["stats"], dict)
    assert {"remember", "recall", "reflect"} <= set(beat["capabilities"])
    # fetch: node_id as a query parameter, the answer is the bare gene; the plan's actions are carried
    resp = await a.post(f"/v1/dna/hub/fetch/genes/{PLAN_GENE['id']}")
    gene = (await resp.json())["gene"]
    assert resp.status == 200, gene
    assert seen["fetch_node_ids"] == ["node-a"]
    assert (gene["id"], gene["origin"], gene["created"]) == (PLAN_GENE["id"], "hub", PLAN_GENE["created"])
    assert gene["triggers"] == PLAN_GENE["triggers"]
    assert gene["actions"] == [{"op": "template", "original": "检查超时设置"},
                               {"op": "pin", "original": {"type": "pin"}},
                               {"op": "template", "original": {"step": 2, "do": "增加重试"}},
                               {"op": "create_directive", "original": "remember"}]
    [event] = await a.server.app[services_key].dna_assets.events(kind="hub_fetch")
    assert event["data"]["id"] == PLAN_GENE["id"]
    # share: {node_id, gene}, a 200 with a body that is not JSON is a success
    created = (await (await a.post("/v1/dna/genes", json={
        "name": "Names matter", "triggers": [{"type": "error", "pattern": "name"}],
        "actions": [{"op": "create_directive", "importance": 9}, {"op": "pin"}]})).json())["gene"]
    resp = await a.post(f"/v1/dna/hub/publish/genes/{created['id']}")
    assert resp.status == 200, await resp.text()
    shared = seen["shared"][-1]
    assert shared["node_id"] == "node-a"
    assert {k: shared["gene"][k] for k in ("id", "name", "triggers", "actions", "created")} == {
        "id": created["id"], "name": "Names matter", "triggers": [{"type": "error", "pattern": "name"}],
        "actions": [{"op": "create_directive", "importance": 9.0}, {"op": "pin"}], "created": created["created"]}
    # another sidecar fetches it back from the plan's hub unchanged
    b = await sidecar(aiohttp_client, tmp_path / "b", url, "node-b")
    got = (await (await b.post(f"/v1/dna/hub/fetch/genes/{created['id']}")).json())["gene"]
    assert (got["triggers"], got["actions"]) == (created["triggers"], created["actions"])
    # unknown id: the plan's hub 404s
    missing = await a.post("/v1/dna/hub/fetch/genes/gene_0")
    assert missing.status == 404 and (await missing.json())["field"] == "id"


async def test_a_hub_answering_null_or_another_gene_is_refused(aiohttp_server, aiohttp_client, tmp_path):
    async def fetch(request):
        gene_id = request.match_info["gene_id"]
        return web.json_response(None if gene_id == "gene_null" else {**PLAN_GENE, "id": "gene_other"})

    app = web.Application()
    app.router.add_get("/genes/{gene_id}", fetch)
    hub = await aiohttp_server(app)
    a = await sidecar(aiohttp_client, tmp_path / "a", str(hub.make_url("")).rstrip("/"), "node-a")
    resp = await a.post("/v1/dna/hub/fetch/genes/gene_null")
    assert resp.status == 404
    resp = await a.post("/v1/dna/hub/fetch/genes/gene_asked")
    assert resp.status == 503 and "gene_other" in (await resp.json())["error"]
    assert (await a.get("/v1/dna/genes/gene_other")).status == 404


async def test_a_hub_that_wraps_the_gene_still_works(aiohttp_server, aiohttp_client, tmp_path):
    """`stbme hub` before it spoke the plan answered `{"ok", "gene", "published_by", "published_at"}`."""
    async def fetch(request):
        return web.json_response({"ok": True, "gene": {**PLAN_GENE, "id": request.match_info["gene_id"]},
                                  "published_by": "old-node", "published_at": 1.0})

    app = web.Application()
    app.router.add_get("/genes/{gene_id}", fetch)
    hub = await aiohttp_server(app)
    a = await sidecar(aiohttp_client, tmp_path / "a", str(hub.make_url("")).rstrip("/"), "node-a")
    resp = await a.post("/v1/dna/hub/fetch/genes/gene_wrapped")
    assert resp.status == 200 and (await resp.json())["gene"]["triggers"] == PLAN_GENE["triggers"]
    [event] = await a.server.app[services_key].dna_assets.events(kind="hub_fetch")
    assert event["data"]["published_by"] == "old-node"


# -- the plan's client against `stbme hub` ----------------------------------------------------------
class PlanNetwork:
    """The plan's MemoryNetwork (lines 325-395) with aiohttp in place of requests."""

    def __init__(self, session: aiohttp.ClientSession, hub_url: str, node_id: str):
        self.session, self.hub_url, self.node_id = session, hub_url, node_id
        self.tasks: list | None = None

    async def heartbeat(self) -> None:
        async with self.session.post(f"{self.hub_url}/heartbeat", json={
                "node_id": self.node_id, "stats": {"memories": 12, "genes": 3},
                "capabilities": ["remember", "recall", "reflect"]}, timeout=aiohttp.ClientTimeout(5)) as response:
            if response.status == 200:
                data = await response.json()
                self.tasks = data.get("tasks", [])

    async def share_gene(self, gene: dict) -> bool:
        async with self.session.post(f"{self.hub_url}/genes", json={"node_id": self.node_id, "gene": gene},
                                     timeout=aiohttp.ClientTimeout(10)) as response:
            return response.status == 200

    async def fetch_gene(self, gene_id: str) -> dict | None:
        async with self.session.get(f"{self.hub_url}/genes/{gene_id}", params={"node_id": self.node_id},
                                    timeout=aiohttp.ClientTimeout(10)) as response:
            if response.status == 200:
                return await response.json()
        return None


@pytest.fixture(scope="module")
def stbme_hub(tmp_path_factory):
    """`stbme hub` as a real process on loopback (the plan's client sends no token)."""
    with serve_process(tmp_path_factory.mktemp("hub"), command="hub") as url:
        yield url


async def test_the_plans_client_against_stbme_hub(stbme_hub, aiohttp_client, tmp_path):
    async with aiohttp.ClientSession() as session:
        plan = PlanNetwork(session, stbme_hub, "plan-node")
        await plan.heartbeat()
        assert plan.tasks == []
        assert await plan.share_gene(PLAN_GENE) is True
        fetched = await plan.fetch_gene(PLAN_GENE["id"])
        assert fetched == PLAN_GENE                       # the body is the gene, as the plan's client expects
        assert await plan.fetch_gene("gene_1") is None
        assert await plan.share_gene({"name": "no triggers"}) is False   # a 400 the plan's client sees as False
        # this sidecar fetches the plan's gene from the same hub and knows who published it
        ours = await sidecar(aiohttp_client, tmp_path / "ours", stbme_hub, "node-ours")
        resp = await ours.post(f"/v1/dna/hub/fetch/genes/{PLAN_GENE['id']}")
        assert resp.status == 200, await resp.text()
        [event] = await ours.server.app[services_key].dna_assets.events(kind="hub_fetch")
        assert event["data"]["published_by"] == "plan-node"
        # and the plan's client fetches what this sidecar publishes, in the plan's shape
        gene = (await (await ours.post("/v1/dna/genes", json={
            "name": "Keep names", "triggers": [{"type": "correction", "pattern": "name"}],
            "actions": [{"op": "update_target"}, "检查名字"]})).json())["gene"]
        assert (await ours.post(f"/v1/dna/hub/publish/genes/{gene['id']}")).status == 200
        theirs = await plan.fetch_gene(gene["id"])
        assert theirs["triggers"] == [{"type": "correction", "pattern": "name"}]
        assert theirs["actions"] == [{"op": "update_target"}, "检查名字"]
        assert theirs["usage_count"] == 0 and theirs["created"] == pytest.approx(gene["created"])
        await plan.heartbeat()
        async with session.get(f"{stbme_hub}/nodes") as resp:
            nodes = {n["node_id"]: n for n in (await resp.json())["nodes"]}
        assert nodes["plan-node"]["heartbeats"] == 2 and nodes["plan-node"]["stats"] == {"memories": 12, "genes": 3}
