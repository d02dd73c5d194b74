"""Authority sessions and permissions.

A client calls `session/init` with its extension id and the permissions it declares, and gets a token it
sends as `x-authority-session-token`. The token names the extension whose private data a request may use;
it is checked in addition to the sidecar's own API token, never instead of it. ST-BME opens a session per
client object (dozens per page), so tokens are cheap and expire by idle time and count, oldest first.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections import OrderedDict
from typing import Any

from ..errors import BadRequest, StbmeError, Unauthorized
from ..hashing import chat_file_key
from . import wire

SESSION_HEADER = "x-authority-session-token"
SESSION_IDLE_S = 24 * 3600
MAX_SESSIONS = 4096
MAX_PERMISSION_REQUESTS = 64

# The resources this bridge serves: a permission is granted when the session declared it and it is here.
SQL, TRIVIUM, FILES, JOBS = "sql.private", "trivium.private", "fs.private", "jobs.background"
RESOURCES = (SQL, TRIVIUM, FILES, JOBS)


class PermissionDenied(StbmeError):
    status = 403


def extension_key(extension_id: str) -> str:
    """A file-name-safe key for an extension (its id is a free string)."""
    return chat_file_key(extension_id)


@dataclasses.dataclass
class Session:
    token: str
    extension_id: str
    display_name: str
    version: str
    declared: frozenset[str]
    created_at: float
    last_seen: float

    @property
    def extension_key(self) -> str:
        return extension_key(self.extension_id)

    def require(self, resource: str) -> None:
        if resource not in self.declared:
            raise PermissionDenied(f"permission {resource!r} was not declared by this extension at session/init "
                                   "(declaredPermissions)", field="declaredPermissions")

    def to_json(self) -> dict:
        return {"extensionId": self.extension_id, "displayName": self.display_name, "version": self.version,
                "declaredPermissions": sorted(self.declared), "createdAt": wire.iso_time(self.created_at),
                "expiresAt": wire.iso_time(self.last_seen + SESSION_IDLE_S)}


def flatten_permissions(declared: Any, prefix: str = "") -> set[str]:
    """{"sql": {"private": true}} -> {"sql.private"}; a list of names is taken as it is."""
    if isinstance(declared, list):
        return {p for p in declared if isinstance(p, str)}
    out: set[str] = set()
    if isinstance(declared, dict):
        for key, value in declared.items():
            path = f"{prefix}{key}"
            if value is True:
                out.add(path)
            elif isinstance(value, dict):
                out |= flatten_permissions(value, path + ".")
    return out


class Sessions:
    def __init__(self, idle_s: float = SESSION_IDLE_S, max_sessions: int = MAX_SESSIONS):
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, body: Any) -> Session:
        """A new session for the extension named in the session/init body."""
        body = wire.body_object(body)
        extension_id = wire.text(body.get("extensionId"), "extensionId", max_chars=128)
        if any(ord(c) < 32 for c in extension_id):
            raise BadRequest("'extensionId' contains control characters", field="extensionId")
        declared = body.get("declaredPermissions")
        if declared is not None and not isinstance(declared, (dict, list)):
            raise BadRequest("'declaredPermissions' must be an object like {\"sql\": {\"private\": true}}",
                             field="declaredPermissions")
        now = time.time()
        session = Session(token=secrets.token_urlsafe(32), extension_id=extension_id,
                          display_name=str(body.get("displayName") or extension_id)[:128],
                          version=str(body.get("version") or "")[:64],
                          declared=frozenset(flatten_permissions(declared)), created_at=now, last_seen=now)
        self._expire(now)
        while len(self._sessions) >= self.max_sessions:
            self._sessions.popitem(last=False)
        self._sessions[session.token] = session
        return session

    def get(self, token: str | None) -> Session:
        """The live session of a token; 401 (the client then opens a new one and retries) otherwise."""
        if not token:
            raise Unauthorized(f"Authority session token missing: call session/init and send it as {SESSION_HEADER}")
        now = time.time()
        session = self._sessions.get(token)
        if session is None or now - session.last_seen > self.idle_s:
            self._sessions.pop(token, None)
            raise Unauthorized("Authority session token invalid or expired: call session/init again")
        session.last_seen = now
        self._sessions.move_to_end(token)
        return session

    def _expire(self, now: float) -> None:
        while self._sessions:
            token, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_seen <= self.idle_s:
                break
            del self._sessions[token]


def evaluate(session: Session, body: Any, job_types: list[str]) -> list[dict]:
    """Decide each {resource, target} request: granted when it is served here and was declared."""
    body = wire.body_object(body)
    requests = wire.array(body.get("requests", []), "requests", max_items=MAX_PERMISSION_REQUESTS)
    results = []
    for i, request in enumerate(requests):
        if not isinstance(request, dict):
            raise BadRequest(f"'requests[{i}]' must be an object", field=f"requests[{i}]")
        resource = wire.text(request.get("resource"), f"requests[{i}].resource", max_chars=128)
        target = request.get("target")
        if resource not in RESOURCES:
            decision, reason = "denied", f"{resource} is not served by this Authority bridge"
        elif resource not in session.declared:
            decision, reason = "denied", f"{resource} was not declared at session/init"
        elif resource == JOBS and target not in (None, "") and target not in job_types:
            decision, reason = "denied", f"job type {target!r} is not supported here"
        else:
            decision, reason = "granted", "declared and served"
        results.append({"resource": resource, "target": target, "decision": decision, "reason": reason})
    return results

