"""Authority private files ("blobs"): an extension's private file area, with size limits.

Files are rows of the extension's own SQLite file keyed by their normalised path, so no client string
ever becomes a file-system path and a write is atomic. Paths follow the client's own rules: an optional
`authority://private/` prefix and leading slashes are dropped, `\\` becomes `/`, `//` collapses; `.` and
`..` segments, drive letters and `:/` are refused. Spaces, `@` and any Unicode are fine.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from ..errors import BadRequest, NotFound, PayloadTooLarge
from . import wire
from .databases import StoreSet

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_FILES = 20000
MAX_PATH_CHARS = 1024
MAX_SEGMENT_CHARS = 255
_DRIVE = re.compile(r"^[A-Za-z]:(/|$)")


def _create(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE files (path TEXT PRIMARY KEY, content BLOB NOT NULL, size INTEGER NOT NULL,"
                 " sha256 TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL)")


MIGRATIONS = [("b001_files", _create)]


def normalize_path(value: Any, field: str = "path") -> str:
    """The canonical form of a private-file path, or a 400 naming what is wrong with it."""
    raw = wire.text(value, field, max_chars=MAX_PATH_CHARS * 2)
    path = re.sub(r"^authority://private/", "", raw.strip().replace("\\", "/"), flags=re.IGNORECASE)
    path = re.sub(r"/+", "/", path).strip("/")
    if not path:
        raise BadRequest(f"'{field}' names no file", field=field)
    if len(path) > MAX_PATH_CHARS:
        raise BadRequest(f"'{field}' is longer than {MAX_PATH_CHARS} characters", field=field)
    try:
        decoded = unquote(path, errors="strict")
    except UnicodeDecodeError:
        decoded = path
    if _DRIVE.match(decoded) or ":/" in decoded:
        raise BadRequest(f"'{field}' must be a relative path inside the private area (no drive or scheme)",
                         field=field)
    segments = decoded.split("/")
    if any(s in (".", "..") for s in segments):
        raise BadRequest(f"'{field}' must not contain '.' or '..' segments", field=field)
    if any(len(s) > MAX_SEGMENT_CHARS for s in path.split("/")):
        raise BadRequest(f"'{field}' has a name longer than {MAX_SEGMENT_CHARS} characters", field=field)
    if any(ord(c) < 32 for c in path):
        raise BadRequest(f"'{field}' contains control characters", field=field)
    return path


def _entry(path: str, size: int, sha256: str, created: float, updated: float) -> dict:
    return {"path": path, "sizeBytes": size, "etag": sha256[:32], "createdAt": wire.iso_time(created),
            "updatedAt": wire.iso_time(updated), "kind": "file"}


def _decode(body: dict) -> bytes:
    content = body.get("content", body.get("data"))
    if not isinstance(content, str):
        raise BadRequest("'content' must be a string", field="content")
    encoding = body.get("encoding") or "utf8"
    if encoding in ("utf8", "utf-8"):
        return content.encode("utf-8", errors="surrogatepass")
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("'content' is not valid base64", field="content") from None
    raise BadRequest("'encoding' must be utf8 or base64", field="encoding")


class PrivateFiles:
    """One extension's private files."""

    def __init__(self, directory: Path):
        self.stores = StoreSet(directory, MIGRATIONS, limit=1, what="private file")

    async def _store(self):
        return await self.stores.get("files")

    async def write(self, body: Any) -> dict:
        body = wire.body_object(body)
        path = normalize_path(body.get("path"))
        data = _decode(body)
        if len(data) > MAX_FILE_BYTES:
            raise PayloadTooLarge(f"the file is {len(data)} bytes; at most {MAX_FILE_BYTES} per file",
                                  field="content")
        digest = hashlib.sha256(data).hexdigest()

        def write(conn):
            old = conn.execute("SELECT size, created_at FROM files WHERE path = ?", (path,)).fetchone()
            total, count = conn.execute("SELECT coalesce(sum(size), 0), count(*) FROM files").fetchone()
            if total - (old["size"] if old else 0) + len(data) > MAX_TOTAL_BYTES:
                raise PayloadTooLarge(f"the private area is full ({MAX_TOTAL_BYTES} bytes per extension); "
                                      "delete files first", field="content")
            if old is None and count >= MAX_FILES:
                raise PayloadTooLarge(f"at most {MAX_FILES} private files per extension", field="path")
            now = time.time()
            created = old["created_at"] if old else now
            conn.execute("INSERT INTO files (path, content, size, sha256, created_at, updated_at)"
                         " VALUES (?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET content = excluded.content,"
                         " size = excluded.size, sha256 = excluded.sha256, updated_at = excluded.updated_at",
                         (path, data, len(data), digest, created, now))
            return _entry(path, len(data), digest, created, now)

        entry = await (await self._store()).write(write)
        return {"entry": entry, "path": path, "size": entry["sizeBytes"], "etag": entry["etag"],
                "updatedAt": entry["updatedAt"]}

    async def _row(self, path: str, content: bool):
        if not self.stores.exists("files"):
            return None
        cols = "path, size, sha256, created_at, updated_at" + (", content" if content else "")
        return await (await self._store()).read(
            lambda conn: conn.execute(f"SELECT {cols} FROM files WHERE path = ?", (path,)).fetchone())

    async def read(self, body: Any) -> dict:
        body = wire.body_object(body)
        path = normalize_path(body.get("path"))
        row = await self._row(path, content=True)
        if row is None:
            raise NotFound(f"no private file {path!r}", field="path")
        data = bytes(row["content"])
        encoding = body.get("encoding") or "utf8"
        if encoding not in ("utf8", "utf-8", "base64"):
            raise BadRequest("'encoding' must be utf8 or base64", field="encoding")
        text = None
        if encoding != "base64":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                pass  # not text: sent as base64 and said so
        entry = _entry(path, row["size"], row["sha256"], row["created_at"], row["updated_at"])
        if text is None:
            return {"entry": entry, "content": base64.b64encode(data).decode(), "encoding": "base64"}
        return {"entry": entry, "content": text, "encoding": "utf8"}

    async def stat(self, body: Any) -> dict:
        path = normalize_path(wire.body_object(body).get("path"))
        row = await self._row(path, content=False)
        if row is None:
            raise NotFound(f"no private file {path!r}", field="path")
        return {"entry": _entry(path, row["size"], row["sha256"], row["created_at"], row["updated_at"]),
                "exists": True}

    async def delete(self, body: Any) -> dict:
        body = wire.body_object(body)
        path = normalize_path(body.get("path"))
        recursive = body.get("recursive") is True
        if not self.stores.exists("files"):
            raise NotFound(f"no private file {path!r}", field="path")

        def delete(conn):
            n = conn.execute("DELETE FROM files WHERE path = ?", (path,)).rowcount
            if recursive:  # a "folder": every file below it (LIKE would treat % and _ in names as patterns)
                prefix = path + "/"
                n += conn.execute("DELETE FROM files WHERE substr(path, 1, ?) = ?", (len(prefix), prefix)).rowcount
            return n

        deleted = await (await self._store()).write(delete)
        if not deleted:
            raise NotFound(f"no private file {path!r}", field="path")
        return {"deleted": True, "path": path, "count": deleted}

    def close(self) -> None:
        self.stores.close()

