"""Who owns a data directory: `stbme serve` writes a lock file (pid, address, port and a secret) into it while
it runs; other commands read it to go through that server instead of opening the database beside it (one
writer: the server's in-memory indexes would not see a second writer's changes).

A lock counts only while its process is alive and the program on its port proves it knows the lock's
secret (server_identity.py): the file is 0600, so only its owner can read the secret, and a program that
took the port after a crash learns neither the token nor any chat. A server killed with -9 leaves its file
behind; the next command finds the process gone and ignores (serve: replaces) it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import quote

from ..data_dir import LOCK_NAME, PRIVATE_FILE, private_dir

PROBE_TIMEOUT_S = 3.0
STARTING_GRACE_S = 120.0   # a server this young may still be opening its data directory before it answers


@dataclasses.dataclass
class ServerLock:
    pid: int
    host: str
    port: int
    started_at: float
    token_required: bool = False
    secret: str = ""   # proves the server (empty: a lock of an older version, which cannot prove itself)

    @property
    def url(self) -> str:
        host = self.connect_host
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def connect_host(self) -> str:
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)

    def describe(self) -> str:
        return f"the sidecar server (pid {self.pid}) at {self.url}"


def lock_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / LOCK_NAME


def read_lock(data_dir: Path) -> ServerLock | None:
    """The lock file's contents, or None when there is none (or it is unreadable: a torn write)."""
    try:
        raw = json.loads(lock_path(data_dir).read_text(encoding="utf-8"))
        return ServerLock(int(raw["pid"]), str(raw["host"]), int(raw["port"]), float(raw["started_at"]),
                          bool(raw.get("token_required")), str(raw.get("secret") or ""))
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


def prove(lock: ServerLock) -> bool | None:
    """Challenge the lock's port (no token, nothing else sent). True: it knows the lock's secret; False:
    something answers that does not (another program, another sidecar, an older version); None: nothing
    answers."""
    import http.client  # noqa: PLC0415 - only when a lock file is there

    from ..server_identity import new_nonce, proof_matches  # noqa: PLC0415

    nonce = new_nonce()
    conn = http.client.HTTPConnection(lock.connect_host, lock.port, timeout=PROBE_TIMEOUT_S)
    try:
        conn.request("GET", f"/v1/identity?nonce={quote(nonce)}")
        response = conn.getresponse()
        body = response.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    try:
        answer = json.loads(body)
    except ValueError:
        return False
    return bool(lock.secret) and isinstance(answer, dict) and proof_matches(
        lock.secret, nonce, lock.port, answer.get("proof"))


class Owned(Exception):
    """The data directory is owned by a server that cannot be used (it does not answer, or not as itself)."""


def find_owner(data_dir: Path, *, wait_s: float = 15.0) -> ServerLock | None:
    """The live server owning the data directory, proven, or None when nobody does. Raises Owned when a
    process holds the lock but its port does not prove it is this directory's sidecar."""
    lock = read_lock(data_dir)
    if lock is None or not pid_alive(lock.pid):
        return None
    deadline = time.monotonic() + (wait_s if time.time() - lock.started_at < STARTING_GRACE_S else 0)
    while True:
        answer = prove(lock)
        if answer:
            return lock
        if answer is False or time.monotonic() >= deadline:
            break
        time.sleep(0.5)  # the server is starting (opening the data directory before it answers)
    if answer is False:
        why = ("was started by an older version that cannot prove it is the sidecar: stop it and start it again"
               if not lock.secret else
               "something answers there that cannot prove it is that sidecar (nothing was sent to it): stop "
               "the program on that port")
        raise Owned(f"{lock_path(data_dir)} says {lock.describe()} owns this data directory, and that process "
                    f"runs, but {lock.url} does not answer as its sidecar: the server {why}. If no sidecar is "
                    "running, delete that file.")
    raise Owned(f"{lock_path(data_dir)} says {lock.describe()} owns this data directory, and that process "
                f"runs, but {lock.url} does not answer as its sidecar. Wait for it to start, or stop it; if no "
                "sidecar is running, delete that file.")


def claim(data_dir: Path, host: str, port: int, token_required: bool) -> ServerLock:
    """Write the lock for `stbme serve`, unless a live server already owns the directory (Owned). The file
    is written 0600 whatever the umask: its secret is what proves the server."""
    from ..server_identity import new_secret  # noqa: PLC0415

    owner = find_owner(data_dir, wait_s=0)
    if owner is not None:
        raise Owned(f"{owner.describe()} already serves this data directory; stop it first or use another "
                    "--data-dir")
    lock = ServerLock(os.getpid(), host, port, time.time(), token_required, new_secret())
    path = lock_path(data_dir)
    private_dir(path.parent)
    tmp = path.with_name(f"{LOCK_NAME}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(dataclasses.asdict(lock)))
    os.replace(tmp, path)
    return lock


def release(data_dir: Path, lock: ServerLock) -> None:
    """Remove the lock file if it is still this server's."""
    current = read_lock(data_dir)
    if current is not None and current.pid == lock.pid and current.started_at == lock.started_at:
        with contextlib.suppress(OSError):
            lock_path(data_dir).unlink()
