"""HTTP routes of the Authority bridge, under /v1/authority (docs/authority.md). Thin handlers over
AuthorityService (services.authority).

ST-BME's Authority client reads `error` (or `message`), `code` and `category` from a failed answer, so the
sidecar's one error shape works as it is: 401 makes it open a new session and retry once, 403 is a
permission refusal, 404 a missing file or job, 413 too large, other 4xx a validation error. The Authority
session token is checked here, after the sidecar's own middlewares (API token, origin checks) passed.
"""

from __future__ import annotations

from aiohttp import web

from ..authority import AuthorityService
from ..authority.sessions import FILES, JOBS, SESSION_HEADER, SQL, TRIVIUM, Session
from .keys import services
from .requests import json_response, read_json

PREFIX = "/v1/authority"


async def _body(request: web.Request):
    # ST-BME posts some calls (probe) without a body.
    return await read_json(request, allow_empty=True)


def _service(request: web.Request) -> AuthorityService:
    return services(request).authority


def _session(request: web.Request, resource: str | None = None) -> Session:
    session = _service(request).session(request.headers.get(SESSION_HEADER))
    if resource:
        session.require(resource)
    return session


async def probe(request):
    return json_response(_service(request).probe())


async def session_init(request):
    return json_response(_service(request).open_session(await _body(request)))


async def session_current(request):
    session = _session(request)
    return json_response({"session": session.to_json(), "authorized": True})


async def evaluate_permissions(request):
    return json_response(_service(request).evaluate_permissions(_session(request), await _body(request)))


async def sql(request):
    session = _session(request, SQL)
    databases = _service(request).extension(session).sql
    op = request.match_info["op"]
    run = {"query": databases.query, "exec": databases.exec, "transaction": databases.transaction}.get(op)
    if run is None:
        raise web.HTTPNotFound()
    return json_response(await run(await _body(request)))


async def trivium(request):
    session = _session(request, TRIVIUM)
    return json_response(await _service(request).extension(session).trivium.call(
        request.match_info["op"], await _body(request)))


async def private_files(request):
    session = _session(request, FILES)
    files = _service(request).extension(session).files
    run = {"write-file": files.write, "read-file": files.read, "stat": files.stat,
           "delete": files.delete}.get(request.match_info["op"])
    if run is None:
        raise web.HTTPNotFound()
    return json_response(await run(await _body(request)))


async def job_create(request):
    return json_response(await _service(request).jobs.create(_session(request, JOBS), await _body(request)))


async def job_list(request):
    return json_response(await _service(request).jobs.list(_session(request, JOBS), await _body(request)))


async def job_get(request):
    return json_response(await _service(request).jobs.get(_session(request, JOBS), request.match_info["job_id"]))


async def job_requeue(request):
    return json_response(await _service(request).jobs.requeue(_session(request, JOBS), request.match_info["job_id"]))


async def job_cancel(request):
    return json_response(await _service(request).jobs.cancel(_session(request, JOBS), request.match_info["job_id"]))


def setup_authority_routes(app: web.Application) -> None:
    """Serve the Authority protocol under /v1/authority."""
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
