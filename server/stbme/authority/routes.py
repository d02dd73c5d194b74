"""HTTP routes of the Authority bridge, under /v1/authority (docs/authority.md). Thin handlers over
AuthorityService.

ST-BME's Authority client reads `error` (or `message`), `code` and `category` from a failed answer, so the
sidecar's one error shape works as it is: 401 makes it open a new session and retry once, 403 is a
permission refusal, 404 a missing file or job, 413 too large, other 4xx a validation error. The Authority
session token is checked here, after the sidecar's own middlewares (API token, origin checks) passed.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from ..errors import BadRequest, PayloadTooLarge
from .service import AuthorityService
from .sessions import FILES, JOBS, SESSION_HEADER, SQL, TRIVIUM, Session

PREFIX = "/v1/authority"
authority_key = web.AppKey("authority", AuthorityService)


def _json(data: dict, status: int = 200) -> web.Response:
    # The sidecar's success shape ({"ok": true, ...}); the app's own helper moves to api/ in the restructure.
    return web.Response(body=orjson.dumps({"ok": True, **data}), status=status, content_type="application/json")


async def _body(request: web.Request):
    """The JSON body, or None when there is none (ST-BME posts some calls without one)."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"the request body is larger than {request.client_max_size} bytes "
                              "(server.max_body_bytes)") from None
    if not raw.strip():
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


def _service(request: web.Request) -> AuthorityService:
    return request.app[authority_key]


def _session(request: web.Request, resource: str | None = None) -> Session:
    session = _service(request).session(request.headers.get(SESSION_HEADER))
    if resource:
        session.require(resource)
    return session


async def probe(request):
    return _json(_service(request).probe())


async def session_init(request):
    return _json(_service(request).open_session(await _body(request)))


async def session_current(request):
    session = _session(request)
    return _json({"session": session.to_json(), "authorized": True})


async def evaluate_permissions(request):
    return _json(_service(request).evaluate_permissions(_session(request), await _body(request)))


async def sql(request):
    session = _session(request, SQL)
    databases = _service(request).extension(session).sql
    op = request.match_info["op"]
    run = {"query": databases.query, "exec": databases.exec, "transaction": databases.transaction}.get(op)
    if run is None:
        raise web.HTTPNotFound()
    return _json(await run(await _body(request)))


async def trivium(request):
    session = _session(request, TRIVIUM)
    return _json(await _service(request).extension(session).trivium.call(
        request.match_info["op"], await _body(request)))


async def private_files(request):
    session = _session(request, FILES)
    files = _service(request).extension(session).files
    run = {"write-file": files.write, "read-file": files.read, "stat": files.stat,
           "delete": files.delete}.get(request.match_info["op"])
    if run is None:
        raise web.HTTPNotFound()
    return _json(await run(await _body(request)))


async def job_create(request):
    return _json(await _service(request).jobs.create(_session(request, JOBS), await _body(request)))


async def job_list(request):
    return _json(await _service(request).jobs.list(_session(request, JOBS), await _body(request)))


async def job_get(request):
    return _json(await _service(request).jobs.get(_session(request, JOBS), request.match_info["job_id"]))


async def job_requeue(request):
    return _json(await _service(request).jobs.requeue(_session(request, JOBS), request.match_info["job_id"]))


async def job_cancel(request):
    return _json(await _service(request).jobs.cancel(_session(request, JOBS), request.match_info["job_id"]))


def setup_authority_routes(app: web.Application, service: AuthorityService) -> None:
    """Serve the Authority protocol under /v1/authority."""
    app[authority_key] = service
    r, p = app.router, PREFIX
    r.add_post(p + "/probe", probe)
    r.add_post(p + "/session/init", session_init)
    r.add_get(p + "/session/current", session_current)
    r.add_post(p + "/permissions/evaluate-batch", evaluate_permissions)
    r.add_post(p + "/sql/{op}", sql)
    r.add_post(p + "/trivium/{op}", trivium)
    r.add_post(p + "/fs/private/{op}", private_files)
    r.add_post(p + "/jobs/create", job_create)
    r.add_post(p + "/jobs/list", job_list)
    r.add_get(p + "/jobs/{job_id}", job_get)
    r.add_post(p + "/jobs/{job_id}/requeue", job_requeue)
    r.add_post(p + "/jobs/{job_id}/cancel", job_cancel)
