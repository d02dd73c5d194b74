"""The sidecar's HTTP API as every command uses it, the one definition of what a command sends and reads:
the same requests go to a running server and to the sidecar a command starts for itself (cli/local.py).

Requests are plain HTTP/1.1 with the standard library (a command that goes through a running server loads
nothing else), run on a thread so the command's event loop stays free (it may be serving them). Every
problem is a StbmeError with one line for the user: the server's own error, no answer, or an answer that
is not what this version expects.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson

from .. import __version__
from ..account_names import ACCOUNT_HEADER
from ..errors import StbmeError

TIMEOUT_S = 600.0   # an import embeds its memories before it answers
ERROR_SNIPPET = 200


def chat_path(chat_id: str, rest: str = "") -> str:
    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


class UnexpectedAnswer(StbmeError):
    """The server answered, but not in the shape this version of the CLI reads."""


class Sidecar:
    """JSON over HTTP to one sidecar. `describe` names it in errors ("the sidecar server (pid 12) at …")."""

    def __init__(self, url: str, token: str | None, describe: str, *, timeout_s: float = TIMEOUT_S,
                 account: str | None = None):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.token = token
        self.account = account   # a SillyTavern account's memory, named as the ST server plugin names it
        self.describe = describe
        self.timeout_s = timeout_s

    # -- one request --------------------------------------------------------------------------------
    def request_sync(self, method: str, path: str, body: Any = None, *,
                     params: dict | None = None) -> tuple[int, bytes]:
        """Send one request and return (status, body); StbmeError when nothing answers."""
        if params:
            path = f"{path}?{urlencode(params)}"
        data = None if body is None else orjson.dumps(body)
        headers = {"Accept": "application/json", "User-Agent": f"stbme-cli/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.account is not None:
            headers[ACCOUNT_HEADER] = quote(self.account, safe="")
        import http.client  # noqa: PLC0415 - imported on first use: `stbme --help` needs none of it

        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise StbmeError(f"{self.describe} did not answer {method} {path.split('?')[0]}: "
                             f"{exc or type(exc).__name__}") from None
        finally:
            conn.close()

    def call_sync(self, method: str, path: str, body: Any = None, *, params: dict | None = None,
                  want: str | None = None, raw: bool = False) -> Any:
        """The JSON answer (or `raw` bytes); with `want`, the answer's value under that key, which must be
        there. Error answers become the server's own message."""
        status, payload = self.request_sync(method, path, body, params=params)
        if status >= 400:
            raise self._error(status, payload)
        if raw:
            return payload
        try:
            answer = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise self.unexpected(f"{method} {path}", f"not JSON (HTTP {status}): {_snippet(payload)}") from None
        if want is not None:
            if not isinstance(answer, dict) or want not in answer:
                raise self.unexpected(f"{method} {path}", f"no {want!r} in {_snippet(payload)}")
            return answer[want]
        return answer

    async def call(self, method: str, path: str, body: Any = None, *, params: dict | None = None,
                   want: str | None = None, raw: bool = False) -> Any:
        import asyncio  # noqa: PLC0415

        return await asyncio.to_thread(self.call_sync, method, path, body, params=params, want=want, raw=raw)

    async def get(self, path: str, *, params: dict | None = None, want: str | None = None, raw: bool = False):
        return await self.call("GET", path, params=params, want=want, raw=raw)

    async def post(self, path: str, body: Any = None, *, params: dict | None = None, want: str | None = None):
        return await self.call("POST", path, {} if body is None else body, params=params, want=want)

    async def put(self, path: str, body: Any, *, want: str | None = None):
        return await self.call("PUT", path, body, want=want)

    async def patch(self, path: str, body: Any, *, want: str | None = None):
        return await self.call("PATCH", path, body, want=want)

    # -- errors -------------------------------------------------------------------------------------
    def unexpected(self, what: str, detail: str) -> UnexpectedAnswer:
        return UnexpectedAnswer(f"{self.describe} answered {what.split('?')[0]} with something stbme {__version__} "
                                f"does not expect ({detail}); is it the same version (`stbme --version`)?")

    def _error(self, status: int, payload: bytes) -> StbmeError:
        try:
            body = orjson.loads(payload)
            message, field = body.get("error") or f"HTTP {status}", body.get("field")
        except (orjson.JSONDecodeError, AttributeError):
            message, field = f"HTTP {status}: {_snippet(payload)}", None
        if not isinstance(message, str):
            message = f"HTTP {status}: {_snippet(payload)}"
        if status == 401:
            message = (f"{self.describe} owns this data directory and requires its API token: set "
                       f"STBME_TOKEN to the token it was started with ({message})")
        return StbmeError(message, status=status, field=field if isinstance(field, str) else None)


def _snippet(payload: bytes) -> str:
    text = payload[:ERROR_SNIPPET].decode("utf-8", errors="replace").strip()
    return repr(text + ("…" if len(payload) > ERROR_SNIPPET else ""))
