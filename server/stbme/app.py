"""The aiohttp application: routes, middlewares (errors, CORS, auth, limits) and the live WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import weakref
from pathlib import Path
from typing import Any

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from . import __version__, config
from .embed import Embedder
from .errors import BadRequest, NotFound, PayloadTooLarge, StbmeError, Unauthorized
from .live import PollSessions
from .sidecar import Sidecar, check_chat_id
from .store.jobs import enqueue_job

log = logging.getLogger("stbme.http")
sidecar_key = web.AppKey("sidecar", Sidecar)
token_key = web.AppKey("token", str)
sockets_key = web.AppKey("sockets", weakref.WeakSet)
polls_key = web.AppKey("polls", PollSessions)
DEFAULT_PORT = 8765


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def json_response(data: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps({"ok": status < 400, **data}, option=orjson.OPT_SERIALIZE_NUMPY),
                        status=status, content_type="application/json")


def error_response(status: int, message: str, field: str | None = None) -> web.Response:
    return json_response({"error": message, "errors": [message], "status": status, "field": field}, status)


async def read_json(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"the request body is larger than {request.client_max_size} bytes "
                              "(server.max_body_bytes)") from None
    if not raw:
        raise BadRequest("the request body is empty; send JSON")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


# -- middlewares ------------------------------------------------------------------------------------
@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except StbmeError as exc:
        return error_response(exc.status, exc.message, exc.field)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        elif exc.status == 413:
            message = "the request body is too large (server.max_body_bytes)"
        return error_response(exc.status, message)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal error in the sidecar; see its log for the traceback")


def _cors_headers(request: web.Request) -> dict[str, str]:
    origin = request.headers.get("Origin")
    if not origin:
        return {}
    allowed = request.app[sidecar_key].settings["server.cors_origins"]
    if origin not in allowed and "*" not in allowed:
        return {}
    return {
        "Access-Control-Allow-Origin": origin,
        "Vary": "Origin",
        "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
        "Access-Control-Allow-Headers": "Content-Type, Authorization",
        "Access-Control-Allow-Private-Network": "true",
        "Access-Control-Max-Age": "600",
    }


@web.middleware
async def cors_middleware(request: web.Request, handler):
    headers = _cors_headers(request)
    if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
        if not headers:
            return error_response(403, f"origin {request.headers.get('Origin')!r} is not allowed; add it to "
                                       "server.cors_origins")
        return web.Response(status=204, headers=headers)
    response = await handler(request)
    if headers and not response.prepared:
        response.headers.update(headers)
    return response


@web.middleware
async def auth_middleware(request: web.Request, handler):
    token = request.app[token_key]
    if token and request.path != "/health" and request.method != "OPTIONS":
        scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
        sent = sent.strip() if scheme.lower() == "bearer" else ""
        if not sent and request.path == "/v1/ws":
            sent = request.query.get("token", "")
        if not hmac.compare_digest(sent.encode(), token.encode()):
            raise Unauthorized("missing or wrong API token: send 'Authorization: Bearer <token>' "
                               "(the token the sidecar was started with)")
    return await handler(request)


# -- handlers -------------------------------------------------------------------------------------
def _sc(request: web.Request) -> Sidecar:
    return request.app[sidecar_key]


def _chat(request: web.Request) -> str:
    return request.match_info["chat_id"]


def _int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be a whole number", field=name) from None
    if not lo <= value <= hi:
        raise BadRequest(f"query parameter {name!r} must be from {lo} to {hi}", field=name)
    return value


async def health(request):
    return json_response(await _sc(request).health())


async def get_settings(request):
    return json_response({"settings": _sc(request).settings.all()})


async def put_settings(request):
    body = await read_json(request)
    if not isinstance(body, dict) or "settings" not in body:
        raise BadRequest("send {\"settings\": {name: value}}", field="settings")
    return json_response({"settings": await _sc(request).update_settings(body["settings"])})


async def settings_schema(request):
    return json_response({"settings": [s.as_schema() for s in config.SETTINGS]})


async def get_chat_settings(request):
    sc, chat = _sc(request), _chat(request)
    return json_response({"settings": sc.settings.all(chat), "overrides": sc.settings.overrides(chat)})


async def put_chat_settings(request):
    body = await read_json(request)
    if not isinstance(body, dict) or "settings" not in body:
        raise BadRequest("send {\"settings\": {name: value}}", field="settings")
    sc, chat = _sc(request), _chat(request)
    settings = await sc.update_chat_settings(chat, body["settings"])
    return json_response({"settings": settings, "overrides": sc.settings.overrides(chat)})


async def list_chats(request):
    return json_response({"chats": await _sc(request).list_chats()})


async def delete_chat(request):
    return json_response(await _sc(request).delete_chat(_chat(request)))


async def chat_status(request):
    return json_response(await _sc(request).chat_status(_chat(request)))


async def sync(request):
    return json_response(await _sc(request).sync(_chat(request), await read_json(request)))


async def recall(request):
    return json_response(await _sc(request).recall(_chat(request), await read_json(request)))


async def list_nodes(request):
    archived = request.query.get("archived", "false")
    if archived not in ("true", "false", "all"):
        raise BadRequest("'archived' must be true, false or all", field="archived")
    return json_response(await _sc(request).list_nodes(
        _chat(request), offset=_int_query(request, "offset", 0, 0, 10**9),
        limit=_int_query(request, "limit", 50, 1, 500), type_=request.query.get("type") or None,
        q=request.query.get("q") or None, archived=None if archived == "all" else archived == "true"))


async def create_node(request):
    return json_response({"node": await _sc(request).create_node(_chat(request), await read_json(request))})


async def get_node(request):
    return json_response({"node": await _sc(request).get_node(_chat(request), request.match_info["node_id"])})


async def edit_node(request):
    return json_response({"node": await _sc(request).edit_node(
        _chat(request), request.match_info["node_id"], await read_json(request))})


async def node_action(request):
    return json_response({"node": await _sc(request).node_action(
        _chat(request), request.match_info["node_id"], request.match_info["action"])})


async def list_edges(request):
    return json_response({"edges": await _sc(request).list_edges(_chat(request), request.query.get("node"))})


async def export_chat(request):
    doc = await _sc(request).export_chat(_chat(request))
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


async def import_chat(request):
    mode = request.query.get("mode", "merge")
    return json_response(await _sc(request).import_chat(_chat(request), await read_json(request), mode))


async def reindex(request):
    """Queue a rebuild of the chat's index: the worker runs it and reports progress on the WebSocket."""
    sc, chat = _sc(request), check_chat_id(_chat(request))

    def queue(conn):
        if conn.execute("SELECT 1 FROM chats WHERE chat_id = ?", (chat,)).fetchone() is None:
            raise NotFound(f"no chat {chat!r} in the sidecar yet (sync it first)", field="chat_id")
        return enqueue_job(conn, chat, "reindex")

    job_id = await sc.store.write(queue)
    sc.wake_worker()
    return json_response({"job_id": job_id})


