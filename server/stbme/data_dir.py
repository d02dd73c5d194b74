"""The data directory: what it holds (the database, the server's lock) and who may read it. It keeps the
chats, the memories and the LLM key in plain text, so the directory is 0700 and every file in it 0600 on
the platforms where modes mean something (not Windows, where a user's profile is private already)."""

from __future__ import annotations

import os
from pathlib import Path

DATABASE = "stbme.sqlite3"
LOCK_NAME = "server.lock"
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
PRIVATE_UMASK = 0o077   # what the `stbme` process creates is private from the start
MODES_APPLY = os.name == "posix"


def private_dir(path: Path | str) -> Path:
    """Create the directory (and its parents) if needed and make it 0700, tightening one that exists."""
    path = Path(path).expanduser()
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if MODES_APPLY:
        os.chmod(path, PRIVATE_DIR)
    return path


def private_file(path: Path | str) -> None:
    """Make an existing file 0600 (a file an earlier version wrote under umask 022)."""
    if MODES_APPLY:
        os.chmod(path, PRIVATE_FILE)


def create_private_file(path: Path | str) -> None:
    """Create an empty file as 0600 if it does not exist (SQLite then creates its -wal and -shm files with
    the database's mode), and tighten it if it does."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, PRIVATE_FILE)
    os.close(fd)
    private_file(path)


def tighten(data_dir: Path | str) -> None:
    """Make the data directory 0700 and everything under it private: directories 0700, files 0600.
    Symbolic links are left alone (what they point at is not ours to change)."""
    root = private_dir(data_dir)
    if not MODES_APPLY:
        return
    for current, dirs, files in os.walk(root):
        for name in dirs:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, PRIVATE_DIR)
        for name in files:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, PRIVATE_FILE)


def set_private_umask() -> None:
    """For the `stbme` process: every file and directory it creates is its owner's only (the database's
    journal, indexes, Authority files, exports)."""
    if MODES_APPLY:
        os.umask(PRIVATE_UMASK)
