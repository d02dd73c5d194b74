"""The main routes (docs/api.md): health, settings, chats, sync, processing, recall, memories, edges,
import/export, reindex. Handlers parse the request, call one use case, and answer JSON."""

from __future__ import annotations

import orjson
from aiohttp import web

from .. import __version__, config
from ..errors import BadRequest, NotFound
from ..graph.schema import Strength
from ..server_identity import proof
from .bodies import parse_memory_edit, parse_new_memory, parse_recall, parse_settings, parse_sync_request
from .keys import services as _svc
from .keys import identity_key, token_key
from .middleware import is_authorised
from .requests import chat_id, choice_query, int_query, json_response, read_json, read_object


def _max_chars(request: web.Request) -> int:
    return _svc(request).settings["server.max_message_chars"]


async def health(request):
    """Open without the token (the extension's connection check); the store's path on disk and the stored
    settings set aside only for an authorised request."""
    svc, report = _svc(request), await _svc(request).health.report()
    authorised = is_authorised(request, request.app[token_key])
    if not authorised:
        report["store"]["path"] = None
    report["settings_degraded"] = [d.to_json() for d in svc.settings.degraded] if authorised else []
    return json_response(report)


async def identity(request):
    """The answer to a command's challenge (`?nonce=`): who this server is, proven with the lock file's
    secret (server_identity.py). 404 for a server without a lock (tests, an app built in-process)."""
    secret = request.app[identity_key]
    nonce = request.query.get("nonce", "")
    if not secret:
        raise NotFound("this server has no lock file to prove itself with", field="nonce")
    if not 16 <= len(nonce) <= 128:
        raise BadRequest("'nonce' must be 16-128 characters", field="nonce")
    port = (request.transport.get_extra_info("sockname") or (None, 0))[1] if request.transport else 0
    return json_response({"proof": proof(secret, nonce, port), "version": __version__})


async def get_settings(request):
    svc = _svc(request)
    return json_response({"settings": svc.settings.all(), "degraded": [d.to_json() for d in svc.settings.degraded]})


async def put_settings(request):
    updates = parse_settings(await read_json(request))
    return json_response({"settings": await _svc(request).settings_service.update_global(updates)})


async def settings_schema(request):
    return json_response({"settings": [s.as_schema() for s in config.SETTINGS]})


async def get_chat_settings(request):
    svc, chat = _svc(request), chat_id(request)
    return json_response({"settings": svc.settings.all(chat), "overrides": svc.settings.overrides(chat)})


async def put_chat_settings(request):
    svc, chat = _svc(request), chat_id(request)
    updates = parse_settings(await read_json(request))
    settings = await svc.settings_service.update_chat(chat, updates)
    return json_response({"settings": settings, "overrides": svc.settings.overrides(chat)})


async def list_chats(request):
    return json_response({"chats": await _svc(request).chats.list()})


async def delete_chat(request):
    return json_response(await _svc(request).chats.delete(chat_id(request)))


async def chat_status(request):
    return json_response(await _svc(request).chats.status(chat_id(request)))


async def sync(request):
    svc, chat = _svc(request), chat_id(request)
    req = parse_sync_request(await read_json(request), max_messages=svc.settings["server.max_sync_messages"],
                             max_chars=_max_chars(request))
    return json_response(await svc.sync.sync(chat, req))


async def recall(request):
    chat = chat_id(request)
    req = parse_recall(await read_json(request), max_chars=_max_chars(request),
                       max_query_tokens=_svc(request).settings["recall.max_query_tokens"])
    return json_response(await _svc(request).recall.recall(chat, req))


async def list_nodes(request):
    archived = choice_query(request, "archived", "false", ("true", "false", "all"))
    return json_response(await _svc(request).memories.list(
        chat_id(request), offset=int_query(request, "offset", 0, 0, 10**9),
        limit=int_query(request, "limit", 50, 1, 500), type_=request.query.get("type") or None,
        contains=request.query.get("q") or None, archived=None if archived == "all" else archived == "true"))


async def remembered_messages(request):
    """Which messages have memories (the in-chat marker): ?from=&to= (message indexes, both included)."""
    first = int_query(request, "from", 0, 0, 10**9)
    last = int_query(request, "to", first + 199, 0, 10**9)
    return json_response(await _svc(request).memories.remembered(chat_id(request), first, last))


