"""Who owns a data directory: `stbme serve` writes a lock file (pid, address, port) into it while it runs;
other commands read it to go through that server instead of opening the database beside it (one writer:
the server's in-memory indexes would not see a second writer's changes).

A lock file counts only while its process is alive and the port answers as a sidecar. A server killed
with -9 leaves its file behind; the next command finds the process gone and ignores (serve: replaces) it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

LOCK_NAME = "server.lock"
PROBE_TIMEOUT_S = 3.0
STARTING_GRACE_S = 120.0   # a server this young may still be loading its model before it listens


@dataclasses.dataclass
class ServerLock:
    pid: int
    host: str
    port: int
    started_at: float
    token_required: bool = False

    @property
    def url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def describe(self) -> str:
        return f"the sidecar server (pid {self.pid}) at {self.url}"


def lock_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / LOCK_NAME


def read_lock(data_dir: Path) -> ServerLock | None:
    """The lock file's contents, or None when there is none (or it is unreadable: a torn write)."""
    try:
        raw = json.loads(lock_path(data_dir).read_text(encoding="utf-8"))
        return ServerLock(int(raw["pid"]), str(raw["host"]), int(raw["port"]), float(raw["started_at"]),
                          bool(raw.get("token_required")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs (never signals it: on Windows os.kill would end it)."""
    if pid <= 0:
        return False
    if sys.platform == "win32":
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        ok = kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return bool(ok) and code.value == 259  # STILL_ACTIVE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True


def probe(lock: ServerLock, database: Path, token: str | None) -> bool | None:
    """Ask the lock's port for /health. True: a sidecar on this database answers; False: something else
    answers (another sidecar, another program); None: nothing answers."""
    request = urllib.request.Request(lock.url + "/health")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            health = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if not isinstance(health, dict) or "version" not in health:
        return False
    path = (health.get("store") or {}).get("path")
    if path is None:  # a server with a token hides its path from a request without it
        return True
    with contextlib.suppress(OSError):
        return Path(path).resolve() == database.resolve()
    return False


class Owned(Exception):
    """The data directory is owned by a server that cannot be used (it does not answer as expected)."""


def find_owner(data_dir: Path, database: Path, token: str | None, *, wait_s: float = 15.0) -> ServerLock | None:
    """The live server owning the data directory, or None when nobody does. Raises Owned when a process
    holds the lock but its port does not answer as this directory's sidecar."""
    lock = read_lock(data_dir)
    if lock is None or not pid_alive(lock.pid):
        return None
    deadline = time.monotonic() + (wait_s if time.time() - lock.started_at < STARTING_GRACE_S else 0)
    while True:
        answer = probe(lock, database, token)
        if answer:
            return lock
        if answer is False or time.monotonic() >= deadline:
            break
        time.sleep(0.5)  # the server is starting (loading its model before it listens)
    raise Owned(f"{lock_path(data_dir)} says {lock.describe()} owns this data directory, and that process "
                f"runs, but {lock.url} does not answer as its sidecar. Wait for it to start, or stop it; if no "
                "sidecar is running, delete that file.")


def claim(data_dir: Path, database: Path, host: str, port: int, token_required: bool) -> ServerLock:
    """Write the lock for `stbme serve`, unless a live server already owns the directory (Owned)."""
    owner = find_owner(data_dir, database, None, wait_s=0)
    if owner is not None:
        raise Owned(f"{owner.describe()} already serves this data directory; stop it first or use another "
                    "--data-dir")
    lock = ServerLock(os.getpid(), host, port, time.time(), token_required)
    path = lock_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{LOCK_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(lock)), encoding="utf-8")
    os.replace(tmp, path)
    return lock


def release(data_dir: Path, lock: ServerLock) -> None:
    """Remove the lock file if it is still this server's."""
    current = read_lock(data_dir)
    if current is not None and current.pid == lock.pid and current.started_at == lock.started_at:
        with contextlib.suppress(OSError):
            lock_path(data_dir).unlink()
