"""The live channel to the extension: progress, notices and the LLM relay, over a WebSocket or, through
SillyTavern's proxy plugin (which cannot carry one), HTTP long-poll. The app's middlewares check Host and
Origin on both before these handlers run (a page of another site gets no socket, no session); a relay
answer counts only from the session its request was sent to (llm/relay.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from .. import __version__
from ..errors import BadRequest
from ..llm.relay import RelayChannel
from .keys import polls, services, sockets_key
from .requests import json_response, read_json

LONG_POLL_MAX_S = 50


async def live_socket(request):
    ws = web.WebSocketResponse(heartbeat=30)
    await ws.prepare(request)
    svc = services(request)
    request.app[sockets_key].add(ws)
    queue = svc.live.subscribe()

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
                relay_peer = svc.relay.attach(queue.put_nowait)
            else:
                reply = client_message(svc.relay, data, relay_peer)
                if reply is not None:
                    await ws.send_str(orjson.dumps(reply).decode())
    finally:
        if relay_peer is not None:
            svc.relay.detach(relay_peer)
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
        svc.live.unsubscribe(queue)
        request.app[sockets_key].discard(ws)
    return ws


def client_message(relay: RelayChannel, data: Any, relay_peer: int | None) -> dict | None:
    """A message from an extension on the live channel (WebSocket or long-poll session `relay_peer`);
    the reply, if any."""
    if not isinstance(data, dict):
        return {"type": "error", "message": "send JSON objects"}
    if data.get("type") == "ping":
        return {"type": "pong"}
    if data.get("type") == "relay_response":
        relay.resolve(data, relay_peer)
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
    svc, sessions = services(request), polls(request)
    client_id = _poll_client(body)
    wait_s = body.get("wait_s", 20)
    if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not 0 <= wait_s <= LONG_POLL_MAX_S:
        raise BadRequest(f"'wait_s' must be a number from 0 to {LONG_POLL_MAX_S} (seconds)", field="wait_s")
    session = sessions.get(client_id)
    if body.get("relay") is True and session.relay_peer is None:
        session.relay_peer = svc.relay.attach(session.queue.put_nowait)
    return json_response({"messages": await sessions.wait(session, float(wait_s))})


async def live_send(request):
    """A message from a long-poll client (relay_response, ping): {client_id, message} -> {reply}."""
    body = await read_json(request)
    svc, sessions = services(request), polls(request)
    session = sessions.get(_poll_client(body))
    return json_response({"reply": client_message(svc.relay, body.get("message"), session.relay_peer)})


def setup_live_routes(app: web.Application) -> None:
    app.router.add_get("/v1/ws", live_socket)
    app.router.add_post("/v1/live/poll", live_poll)
    app.router.add_post("/v1/live/send", live_send)
