"""Authority private files: write, read, stat, delete; paths normalised the client's way and unsafe ones
refused; size limits; missing files are 404 (ST-BME reads that as "missing", not as an error)."""

from __future__ import annotations

import base64
import json

import pytest

from authority_fixtures import AuthorityClient, authority, http  # noqa: F401
from stbme.authority import blobs


async def test_write_read_stat_delete(authority):
    path = "user/files/ST-BME_luker_checkpoint_chat 1 @ 灯塔-1x2y.json"
    payload = {"formatVersion": 2, "graph": {"nodes": [{"id": "n1", "text": "银钥匙"}]}}
    written = await authority.call("/fs/private/write-file", {"path": path, "content": json.dumps(payload),
                                                              "encoding": "utf8", "createParents": True})
    assert written["entry"]["path"] == path and written["entry"]["sizeBytes"] == len(json.dumps(payload).encode())
    assert "error" not in written
    read = await authority.call("/fs/private/read-file", {"path": "authority://private//" + path})
    assert json.loads(read["content"]) == payload and read["encoding"] == "utf8" and read["entry"]["path"] == path
    stat = await authority.call("/fs/private/stat", {"path": "\\" + path.replace("/", "\\")})
    assert stat["entry"]["sizeBytes"] == written["entry"]["sizeBytes"] and stat["exists"] is True
    assert (await authority.call("/fs/private/delete", {"path": path, "recursive": False}))["deleted"] is True
    for op in ("read-file", "stat", "delete"):
        data = await authority.call(f"/fs/private/{op}", {"path": path}, expect=404)
        assert data["field"] == "path"


async def test_binary_and_overwrite(authority):
    raw = bytes(range(256))
    await authority.call("/fs/private/write-file", {"path": "a/b.bin", "content": base64.b64encode(raw).decode(),
                                                    "encoding": "base64"})
    read = await authority.call("/fs/private/read-file", {"path": "a/b.bin"})
    assert read["encoding"] == "base64" and base64.b64decode(read["content"]) == raw
    await authority.call("/fs/private/write-file", {"path": "a/b.bin", "content": "now text"})
    assert (await authority.call("/fs/private/read-file", {"path": "a/b.bin"}))["content"] == "now text"
    await authority.call("/fs/private/write-file", {"path": "a/c/d.json", "content": "{}"})
    await authority.call("/fs/private/write-file", {"path": "a_b/e.json", "content": "{}"})
    gone = await authority.call("/fs/private/delete", {"path": "a", "recursive": True})
    assert gone["count"] == 2
    await authority.call("/fs/private/stat", {"path": "a_b/e.json"})  # '_' is not a pattern


@pytest.mark.parametrize("path", ["../secret", "a/../../b", "a/./b", "C:/Windows/x", "c:", "http://x/y",
                                  "a/%2e%2e/b", "", "///", "a\x00b", "a/\x07", "x" * 300])
async def test_unsafe_paths_are_refused(authority, path):
    data = await authority.call("/fs/private/write-file", {"path": path, "content": "x"}, expect=400)
    assert data["field"] == "path"


def test_paths_are_normalised_like_the_client():
    assert blobs.normalize_path("authority://private/user//files/a b@c.json") == "user/files/a b@c.json"
    assert blobs.normalize_path("/st-bme\\e2e\\run/x.json/") == "st-bme/e2e/run/x.json"
    assert blobs.normalize_path("ST-BME/migration-safety/chat: 1.json") == "ST-BME/migration-safety/chat: 1.json"


async def test_size_limits(authority, monkeypatch):
    monkeypatch.setattr(blobs, "MAX_FILE_BYTES", 1000)
    monkeypatch.setattr(blobs, "MAX_TOTAL_BYTES", 2500)
    data = await authority.call("/fs/private/write-file", {"path": "big", "content": "x" * 1001}, expect=413)
    assert data["field"] == "content"
    for i in range(2):
        await authority.call("/fs/private/write-file", {"path": f"f{i}", "content": "x" * 1000})
    data = await authority.call("/fs/private/write-file", {"path": "f2", "content": "x" * 1000}, expect=413)
    assert "full" in data["error"]
    await authority.call("/fs/private/write-file", {"path": "f1", "content": "y" * 1000})  # replacing fits
    await authority.call("/fs/private/read-file", {"path": "f2"}, expect=404)  # nothing half-written
    data = await authority.call("/fs/private/write-file", {"path": "x", "content": "!!", "encoding": "base64"},
                                expect=400)
    assert data["field"] == "content"
    data = await authority.call("/fs/private/write-file", {"path": "x", "content": 5}, expect=400)
    assert data["field"] == "content"


async def test_extensions_have_separate_areas(http):
    one, two = AuthorityClient(http, "ext-one"), AuthorityClient(http, "ext-two")
    await one.call("/fs/private/write-file", {"path": "same.json", "content": "one"})
    await two.call("/fs/private/read-file", {"path": "same.json"}, expect=404)
    no_files = AuthorityClient(http, "ext-three", permissions={"sql": {"private": True}})
    await no_files.call("/fs/private/read-file", {"path": "same.json"}, expect=403)
