"""AuthorityService: the Authority bridge's one object. It keeps the sessions, each extension's private
resources (SQL databases, Trivium databases, private files) under `<data dir>/authority/<extension key>/`,
the jobs (on the sidecar's job queue) and the probe answer, and saves the Trivium caches in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from ..errors import StbmeError
from ..store import Store
from . import sessions as perms
from .blobs import MAX_FILE_BYTES, PrivateFiles
from .jobs import KIND_PREFIX, AuthorityJobs, JobContext, delay
from .sessions import Session, Sessions, extension_key
from .sql import SqlDatabases
from .trivium import MAX_ITEMS, TriviumDatabases

log = logging.getLogger("stbme.authority")
MAX_EXTENSIONS = 32
SAVE_EVERY_S = 30.0
# What this bridge serves, named the way ST-BME's capability probe reads features (lower case).
FEATURES = ["sql", "sql.query", "sql.exec", "sql.transaction", "trivium", "trivium.search",
            "trivium.bulkupsert", "trivium.bulkmutations", "jobs", "jobs.list", "fs.private"]


class TooManyExtensions(StbmeError):
    status = 403


@dataclasses.dataclass
class Extension:
    sql: SqlDatabases
    trivium: TriviumDatabases
    files: PrivateFiles


class AuthorityService:
    """`directory` holds the bridge's files; `store` is the sidecar's store (its job queue);
    `wake_worker` makes the sidecar's worker look for a new job now."""

    def __init__(self, directory: Path, store: Store, wake_worker: Callable[[], None]):
        self.directory = Path(directory)
        self.sessions = Sessions()
        self._extensions: dict[str, Extension] = {}
        self.jobs = AuthorityJobs(store, wake_worker, {
            "delay": delay,
            "trivium.flush": self._job_flush,
            "trivium.reindex": self._job_reindex,
        })

    # -- sessions ------------------------------------------------------------------------------------
    def session(self, token: str | None) -> Session:
        return self.sessions.get(token)

    def open_session(self, body: Any) -> dict:
        session = self.sessions.open(body)
        return {"sessionToken": session.token, "token": session.token, "session": session.to_json()}

    def evaluate_permissions(self, session: Session, body: Any) -> dict:
        return {"results": perms.evaluate(session, body, self.jobs.types)}

    def extension(self, session: Session) -> Extension:
        return self.extension_by_id(session.extension_id)

    def extension_by_id(self, extension_id: str) -> Extension:
        """An extension's private resources, opened on first use."""
        key = extension_key(extension_id)
        ext = self._extensions.get(key)
        if ext is None:
            base = self.directory / key
            if not base.exists() and len(self._known_extensions()) >= MAX_EXTENSIONS:
                raise TooManyExtensions(f"at most {MAX_EXTENSIONS} extensions may keep data here",
                                        field="extensionId")
            ext = self._extensions[key] = Extension(
                SqlDatabases(base / "sql"), TriviumDatabases(base / "trivium"), PrivateFiles(base / "files"))
        return ext

    def _known_extensions(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if p.is_dir()] if self.directory.exists() else []

    # -- probe ---------------------------------------------------------------------------------------------
    def probe(self) -> dict:
        """The capability answer: exactly the features and job types served here."""
        types = self.jobs.types
        return {
            "healthy": True, "name": "stbme-sidecar Authority bridge", "version": __version__,
            "protocol": "server-plugin-v06", "features": FEATURES,
            "supportedJobTypes": types, "jobs": {"supportedTypes": types, "builtinTypes": types},
            "permissions": list(perms.RESOURCES),
            "limits": {"triviumItemsPerCall": MAX_ITEMS, "privateFileBytes": MAX_FILE_BYTES},
            "sessions": len(self.sessions),
        }

    # -- jobs that use the bridge's own data -----------------------------------------------------------------
    async def _job_flush(self, ctx: JobContext) -> dict:
        """`trivium.flush`: write the extension's changed Trivium indexes to disk now."""
        return {"saved": await self.extension_by_id(ctx.extension_id).trivium.save()}

    async def _job_reindex(self, ctx: JobContext) -> dict:
        """`trivium.reindex`: rebuild a Trivium database's HNSW and BM25 indexes from its stored items."""
        ext = self.extension_by_id(ctx.extension_id)
        body = {"database": ctx.input.get("database")}
        if not ext.trivium.exists(body):
            return {"dims": [], "indexed": 0, "texts": 0}
        _, db = await ext.trivium.get(body)
        return await db.caches.rebuild()

    @property
    def job_kinds(self) -> list[str]:
        """The job-queue kinds this bridge runs (`authority.<type>`), for the worker to route to run_job."""
        return [KIND_PREFIX + t for t in self.jobs.types]

    # -- lifecycle -----------------------------------------------------------------------------------------------
    async def run_saver(self) -> None:
        """Save changed Trivium indexes every SAVE_EVERY_S (a background task of the composition root)."""
        while True:
            await asyncio.sleep(SAVE_EVERY_S)
            await self.save()

    async def save(self) -> int:
        """Write every changed Trivium cache; a failure is logged and retried at the next save (the caches
        are rebuilt from SQLite anyway when their files are missing or stale)."""
        saved = 0
        for ext in list(self._extensions.values()):
            try:
                saved += await ext.trivium.save()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("saving Trivium indexes failed")
        return saved

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.save()
        for ext in self._extensions.values():
            ext.sql.close()
            ext.trivium.close()
            ext.files.close()
        self._extensions.clear()

    async def run_job(self, job: dict) -> None:
        """Run one of the bridge's jobs, claimed by the sidecar's worker (kind `authority.<type>`)."""
        await self.jobs.run(job)
