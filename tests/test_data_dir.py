"""The data directory is private (issue 20 item 6): 0700, every file in it 0600, whatever the umask, and
what an older version left readable is tightened when it is opened."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEADLINE_S, serve_process, st_chat_file, st_message

from stbme.data_dir import LOCK_NAME, tighten

POSIX_MODES = pytest.mark.skipif(os.name != "posix", reason="file modes mean little on Windows")


def modes(root: Path) -> dict[str, int]:
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


@POSIX_MODES
def test_tighten_makes_an_old_directory_private_and_leaves_links_alone(tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside.txt"
    (data / "indexes").mkdir(parents=True)
    for path, mode in ((data, 0o755), (data / "indexes", 0o775)):
        os.chmod(path, mode)
    (data / "stbme.sqlite3").write_bytes(b"")
    os.chmod(data / "stbme.sqlite3", 0o644)
    outside.write_text("not ours", encoding="utf-8")
    os.chmod(outside, 0o644)
    (data / "link").symlink_to(outside)
    tighten(data)
    assert modes(data) == {".": 0o700, "indexes": 0o700, "stbme.sqlite3": 0o600,
                           "link": stat.S_IMODE((data / "link").lstat().st_mode)}
    assert stat.S_IMODE(outside.stat().st_mode) == 0o644


@POSIX_MODES
@pytest.mark.e2e
def test_the_data_directory_is_private_under_umask_022(tmp_path):
    data = tmp_path / "data"
    (data / "indexes").mkdir(parents=True)
    os.chmod(data, 0o755)
    os.chmod(data / "indexes", 0o755)
    old = data / "indexes" / "left-by-an-older-version.json"
    old.write_text("{}", encoding="utf-8")
    os.chmod(old, 0o644)
    chat = st_chat_file(tmp_path / "Elena - 5.jsonl", [st_message(True, "Where is the key?"),
                                                   st_message(False, "Under the oak by the lighthouse.")])
    previous = os.umask(0o022)
    try:
        with serve_process(data):
            env = {**os.environ, "STBME_TOKEN": ""}
            for args in (["ingest", str(chat)], ["recall", "Elena - 5", "key"],
                         ["export", "Elena - 5", "-o", str(tmp_path / "export.json")]):
                proc = subprocess.run([sys.executable, "-m", "stbme", *args, "--data-dir", str(data)], env=env,
                                      capture_output=True, text=True, timeout=DEADLINE_S * 5)
                assert proc.returncode == 0, proc.stderr
            during = modes(data)
        after = modes(data)
    finally:
        os.umask(previous)
    assert {"stbme.sqlite3", "stbme.sqlite3-wal", "stbme.sqlite3-shm", LOCK_NAME} <= set(during), during
    assert any(name.startswith("indexes/") and name != "indexes/left-by-an-older-version.json" for name in after), after
    for found in (during, after):
        for name, mode in found.items():
            is_dir = name == "." or (data / name).is_dir()
            assert mode == (0o700 if is_dir else 0o600), (name, oct(mode))
    assert stat.S_IMODE((tmp_path / "export.json").stat().st_mode) == 0o600