async def live_socket(request):
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    sc = _sc(request)
    request.app[sockets_key].add(ws)
    queue = sc.live.subscribe()

    async def pump():
        while True:
            await ws.send_str(orjson.dumps(await queue.get()).decode())

    await ws.send_str(orjson.dumps({"type": "hello", "version": __version__}).decode())  # always first
    sender = asyncio.create_task(pump())
    relay_peer = None
    try:
        async for msg in ws:  # only this task reads
            if msg.type != WSMsgType.TEXT:
                continue
            try:
                data = orjson.loads(msg.data)
            except orjson.JSONDecodeError:
                await ws.send_str(orjson.dumps({"type": "error", "message": "send JSON messages"}).decode())
                continue
            if isinstance(data, dict) and data.get("type") == "hello" and relay_peer is None and (
                    data.get("client") == "st-extension" or data.get("relay") is True):
                # The extension can run LLM requests on the user's ST connection (llm.mode = relay).
                relay_peer = sc.relay.attach(queue.put_nowait)
            else:
                reply = client_message(sc, data)
                if reply is not None:
                    await ws.send_str(orjson.dumps(reply).decode())
    finally:
        if relay_peer is not None:
            sc.relay.detach(relay_peer)
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
        sc.live.unsubscribe(queue)
        request.app[sockets_key].discard(ws)
    return ws


def client_message(sc: Sidecar, data: Any) -> dict | None:
    """A message from an extension on the live channel (WebSocket or long-poll); the reply, if any."""
    if not isinstance(data, dict):
        return {"type": "error", "message": "send JSON objects"}
    if data.get("type") == "ping":
        return {"type": "pong"}
    if data.get("type") == "relay_response":
        sc.relay.resolve(data)
    return None


