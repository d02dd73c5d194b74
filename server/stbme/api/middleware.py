"""Middlewares every app of the sidecar shares (the main API and the DNA hub): errors rendered in one JSON
shape, the bearer token, and CORS for the SillyTavern page."""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
from typing import Callable

from aiohttp import web

from ..errors import StbmeError, Unauthorized
from .requests import error_response

log = logging.getLogger("stbme.http")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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


def auth_middleware(token: str, *, open_paths: tuple[str, ...] = ("/health",), query_token_paths=()):
    """Require `Authorization: Bearer <token>` on every route but `open_paths` (no token: no check).
    `query_token_paths` also accept `?token=` (a browser WebSocket cannot send headers)."""
    @web.middleware
    async def middleware(request: web.Request, handler):
        if token and request.path not in open_paths and request.method != "OPTIONS":
            scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
            sent = sent.strip() if scheme.lower() == "bearer" else ""
            if not sent and request.path in query_token_paths:
                sent = request.query.get("token", "")
            if not hmac.compare_digest(sent.encode(), token.encode()):
                raise Unauthorized("missing or wrong API token: send 'Authorization: Bearer <token>' "
                                   "(the token the sidecar was started with)")
        return await handler(request)
    return middleware


def cors_middleware(allowed_origins: Callable[[], list[str]]):
    """CORS for the origins `allowed_origins()` names (the SillyTavern page), with the private-network
    header that lets an https page reach a loopback sidecar."""
    def headers_for(request: web.Request) -> dict[str, str]:
        origin = request.headers.get("Origin")
        if not origin:
            return {}
        allowed = allowed_origins()
        if origin not in allowed and "*" not in allowed:
            return {}
        return {
            "Access-Control-Allow-Origin": origin,
            "Vary": "Origin",
            "Access-Control-Allow-Methods": "GET, POST, PUT, PATCH, DELETE, OPTIONS",
            # Accept, X-CSRF-Token and the session header: ST-BME's Authority client sends them cross-origin.
            "Access-Control-Allow-Headers": "Content-Type, Authorization, Accept, X-CSRF-Token, "
                                            "X-Authority-Session-Token",
            "Access-Control-Allow-Private-Network": "true",
            "Access-Control-Max-Age": "600",
        }

    @web.middleware
    async def middleware(request: web.Request, handler):
        headers = headers_for(request)
        if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
            if not headers:
                return error_response(403, f"origin {request.headers.get('Origin')!r} is not allowed; add it to "
                                           "server.cors_origins")
            return web.Response(status=204, headers=headers)
        response = await handler(request)
        if headers and not response.prepared:
            response.headers.update(headers)
        return response
    return middleware
