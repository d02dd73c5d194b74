"""Reading requests and writing responses: JSON bodies, query parameters, chat ids, the JSON envelope."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Callable

import orjson
from aiohttp import web

from ..errors import BadRequest, PayloadTooLarge, StbmeError, error_body
from ..wire_limits import check_chat_id

log = logging.getLogger("stbme.http")
DEFAULT_BODY_TIMEOUT_S = 60.0
# The body timeout of an app, read per request (server.body_timeout_s for the sidecar; the hub's default).
body_timeout_key = web.AppKey("body_timeout_s", Callable[[], float])


def json_response(data: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps({"ok": status < 400, **data}, option=orjson.OPT_SERIALIZE_NUMPY),
                        status=status, content_type="application/json")


def error_response(status: int, message: str, field: str | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(error_body(status, message, field)), status=status,
                        content_type="application/json")


async def read_json(request: web.Request, *, allow_empty: bool = False) -> Any:
    """The request's JSON body; an empty body is a 400, or None with `allow_empty`. A body must say
    `Content-Type: application/json` (415): a page may send text/plain cross-site without a preflight,
    JSON it cannot. It must arrive within the body timeout (408), so a Content-Length larger than what is
    sent does not hold the connection."""
    if (request.headers.get("Content-Type") is None or request.content_type != "application/json") and (
            not allow_empty or request.body_exists):
        raise StbmeError(f"send the body as JSON with 'Content-Type: application/json' (got "
                         f"{request.headers.get('Content-Type', 'no Content-Type')!r})", status=415,
                         field="Content-Type")
    timeout_s = request.app[body_timeout_key]() if body_timeout_key in request.app else DEFAULT_BODY_TIMEOUT_S
    try:
        async with asyncio.timeout(timeout_s):
            raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"the request body is larger than {request.client_max_size} bytes "
                              "(server.max_body_bytes)") from None
    except TimeoutError:
        raise StbmeError(f"the request body did not arrive within {timeout_s:g} s (server.body_timeout_s): "
                         f"Content-Length says {request.content_length} bytes", status=408,
                         field="Content-Length") from None
    except ConnectionResetError:
        # The client hung up mid-body (a closed tab, a cancelled fetch): nothing to answer, nothing went wrong
        # here. One line, not aiohttp's traceback at ERROR.
        log.info("%s %s: the client closed the connection before its body arrived", request.method, request.path)
        raise StbmeError("the client closed the connection before the body arrived", status=400,
                         field="body") from None
    if allow_empty and not raw.strip():
        return None
    if not raw:
        raise BadRequest("the request body is empty; send JSON")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


async def read_object(request: web.Request, hint: str) -> dict:
    """A JSON object body, or a 400 that says what to send (`hint`)."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadRequest(f"the body must be a JSON object: {hint}")
    return body


def chat_id(request: web.Request) -> str:
    return check_chat_id(request.match_info["chat_id"])


def optional_chat_id(request: web.Request, name: str = "chat_id") -> str | None:
    raw = request.query.get(name)
    return check_chat_id(raw) if raw is not None else None


def int_query(request: web.Request, name: str, default: int, lo: int, hi: int) -> int:
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


def choice_query(request: web.Request, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = request.query.get(name, default)
    if value not in choices:
        raise BadRequest(f"{name!r} must be {', '.join(choices[:-1])} or {choices[-1]}", field=name)
    return value


def float_query(request: web.Request, name: str, what: str) -> float | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRequest(f"query parameter {name!r} must be {what}", field=name)
    return value