def _poll_client(body: Any) -> str:
    client_id = body.get("client_id") if isinstance(body, dict) else None
    if not isinstance(client_id, str) or not 8 <= len(client_id) <= 128:
        raise BadRequest("'client_id' must be a string of 8-128 characters, the same for every poll",
                         field="client_id")
    return client_id


async def live_poll(request):
    """The live channel over long-poll: {client_id, wait_s, relay} -> {messages} (within wait_s)."""
    body = await read_json(request)
    sc, sessions = _sc(request), request.app[polls_key]
    client_id = _poll_client(body)
    wait_s = body.get("wait_s", 20)
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= 50:
        raise BadRequest("'wait_s' must be a number from 0 to 50 (seconds)", field="wait_s")
    session = sessions.get(client_id)
    if body.get("relay") is True and session.relay_peer is None:
        session.relay_peer = sc.relay.attach(session.queue.put_nowait)
    return json_response({"messages": await sessions.wait(session, float(wait_s))})


async def live_send(request):
    """A message from a long-poll client (relay_response, ping): {client_id, message} -> {reply}."""
    body = await read_json(request)
    sc, sessions = _sc(request), request.app[polls_key]
    sessions.get(_poll_client(body))
    return json_response({"reply": client_message(sc, body.get("message"))})


def setup_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/health", health)
    r.add_get("/v1/settings", get_settings)
    r.add_put("/v1/settings", put_settings)
    r.add_get("/v1/settings/schema", settings_schema)
    r.add_get("/v1/chats", list_chats)
    chat = "/v1/chats/{chat_id}"
    r.add_delete(chat, delete_chat)
    r.add_get(chat + "/status", chat_status)
    r.add_get(chat + "/settings", get_chat_settings)
    r.add_put(chat + "/settings", put_chat_settings)
    r.add_post(chat + "/sync", sync)
    r.add_post(chat + "/recall", recall)
    r.add_get(chat + "/nodes", list_nodes)
    r.add_post(chat + "/nodes", create_node)
    r.add_get(chat + "/nodes/{node_id}", get_node)
    r.add_patch(chat + "/nodes/{node_id}", edit_node)
    r.add_post(chat + "/nodes/{node_id}/{action}", node_action)
    r.add_get(chat + "/edges", list_edges)
    r.add_get(chat + "/export", export_chat)
    r.add_post(chat + "/import", import_chat)
    r.add_post(chat + "/reindex", reindex)
    r.add_get("/v1/ws", live_socket)
    r.add_post("/v1/live/poll", live_poll)
    r.add_post("/v1/live/send", live_send)
    from .dna.routes import setup_dna_routes  # here: the DNA routes import this module

    setup_dna_routes(app)


def create_app(data_dir: Path | str, *, host: str = "127.0.0.1", token: str | None = None,
               embedder: Embedder | None = None, cli_settings: dict[str, Any] | None = None,
               sidecar: Sidecar | None = None) -> web.Application:
    """The application. Binding anywhere but loopback requires a token."""
    if not is_loopback(host) and not token:
        raise StbmeError(f"binding to {host} exposes your chats to the network: set an API token with "
                         "--token or STBME_TOKEN (the extension then sends it)", status=500)
    sidecar = sidecar or Sidecar.open(data_dir, embedder=embedder, cli_settings=cli_settings)
    app = web.Application(
        middlewares=[cors_middleware, error_middleware, auth_middleware],
        client_max_size=sidecar.settings["server.max_body_bytes"],
    )
    app[sidecar_key] = sidecar
    app[token_key] = token or ""
    app[sockets_key] = weakref.WeakSet()
    polls = app[polls_key] = PollSessions(sidecar.live)
    polls.on_close.append(lambda s: s.relay_peer is not None and sidecar.relay.detach(s.relay_peer))
    setup_routes(app)

    async def lifecycle(app: web.Application):
        await sidecar.start()
        yield
        await sidecar.close()

    async def close_sockets(app: web.Application):
        # on_shutdown runs before the server waits for running handlers; a live socket would hold
        # the shutdown until its timeout if it were closed only in the cleanup.
        for ws in list(app[sockets_key]):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"sidecar shutting down")
        app[polls_key].close_all()  # waiting long-polls return at once

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(close_sockets)
    return app
