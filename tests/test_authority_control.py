"""Authority control plane: the probe advertises exactly what is served, sessions and their expiry,
permissions, and the sidecar's own API token still guarding every Authority route."""

from __future__ import annotations

import time

import pytest
from authority_fixtures import BASE, ERROR_KEYS, AuthorityClient, authority, http  # noqa: F401
from stbme.api.app import create_app, services_key
from stbme.authority.service import FEATURES
from stbme.authority.sessions import Sessions
from stbme.errors import Unauthorized


async def test_probe_advertises_what_is_served(http):
    resp = await http.post(BASE + "/probe")  # ST-BME posts no body
    data = await resp.json()
    assert resp.status == 200 and data["healthy"] is True
    served = http.server.app[services_key].authority.jobs.handlers
    assert data["jobs"]["supportedTypes"] == data["supportedJobTypes"] == sorted(served)
    # no vector-rebuild job: the bridge cannot embed in the client's model, so it does not claim to
    assert "authority.vector.rebuild" not in data["supportedJobTypes"]
    families = {"sql": "sql", "trivium": "trivium", "jobs": "jobs", "blob": "fs.private"}
    assert all(f in data["features"] for f in families.values()) and data["features"] == FEATURES
    resp = await http.post(BASE + "/probe", data=b'{"anything": 1}', headers={"Content-Type": "application/json"})
    assert resp.status == 200


async def test_session_init_current_and_permissions(authority):
    token = await authority.init()
    assert len(token) >= 32
    current = await authority.call("/session/current", method="GET")
    assert current["session"]["extensionId"] == "third-party/st-bme" and current["authorized"] is True
    requests = [{"resource": "sql.private", "target": "default", "reason": "probe"},
                {"resource": "trivium.private", "target": "st_bme_vectors"},
                {"resource": "fs.private"}, {"resource": "jobs.background", "target": "delay"},
                {"resource": "jobs.background", "target": "authority.vector.rebuild"},
                {"resource": "storage.kv"}, {"resource": "events.channels"}]
    results = (await authority.call("/permissions/evaluate-batch", {"requests": requests}))["results"]
    assert [r["decision"] for r in results] == ["granted"] * 4 + ["denied"] * 3
    data = await authority.call("/permissions/evaluate-batch", {"requests": [{"target": "x"}]}, expect=400)
    assert data["field"] == "requests[0].resource"


async def test_undeclared_permissions_are_denied(http):
    client = AuthorityClient(http, permissions={"sql": {"private": True}})
    results = (await client.call("/permissions/evaluate-batch", {"requests": [
        {"resource": "sql.private"}, {"resource": "trivium.private"}]}))["results"]
    assert [r["decision"] for r in results] == ["granted", "denied"]
    data = await client.call("/trivium/stat", {}, expect=403)
    assert "trivium.private" in data["error"]
    # the message must not look like a session problem: ST-BME would re-init and retry instead of stopping
    assert not ("session" in data["error"] and any(w in data["error"] for w in ("invalid", "expired", "missing")))


async def test_bad_session_tokens_get_401(http):
    for headers in ({}, {"x-authority-session-token": "made-up"}):
        resp = await http.get(BASE + "/session/current", headers=headers)
        data = await resp.json()
        assert resp.status == 401 and set(data) == ERROR_KEYS and "session/init" in data["error"]
    for body, field in [({}, "extensionId"), ({"extensionId": "x", "declaredPermissions": "all"},
                                               "declaredPermissions"), ([], None)]:
        resp = await http.post(BASE + "/session/init", json=body)
        data = await resp.json()
        assert resp.status == 400 and data["field"] == field
    resp = await http.post(BASE + "/session/init", data=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status == 400 and "not valid JSON" in (await resp.json())["error"]


def test_sessions_expire_by_idle_time_and_count():
    sessions = Sessions(idle_s=60, max_sessions=3)
    first = sessions.open({"extensionId": "a"})
    sessions.get(first.token)
    first.last_seen = time.time() - 61
    with pytest.raises(Unauthorized, match="expired"):
        sessions.get(first.token)
    tokens = [sessions.open({"extensionId": "a"}).token for _ in range(4)]
    assert len(sessions) == 3
    assert sessions.get(tokens[-1]) and sessions.get(tokens[1])
    with pytest.raises(Unauthorized):
        sessions.get(tokens[0])  # the oldest made room


async def test_the_sidecar_token_still_guards_authority_routes(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder, token="secret-token")
    http = await aiohttp_client(app)
    resp = await http.post(BASE + "/probe")
    assert resp.status == 401
    resp = await http.post(BASE + "/session/init", json={"extensionId": "x"})
    assert resp.status == 401
    client = AuthorityClient(http, headers={"Authorization": "Bearer secret-token"})
    await client.call("/trivium/stat", {})
    # a valid Authority session without the sidecar token is still refused
    resp = await http.post(BASE + "/trivium/stat", json={}, headers={"x-authority-session-token": client.token})
    assert resp.status == 401 and "API token" in (await resp.json())["error"]


async def test_unknown_authority_paths_are_404_in_the_one_error_shape(authority):
    data = await authority.call("/sql/drop", {}, expect=404)
    assert "no such endpoint" in data["error"]
    await authority.call("/fs/private/list", {}, expect=404)
    await authority.call("/trivium/bulk-unlink", {}, expect=404)
