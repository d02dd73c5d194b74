"""Which memory a request reaches when SillyTavern runs with user accounts (stbme/accounts.py).

The ST server plugin names the account in `X-STBME-Account` (percent-encoded `req.user.profile.handle`).
Only a caller that is not a browser may name one: a browser request (it carries `Origin` or
`Sec-Fetch-Site`, which a page cannot leave out) naming an account is refused, so the ST page of one
account cannot reach another's memory on the direct route. Once accounts have used the sidecar, the
direct route from a browser is refused altogether (it cannot say whose it is): the extension must go
through the plugin. Local programs (the CLI) without the header keep the default namespace."""

from __future__ import annotations

from urllib.parse import unquote

from aiohttp import web

from ..account_names import ACCOUNT_HEADER
from ..accounts import AccountSpaces
from ..errors import BadRequest, Forbidden, Unauthorized
from ..live import PollSessions
from ..services import Services
from .keys import account_polls_key, request_polls_key, request_services_key
from .middleware import is_authorised

# The extension's connection check stays open (it then shows the refusal of the first real call).
DIRECT_OPEN_PATHS = ("/health",)


def is_browser(request: web.Request) -> bool:
    return "Origin" in request.headers or "Sec-Fetch-Site" in request.headers


def account_polls(app: web.Application, handle: str, svc: Services) -> PollSessions:
    """The long-poll sessions of one account: its live notices and its relay, nobody else's."""
    polls = app[account_polls_key].get(handle)
    if polls is None:
        polls = app[account_polls_key][handle] = PollSessions(svc.live)
        polls.on_close.append(lambda s: s.relay_peer is not None and svc.relay.detach(s.relay_peer))
    return polls


def account_middleware(spaces: AccountSpaces, token: str, query_token_paths: tuple[str, ...] = ()):
    """Runs after the token check; `token` again because the open paths (/health) skip that check, and
    nobody without the token may make the sidecar open (create) an account's directory."""
    @web.middleware
    async def middleware(request: web.Request, handler):
        raw = request.headers.get(ACCOUNT_HEADER)
        if raw is not None:
            if is_browser(request):
                raise Forbidden(f"a browser may not name a SillyTavern account ({ACCOUNT_HEADER}): only the "
                                "ST-BME server plugin does, from SillyTavern's login", field=ACCOUNT_HEADER)
            if not is_authorised(request, token, query_token_paths):
                raise Unauthorized("naming a SillyTavern account needs the API token", field=ACCOUNT_HEADER)
            try:
                handle = unquote(raw, errors="strict")
            except UnicodeDecodeError:
                raise BadRequest(f"{ACCOUNT_HEADER} must be the percent-encoded UTF-8 account name",
                                 field=ACCOUNT_HEADER) from None
            svc = await spaces.get(handle)
            if svc is not spaces.root:
                request[request_services_key] = svc
                request[request_polls_key] = account_polls(request.app, handle, svc)
        elif spaces.in_use and is_browser(request) and request.path not in DIRECT_OPEN_PATHS:
            raise Forbidden("SillyTavern runs with user accounts, so each account's memory is reached only "
                            "through SillyTavern: set the extension's sidecar URL to the ST-BME server plugin "
                            "(/api/plugins/stbme), or its route to \"Automatic\" or \"Through SillyTavern\"",
                            field=ACCOUNT_HEADER)
        return await handler(request)
    return middleware
