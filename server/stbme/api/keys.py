"""The application's typed keys (aiohttp AppKeys): what every handler may reach on `request.app`."""

from __future__ import annotations

import weakref

from aiohttp import web

from ..live import PollSessions
from ..services import Services

services_key = web.AppKey("services", Services)
token_key = web.AppKey("token", str)
identity_key = web.AppKey("identity_secret", str)   # the lock file's secret (stbme serve), "" without one
sockets_key = web.AppKey("sockets", weakref.WeakSet)
polls_key = web.AppKey("polls", PollSessions)


def services(request: web.Request) -> Services:
    return request.app[services_key]
