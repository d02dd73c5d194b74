"""Reading requests and writing responses: JSON bodies, query parameters, chat ids, the JSON envelope."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from ..errors import BadRequest, PayloadTooLarge, error_body

MAX_CHAT_ID = 512


def json_response(data: dict, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps({"ok": status < 400, **data}, option=orjson.OPT_SERIALIZE_NUMPY),
                        status=status, content_type="application/json")


def error_response(status: int, message: str, field: str | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(error_body(status, message, field)), status=status,
                        content_type="application/json")


async def read_json(request: web.Request, *, allow_empty: bool = False) -> Any:
    """The JSON body; an empty body is a 400, or None with `allow_empty`."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"the request body is larger than {request.client_max_size} bytes "
                              "(server.max_body_bytes)") from None
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


def check_chat_id(chat_id: Any) -> str:
    """Chat ids are arbitrary strings from SillyTavern, within limits."""
    if not isinstance(chat_id, str) or not chat_id.strip():
        raise BadRequest("chat id is empty", field="chat_id")
    if len(chat_id) > MAX_CHAT_ID:
        raise BadRequest(f"chat id is longer than {MAX_CHAT_ID} characters", field="chat_id")
    if "\x00" in chat_id:
        raise BadRequest("chat id contains a NUL character", field="chat_id")
    return chat_id


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
        return float(raw)
    except ValueError:
        raise BadRequest(f"query parameter {name!r} must be {what}", field=name) from None
