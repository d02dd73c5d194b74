"""The aiohttp application of the sidecar: middlewares, routes, the live sockets, and the lifecycle that
starts and closes the services."""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import Any

from aiohttp import WSCloseCode, web

from ..embed import Embedder
from ..errors import StbmeError
from ..live import PollSessions
from ..services import Services
from .authority_routes import setup_authority_routes
from .dna_routes import setup_dna_routes
from ..accounts import AccountSpaces
from .accounts import account_middleware
from .keys import account_polls_key, accounts_key, identity_key, polls_key, services_key, sockets_key, token_key
from .live_routes import setup_live_routes
from .middleware import (auth_middleware, browser_middleware, error_middleware, host_middleware, is_loopback,
                         protocol_log)
from .requests import body_timeout_key
from .routes import setup_routes

DEFAULT_PORT = 8765
# Open without the token: the extension's connection check, and the challenge a command sends before it
# trusts the server with a token (cli/owner.py).
OPEN_PATHS = ("/health", "/v1/identity")
log = logging.getLogger("stbme")
__all__ = ["DEFAULT_PORT", "check_binding", "create_app", "services_key"]


def check_binding(host: str, token: str | None) -> None:
    """Binding anywhere but loopback requires a token (checked before anything is opened or created)."""
    if not is_loopback(host) and not token:
        raise StbmeError(f"binding to {host} exposes your chats to the network: set an API token with "
                         "--token or STBME_TOKEN (the extension then sends it)", status=500)


def create_app(data_dir: Path | str | None = None, *, host: str = "127.0.0.1", token: str | None = None,
               embedder: Embedder | None = None, cli_settings: dict[str, Any] | None = None,
               services: Services | None = None, identity_secret: str = "",
               max_body_bytes: int | None = None) -> web.Application:
    """The application over a data directory (or over `services` already opened). Binding anywhere but
    loopback requires a token; without one, only loopback Host names are answered (DNS rebinding).
    `identity_secret`: the lock file's secret, with which `GET /v1/identity` proves who this server is.
    `max_body_bytes`: instead of server.max_body_bytes (a command's own sidecar takes any import)."""
    check_binding(host, token)
    svc = services or Services.open(data_dir, embedder=embedder, cli_settings=cli_settings)
    origins = lambda: [*svc.settings["server.cors_origins"], *svc.settings["server.extra_cors_origins"]]  # noqa: E731
    if "*" in origins() and not token:
        log.warning("server.cors_origins contains '*', which is ignored without an API token: any web page "
                    "could use the sidecar. List SillyTavern's origin, or start with --token")
    spaces = AccountSpaces(svc, cli_settings)
    guards = [host_middleware(lambda: svc.settings["server.allowed_hosts"])] if not token else []
    app = web.Application(
        middlewares=[*guards, browser_middleware(origins, allow_any_origin=bool(token)),
                     error_middleware, auth_middleware(token or "", open_paths=OPEN_PATHS,
                                                       query_token_paths=("/v1/ws",)),
                     account_middleware(spaces, token or "", query_token_paths=("/v1/ws",))],
        client_max_size=max_body_bytes or svc.settings["server.max_body_bytes"],
        handler_args={"logger": protocol_log},
    )
    app[body_timeout_key] = lambda: svc.settings["server.body_timeout_s"]
    app[services_key] = svc
    app[accounts_key] = spaces
    app[account_polls_key] = {}
    app[token_key] = token or ""
    app[identity_key] = identity_secret
    app[sockets_key] = weakref.WeakSet()
    polls = app[polls_key] = PollSessions(svc.live)
    polls.on_close.append(lambda s: s.relay_peer is not None and svc.relay.detach(s.relay_peer))
    setup_routes(app)
    setup_live_routes(app)
    setup_dna_routes(app)
    setup_authority_routes(app)

    async def lifecycle(app: web.Application):
        await svc.start()
        yield
        await spaces.close()   # before the default namespace: they borrow its embedder
        await svc.close()

    async def close_sockets(app: web.Application):
        # on_shutdown runs before the server waits for running handlers; a live socket would hold
        # the shutdown until its timeout if it were closed only in the cleanup.
        for ws in list(app[sockets_key]):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"sidecar shutting down")
        for polls in (app[polls_key], *app[account_polls_key].values()):
            polls.close_all()  # waiting long-polls return at once

    app.cleanup_ctx.append(lifecycle)
    app.on_shutdown.append(close_sockets)
    return app
