"""Middlewares every app of the sidecar shares (the main API and the DNA hub): the Host check against DNS
rebinding, the browser check (Origin, Sec-Fetch-Site, CORS for the SillyTavern page), errors rendered in
one JSON shape, and the bearer token. docs/security.md says what each one stops and what it does not."""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ..errors import StbmeError, Unauthorized
from ..origins import host_name, is_loopback, normalize_origin
from .requests import error_response

__all__ = ["auth_middleware", "browser_middleware", "error_middleware", "host_middleware", "is_authorised",
           "is_loopback", "protocol_log"]

log = logging.getLogger("stbme.http")
# Sec-Fetch-Site values a browser sends for a request no other site started (typed URL, bookmark, same page).
FIRST_PARTY_FETCH = ("same-origin", "none")


class _OneLineBadRequests(logging.Filter):
    """aiohttp logs a malformed request (an over-long URL or header) with a full traceback although the
    client already got its 400: keep one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {exc.code} {exc.message}"[:500]
            record.args, record.exc_info, record.exc_text = None, None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


protocol_log = logging.getLogger("stbme.http.protocol")  # the server's own log (handler_args "logger")
protocol_log.addFilter(_OneLineBadRequests())


def _sent_token(request: web.Request, query_token_paths: tuple[str, ...] = ()) -> str:
    scheme, _, sent = request.headers.get("Authorization", "").strip().partition(" ")
    sent = sent.strip() if scheme.lower() == "bearer" else ""
    if not sent and request.path in query_token_paths:
        sent = request.query.get("token", "")
    return sent


def is_authorised(request: web.Request, token: str, query_token_paths: tuple[str, ...] = ()) -> bool:
    """Whether the request may see private details (a path on disk): it carried the right token, or no
    token is set, which only a loopback sidecar may run without (create_app), and the request passed its
    Host and browser checks: a local program or the SillyTavern page."""
    if not token:
        return True
    return hmac.compare_digest(_sent_token(request, query_token_paths).encode(), token.encode())


@web.middleware
async def error_middleware(request: web.Request, handler):
    try:
        return await handler(request)
    except StbmeError as exc:
        response = error_response(exc.status, exc.message, exc.field)
        if exc.status == 408:
            response.force_close()  # the rest of the body may still come: never read it as a request
        return response
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
        if (token and request.path not in open_paths and request.method != "OPTIONS"
                and not is_authorised(request, token, query_token_paths)):
            raise Unauthorized("missing or wrong API token: send 'Authorization: Bearer <token>' "
                               "(the token the sidecar was started with)")
        return await handler(request)
    return middleware


def host_middleware(allowed_hosts: Callable[[], list[str]]):
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 reaches a loopback
    sidecar as "its own origin", with `Host: evil.example`. Answer only loopback names and the configured
    ones (server.allowed_hosts). Used when the sidecar is on loopback without a token."""
    @web.middleware
    async def middleware(request: web.Request, handler):
        name = host_name(request.headers.get("Host", ""))
        if name is None or not (is_loopback(name) or name in _host_names(allowed_hosts())):
            return error_response(403, f"the sidecar does not answer to the host name {request.headers.get('Host')!r} "
                                       "(DNS rebinding guard): use 127.0.0.1 or localhost, or add the name to "
                                       "server.allowed_hosts", field="Host")
        return await handler(request)
    return middleware


def _host_names(values: list[str]) -> set[str]:
    return {v.strip().strip("[]").lower().rstrip(".") for v in values}


def browser_middleware(allowed_origins: Callable[[], list[str]], *, allow_any_origin: bool):
    """Refuse, before any handler runs, a request a browser sent on behalf of another web page: an
    `Origin` that is not allowed, or a cross-site `Sec-Fetch-Site` with no allowed Origin (a no-cors GET
    from an <img> or a link). Requests without either header (curl, the ST server plugin, the hub
    client) pass. Allowed origins get the CORS headers, with the private-network header that lets an
    https page reach a loopback sidecar. `*` in the list allows any page only if `allow_any_origin`
    (a token is required, and a page does not know it)."""
    def allowed(origin: str) -> bool:
        configured = allowed_origins()
        if allow_any_origin and "*" in configured:
            return True
        norm = normalize_origin(origin)
        return norm is not None and norm in {normalize_origin(o) for o in configured if o != "*"}

    def cors_headers(origin: str) -> dict[str, str]:
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
        origin = request.headers.get("Origin")
        site = request.headers.get("Sec-Fetch-Site")
        if origin is not None and not allowed(origin):
            log.warning("refused %s %s from the web page %r (not in server.cors_origins)",
                        request.method, request.path, origin[:200])
            return error_response(403, f"requests from the web page {origin!r} are refused: only the SillyTavern "
                                       "page, listed in server.cors_origins, may call the sidecar", field="Origin")
        if origin is None and site is not None and site.lower() not in FIRST_PARTY_FETCH:
            return error_response(403, f"a {site} browser request without an allowed Origin is refused",
                                  field="Sec-Fetch-Site")
        headers = cors_headers(origin) if origin is not None else {}
        if request.method == "OPTIONS" and request.headers.get("Access-Control-Request-Method"):
            if not headers:
                return error_response(403, "a CORS preflight needs an Origin", field="Origin")
            return web.Response(status=204, headers=headers)
        response = await handler(request)
        if headers and not response.prepared:
            response.headers.update(headers)
        return response
    return middleware
