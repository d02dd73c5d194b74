"""HTTP routes of the DNA layer (documented in docs/api.md, "DNA Memory"): thin handlers over the DNA
use cases (dynamics, repair loops, signals), the GEP assets and the hub client."""

from __future__ import annotations

from aiohttp import web

from ..dna.plan_files import parse_body as parse_plan_body
from ..errors import BadRequest
from .bodies import parse_signals, parse_text
from .keys import services
from .requests import chat_id as _chat
from .requests import choice_query, float_query, int_query, json_response, optional_chat_id, read_json


def _dna(request: web.Request):
    return services(request).dna


def _assets(request: web.Request):
    return services(request).dna_assets


def _since(request: web.Request) -> float | None:
    return float_query(request, "since", "a unix time in seconds")


async def list_genes(request):
    return json_response({"genes": await _assets(request).list_genes()})


async def create_gene(request):
    return json_response({"gene": await _assets(request).create_gene(await read_json(request))}, 201)


async def get_gene(request):
    return json_response({"gene": await _assets(request).get_gene(request.match_info["gene_id"])})


async def edit_gene(request):
    return json_response({"gene": await _assets(request).edit_gene(request.match_info["gene_id"],
                                                                await read_json(request))})


async def delete_gene(request):
    return json_response(await _assets(request).delete_gene(request.match_info["gene_id"]))


async def select_gene(request):
    return json_response(await _assets(request).select_gene(parse_signals(await read_json(request))))


async def list_capsules(request):
    return json_response({"capsules": await _assets(request).list_capsules()})


async def create_capsule(request):
    return json_response({"capsule": await _assets(request).create_capsule(await read_json(request))}, 201)


async def get_capsule(request):
    return json_response({"capsule": await _assets(request).get_capsule(request.match_info["capsule_id"])})


async def edit_capsule(request):
    return json_response({"capsule": await _assets(request).edit_capsule(request.match_info["capsule_id"],
                                                                      await read_json(request))})


async def delete_capsule(request):
    return json_response(await _assets(request).delete_capsule(request.match_info["capsule_id"]))


def _event_filters(request) -> dict:
    return {"chat_id": optional_chat_id(request), "kind": request.query.get("kind") or None,
            "since": _since(request)}


async def list_events(request):
    return json_response({"events": await _assets(request).events(
        **_event_filters(request), limit=int_query(request, "limit", 100, 1, 10000))})


async def export_events(request):
    plan = choice_query(request, "format", "stbme", ("stbme", "plan")) == "plan"
    # Whole, not streamed: the CORS middleware adds its headers to an unsent response. Large logs go to
    # a file with `stbme dna export-assets` (written a page at a time).
    body = b"".join([page async for page in _assets(request).event_lines(plan=plan, **_event_filters(request))])
    return web.Response(body=body, content_type="application/x-ndjson", headers={
        "Content-Disposition": f'attachment; filename="{"events" if plan else "stbme-events"}.jsonl"'})


async def plan_assets(request):
    return json_response(await _assets(request).plan_assets())


async def import_plan_assets(request):
    body = await read_json(request)
    replace = body.get("replace", False) if isinstance(body, dict) else False
    if not isinstance(replace, bool):
        raise BadRequest("'replace' must be true or false", field="replace")
    return json_response({"imported": await _assets(request).import_plan(parse_plan_body(body), replace=replace)})


def _status(request) -> str | None:
    status = choice_query(request, "status", "open", ("open", "resolved", "all"))
    return None if status == "all" else status


async def list_loops(request):
    return json_response({"repair_loops": await _dna(request).list_loops(optional_chat_id(request), _status(request))})


async def chat_loops(request):
    return json_response({"repair_loops": await _dna(request).list_loops(_chat(request), _status(request))})


async def resolve_loop(request):
    return json_response({"repair_loop": await _dna(request).resolve_loop(_chat(request),
                                                                         request.match_info["loop_id"])})


async def dna_stats(request):
    return json_response({"stats": await _dna(request).global_stats(), "hub": services(request).hub.status()})


async def chat_stats(request):
    return json_response({"stats": await _dna(request).chat_stats(_chat(request))})


async def decay(request):
    return json_response({"decay": await _dna(request).decay(_chat(request))})


async def reflect(request):
    return json_response({"reflect": await _dna(request).reflect(_chat(request))})


async def signals(request):
    text = parse_text(await read_json(request), max_chars=services(request).settings["server.max_message_chars"])
    return json_response(_dna(request).preview_signals(text, optional_chat_id(request)))


async def hub_status(request):
    return json_response({"hub": services(request).hub.status()})


async def hub_heartbeat(request):
    return json_response({"hub": await services(request).hub.heartbeat_once()})


async def hub_publish(request):
    kind, asset_id = request.match_info["kind"], request.match_info["asset_id"]
    hub = services(request).hub
    if kind == "genes":
        return json_response(await hub.publish_gene(asset_id))
    if kind == "capsules":
        return json_response(await hub.publish_capsule(asset_id))
    raise BadRequest("publish genes or capsules", field="kind")


async def hub_fetch(request):
    kind, asset_id = request.match_info["kind"], request.match_info["asset_id"]
    hub = services(request).hub
    if kind == "genes":
        return json_response({"gene": await hub.fetch_gene(asset_id)})
    if kind == "capsules":
        return json_response({"capsule": await hub.fetch_capsule(asset_id)})
    raise BadRequest("fetch genes or capsules", field="kind")


def setup_dna_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/v1/dna/stats", dna_stats)
    r.add_post("/v1/dna/signals", signals)
    r.add_get("/v1/dna/genes", list_genes)
    r.add_post("/v1/dna/genes", create_gene)
    r.add_post("/v1/dna/genes/select", select_gene)
    r.add_get("/v1/dna/genes/{gene_id}", get_gene)
    r.add_patch("/v1/dna/genes/{gene_id}", edit_gene)
    r.add_delete("/v1/dna/genes/{gene_id}", delete_gene)
    r.add_get("/v1/dna/capsules", list_capsules)
    r.add_post("/v1/dna/capsules", create_capsule)
    r.add_get("/v1/dna/capsules/{capsule_id}", get_capsule)
    r.add_patch("/v1/dna/capsules/{capsule_id}", edit_capsule)
    r.add_delete("/v1/dna/capsules/{capsule_id}", delete_capsule)
    r.add_get("/v1/dna/events", list_events)
    r.add_get("/v1/dna/events.jsonl", export_events)
    r.add_get("/v1/dna/assets", plan_assets)
    r.add_post("/v1/dna/assets", import_plan_assets)
    r.add_get("/v1/dna/repair-loops", list_loops)
    r.add_get("/v1/dna/hub", hub_status)
    r.add_post("/v1/dna/hub/heartbeat", hub_heartbeat)
    r.add_post("/v1/dna/hub/publish/{kind}/{asset_id}", hub_publish)
    r.add_post("/v1/dna/hub/fetch/{kind}/{asset_id}", hub_fetch)
    chat = "/v1/chats/{chat_id}/dna"
    r.add_get(chat, chat_stats)
    r.add_post(chat + "/decay", decay)
    r.add_post(chat + "/reflect", reflect)
    r.add_get(chat + "/repair-loops", chat_loops)
    r.add_post(chat + "/repair-loops/{loop_id}/resolve", resolve_loop)
