"""The application's typed keys (aiohttp AppKeys): what every handler may reach on `request.app`, and
the memory of the request's SillyTavern account (api/accounts.py) when it is not the default one."""

from __future__ import annotations

import weakref

from aiohttp import web

from ..accounts import AccountSpaces
from ..live import PollSessions
from ..services import Services

services_key = web.AppKey("services", Services)
accounts_key = web.AppKey("accounts", AccountSpaces)
token_key = web.AppKey("token", str)
identity_key = web.AppKey("identity_secret", str)   # the lock file's secret (stbme serve), "" without one
sockets_key = web.AppKey("sockets", weakref.WeakSet)
polls_key = web.AppKey("polls", PollSessions)
account_polls_key = web.AppKey("account_polls", dict)   # account handle -> its PollSessions
# web.RequestKey came with aiohttp 3.12; a string key does the same on older versions.
_request_key = getattr(web, "RequestKey", lambda name, _type: f"stbme.{name}")
request_services_key = _request_key("account_services", Services)
request_polls_key = _request_key("account_polls", PollSessions)


def services(request: web.Request) -> Services:
    """The Services of the request's account: the default namespace unless an account was named."""
    svc = request.get(request_services_key)
    return request.app[services_key] if svc is None else svc


def polls(request: web.Request) -> PollSessions:
    sessions = request.get(request_polls_key)   # not `or`: PollSessions with no session is falsy
    return request.app[polls_key] if sessions is None else sessions