async def message_memories(request):
    raw = request.match_info["index"]
    if not raw.isdigit() or len(raw) > 9:
        raise BadRequest("the message index must be a whole number from 0", field="index")
    return json_response(await _svc(request).memories.of_message(chat_id(request), int(raw)))


async def memory_types(request):
    return json_response({"types": _svc(request).memories.types()})


async def create_node(request):
    chat = chat_id(request)
    memory = parse_new_memory(await read_json(request), max_chars=_max_chars(request))
    return json_response({"node": await _svc(request).memories.create(chat, memory)})


async def get_node(request):
    return json_response({"node": await _svc(request).memories.get(chat_id(request), request.match_info["node_id"])})


async def edit_node(request):
    chat = chat_id(request)
    edit = parse_memory_edit(await read_json(request), max_chars=_max_chars(request))
    return json_response({"node": await _svc(request).memories.edit(chat, request.match_info["node_id"], edit)})


async def node_action(request):
    return json_response({"node": await _svc(request).memories.act(
        chat_id(request), request.match_info["node_id"], request.match_info["action"])})


async def create_edge(request):
    """A manual link between two memories: {from_id, to_id, relation?, strength?}."""
    chat = chat_id(request)
    body = await read_object(request, "{from_id, to_id, relation, strength}")
    for key in ("from_id", "to_id"):
        if not isinstance(body.get(key), str) or not body[key]:
            raise BadRequest(f"'{key}' must be a memory id", field=key)
    relation = body.get("relation", "related")
    strength = body.get("strength", Strength.LINK)
    if not isinstance(relation, str):
        raise BadRequest("'relation' must be a string", field="relation")
    if isinstance(strength, bool) or not isinstance(strength, (int, float)):
        raise BadRequest("'strength' must be a number from 0 to 1", field="strength")
    return json_response({"edge": await _svc(request).memories.link(chat, body["from_id"], body["to_id"], relation,
                                                                    float(strength))})


async def process_now(request):
    """Process every stored message of the chat now (the panel's "Remember this chat's history now");
    progress follows on the live channel and in the chat status."""
    return json_response(await _svc(request).chats.process_now(chat_id(request)))


async def list_edges(request):
    return json_response({"edges": await _svc(request).memories.edges(chat_id(request), request.query.get("node"))})


async def export_chat(request):
    doc = await _svc(request).transfer.export_chat(chat_id(request), request.query.get("format", "stbme"))
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


async def import_chat(request):
    chat = chat_id(request)
    mode = request.query.get("mode", "merge")
    return json_response(await _svc(request).transfer.import_chat(chat, await read_json(request), mode))


async def reindex(request):
    """Queue a rebuild of the chat's index: the worker runs it and reports progress on the live channel."""
    return json_response({"job_id": await _svc(request).chats.queue_reindex(chat_id(request))})


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/health", health)
    r.add_get("/v1/identity", identity)
    r.add_get("/v1/settings", get_settings)
    r.add_put("/v1/settings", put_settings)
    r.add_get("/v1/settings/schema", settings_schema)
    r.add_get("/v1/memory-types", memory_types)
    r.add_get("/v1/chats", list_chats)
    chat = "/v1/chats/{chat_id}"
    r.add_delete(chat, delete_chat)
    r.add_get(chat + "/status", chat_status)
    r.add_get(chat + "/settings", get_chat_settings)
    r.add_put(chat + "/settings", put_chat_settings)
    r.add_post(chat + "/sync", sync)
    r.add_post(chat + "/recall", recall)
    r.add_get(chat + "/messages/memories", remembered_messages)
    r.add_get(chat + "/messages/{index}/memories", message_memories)
    r.add_get(chat + "/nodes", list_nodes)
    r.add_post(chat + "/nodes", create_node)
    r.add_get(chat + "/nodes/{node_id}", get_node)
    r.add_patch(chat + "/nodes/{node_id}", edit_node)
    r.add_post(chat + "/nodes/{node_id}/{action}", node_action)
    r.add_get(chat + "/edges", list_edges)
    r.add_post(chat + "/edges", create_edge)
    r.add_post(chat + "/process", process_now)
    r.add_get(chat + "/export", export_chat)
    r.add_post(chat + "/import", import_chat)
    r.add_post(chat + "/reindex", reindex)
