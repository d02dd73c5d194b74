"""Fixtures for the Authority bridge tests: a real app and a client that speaks the protocol the way
ST-BME's Authority client does (session/init once, then the session header on every call)."""

from __future__ import annotations

import numpy as np
import pytest

from stbme.api import create_app

BASE = "/v1/authority"
ST_BME_PERMISSIONS = {"storage": {"kv": True, "blob": True}, "fs": {"private": True}, "sql": {"private": True},
                      "trivium": {"private": True}, "jobs": {"background": True}, "events": {"channels": True}}
ERROR_KEYS = {"ok", "error", "errors", "status", "field"}


class AuthorityClient:
    def __init__(self, http, extension_id: str = "third-party/st-bme", permissions=None, headers=None):
        self.http = http
        self.extension_id = extension_id
        self.permissions = ST_BME_PERMISSIONS if permissions is None else permissions
        self.headers = dict(headers or {})
        self.token = None

    async def init(self) -> str:
        resp = await self.http.post(BASE + "/session/init", headers=self.headers, json={
            "extensionId": self.extension_id, "displayName": "ST-BME", "version": "0.0.0", "installType": "local",
            "declaredPermissions": self.permissions})
        data = await resp.json()
        assert resp.status == 200, data
        self.token = data["sessionToken"]
        return self.token

    async def call(self, path: str, body=None, *, method: str = "POST", expect: int = 200) -> dict:
        """One request with the session header; asserts the status (and the error shape for errors)."""
        if self.token is None:
            await self.init()
        headers = {**self.headers, "x-authority-session-token": self.token}
        kwargs = {"json": body} if body is not None else {}
        resp = await self.http.request(method, BASE + path, headers=headers, **kwargs)
        data = await resp.json()
        assert resp.status == expect, (resp.status, data)
        if expect >= 400:
            assert set(data) == ERROR_KEYS and data["ok"] is False and data["status"] == expect, data
        return data


@pytest.fixture
async def http(aiohttp_client, tmp_path, embedder):
    app = create_app(tmp_path / "data", embedder=embedder)
    return await aiohttp_client(app)


@pytest.fixture
async def authority(http):
    return AuthorityClient(http)


# Trivium items: deterministic vectors and ST-BME-like payloads whose texts share a few words.
NS = "st-bme::chat 1 @ 灯塔"
WORDS = ["lighthouse", "silver", "key", "oak", "harbour", "dragon", "umbrella", "mountain", "vault", "letter"]


def vec(i: int, dim: int = 16) -> list[float]:
    rng = np.random.default_rng(i)
    return rng.standard_normal(dim).astype(np.float32).tolist()


def item(i: int, namespace: str = NS, dim: int = 16, **payload) -> dict:
    text = f"{WORDS[i % len(WORDS)]} memory number {i}"
    return {"externalId": f"node-{i:03d}", "namespace": namespace, "vector": vec(i, dim),
            "payload": {"nodeId": f"node-{i:03d}", "text": text, "archived": False, **payload}}


async def upsert(client, items, **extra):
    return await client.call("/trivium/bulk-upsert", {"database": "st_bme_vectors", "items": items, **extra})
