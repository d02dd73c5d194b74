"""One writer per data directory: while `stbme serve` owns it (its lock file names a live process that answers
on its port), CLI commands go through the server's API; otherwise they open the directory themselves. A
mistyped --data-dir never creates an empty database. `stbme settings` shows and sets current values."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import DEADLINE_S, StbmeProcess, free_port

from stbme.cli import main
from stbme.cli.owner import LOCK_NAME, Owned, ServerLock, claim, find_owner, pid_alive, read_lock, release

FIXTURES = Path(__file__).parent / "fixtures"
SINGLE = FIXTURES / "st_chats" / "chats" / "Elena" / "Elena - 2024-05-12@14h30m22s.jsonl"
CHAT_ID = "Elena - 2024-05-12@14h30m22s"


def run(*args, env: dict | None = None, expect: int = 0):
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="stbme", env=env)
    assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
    assert "Traceback" not in result.output
    return result


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lock(data_dir: Path, pid: int, port: int, age_s: float = 3600) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": "127.0.0.1", "port": port,
                                                  "started_at": time.time() - age_s}), encoding="utf-8")


# -- the lock ---------------------------------------------------------------------------------------------
def test_claim_and_release(tmp_path):
    lock = claim(tmp_path, "127.0.0.1", 8765, False)
    assert read_lock(tmp_path) == lock and lock.pid == os.getpid() and pid_alive(lock.pid)
    other = ServerLock(lock.pid + 1, "127.0.0.1", 1, time.time())
    release(tmp_path, other)                      # not ours: stays
    assert (tmp_path / LOCK_NAME).exists()
    release(tmp_path, lock)
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_left_by_a_dead_server_is_ignored(tmp_path):
    write_lock(tmp_path, dead_pid(), free_port())
    assert not pid_alive(read_lock(tmp_path).pid)
    assert find_owner(tmp_path) is None
    assert claim(tmp_path, "127.0.0.1", 9, False).pid == os.getpid()


def test_a_live_process_that_does_not_answer_is_refused_with_advice(tmp_path):
    write_lock(tmp_path, os.getpid(), free_port())   # alive, but nothing listens on the port
    with pytest.raises(Owned) as exc:
        find_owner(tmp_path)
    assert "does not answer" in str(exc.value) and LOCK_NAME in str(exc.value)
    result = run("stats", "--data-dir", tmp_path, expect=1)
    assert "does not answer" in result.stderr and "delete that file" in result.stderr


@pytest.mark.parametrize("lock", ["", "{not json", '{"pid": "x"}', "[]"])
def test_a_torn_lock_file_counts_as_none(tmp_path, lock):
    (tmp_path / LOCK_NAME).write_text(lock, encoding="utf-8")
    assert read_lock(tmp_path) is None and find_owner(tmp_path) is None


# -- a mistyped --data-dir ------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    ("stats",), ("recall", "c", "q"), ("export", "c"), ("reindex",), ("dna", "list", "c"),
    ("dna", "remember", "c", "x"), ("settings", "recall.budget_tokens", "600"),
])
def test_a_missing_data_dir_is_an_error_and_is_not_created(tmp_path, command):
    typo = tmp_path / "typo"
    result = run(*command, "--data-dir", typo, expect=1)
    assert f"no sidecar data in {typo}" in result.stderr
    assert not typo.exists()


def test_settings_without_a_data_dir_shows_the_defaults(tmp_path):
    result = run("settings", "--data-dir", tmp_path / "none")
    assert "recall.budget_tokens = 800" in result.stdout and "these are the defaults" in result.stderr
    assert not (tmp_path / "none").exists()


# -- settings: current values, set one ------------------------------------------------------------------------
def test_settings_show_and_set_current_values(tmp_path):
    data = tmp_path / "data"
    run("settings", "recall.budget_tokens", "600", "--data-dir", data, expect=1)   # no database yet
    result = run("settings", "recall.budget_tokens", "600", "--data-dir", data, "--create")
    assert "recall.budget_tokens = 600   (default 800)" in result.stdout
    out = run("settings", "--data-dir", data).stdout
    assert "recall.budget_tokens = 600   (default 800)" in out and "recall.max_memories = 12\n" in out
    one = run("settings", "recall.budget_tokens", "--data-dir", data).stdout
    assert one.startswith("recall.budget_tokens = 600") and "Token budget" in one and "Per chat." in one
    assert json.loads(run("settings", "--json", "--data-dir", data).stdout)["recall.budget_tokens"] == 600
    # a text value and a list value
    run("settings", "llm.model", "qwen2.5", "--data-dir", data)
    run("settings", "server.extra_cors_origins", '["http://192.168.1.10:8000"]', "--data-dir", data)
    values = json.loads(run("settings", "--json", "--data-dir", data).stdout)
    assert values["llm.model"] == "qwen2.5" and values["server.extra_cors_origins"] == ["http://192.168.1.10:8000"]
    assert values["server.cors_origins"] == ["http://127.0.0.1:8000", "http://localhost:8000"]   # kept


def test_settings_per_chat(tmp_path):
    data = tmp_path / "data"
    run("settings", "recall.budget_tokens", "500", "--chat", "c1", "--data-dir", data, "--create")
    assert json.loads(run("settings", "recall.budget_tokens", "--chat", "c1", "--json", "--data-dir", data).stdout) \
        == {"recall.budget_tokens": 500}
    assert "recall.budget_tokens = 800\n" in run("settings", "--data-dir", data).stdout
    run("settings", "recall.budget_tokens", "null", "--chat", "c1", "--data-dir", data)
    assert "recall.budget_tokens = 800" in run("settings", "recall.budget_tokens", "--chat", "c1",
                                               "--data-dir", data).stdout
    result = run("settings", "llm.mode", "openai", "--chat", "c1", "--data-dir", data, expect=1)
    assert "cannot be set per chat" in result.stderr


@pytest.mark.parametrize("args, words", [
    (("recall.budget", "600"), "unknown setting 'recall.budget'; did you mean recall.budget_tokens"),
    (("recall.budget_tokens", "lots"), "recall.budget_tokens"),
    (("recall.budget_tokens", "5"), "below the minimum"),
])
def test_settings_refuse_bad_keys_and_values_and_save_nothing(tmp_path, args, words):
    data = tmp_path / "data"
    run("settings", "recall.max_memories", "10", "--data-dir", data, "--create")
    result = run("settings", *args, "--data-dir", data, expect=1)
    assert words in result.stderr
    assert json.loads(run("settings", "--json", "--data-dir", data).stdout)["recall.budget_tokens"] == 800


# -- with a running server -------------------------------------------------------------------------------------
class Server:
    """`stbme serve` as a subprocess (the real local model)."""

    def __init__(self, data_dir: Path, token: str | None = None):
        self.data_dir, self.token = data_dir, token
        env = {k: v for k, v in os.environ.items() if k != "STBME_TOKEN"}
        self.process = StbmeProcess(data_dir, args=["--token", token] if token else [], env=env)
        self.proc = self.process.proc
        self.url = self.process.wait_ready(DEADLINE_S)
        self.port = int(self.url.rsplit(":", 1)[1])

    def get(self, path: str) -> dict:
        request = urllib.request.Request(self.url + path)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self) -> None:
        self.process.stop(DEADLINE_S)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("served") / "data")
    yield srv
    srv.stop()


@pytest.mark.e2e
def test_commands_go_through_the_running_server(server, tmp_path):
    assert read_lock(server.data_dir).port == server.port and read_lock(server.data_dir).pid == server.proc.pid
    result = run("ingest", SINGLE, "--data-dir", server.data_dir)
    assert f"{CHAT_ID}: 12 messages (chat); 12 processed (100%)" in result.stderr
    # the server did the work: its own status (not a copy opened beside it) shows the chat
    status = server.get(f"/v1/chats/{urllib.request.quote(CHAT_ID, safe='')}/status")
    assert status["progress"]["messages"]["done"] == 12 and status["unembedded"] == 0

    stats = json.loads(run("stats", "--json", "--data-dir", server.data_dir).stdout)
    assert [c["chat_id"] for c in stats["chats"]] == [CHAT_ID]

    # an import lands in the server's loaded indexes at once (before: found only after a restart)
    run("recall", CHAT_ID, "silver key", "--data-dir", server.data_dir)          # loads the chat's index
    memory = {"format": "stbme-sidecar", "version": 1, "nodes": [
        {"type": "event", "fields": {"summary": "Mira hid the brass compass in the bell tower."}}]}
    path = tmp_path / "compass.json"
    path.write_text(json.dumps(memory), encoding="utf-8")
    run("import", CHAT_ID, path, "--data-dir", server.data_dir)
    assert "brass compass" in run("recall", CHAT_ID, "where is the brass compass?", "--data-dir",
                                  server.data_dir).stdout
    status = server.get(f"/v1/chats/{urllib.request.quote(CHAT_ID, safe='')}/status")
    assert status["index"]["count"] == status["nodes"]

    # settings through the server: it has the new value at once
    run("settings", "recall.budget_tokens", "640", "--data-dir", server.data_dir)
    assert server.get("/v1/settings")["settings"]["recall.budget_tokens"] == 640
    assert "recall.budget_tokens = 640" in run("settings", "recall.budget_tokens", "--data-dir",
                                               server.data_dir).stdout

    # DNA commands too, a manual link included
    node_id = run("dna", "remember", CHAT_ID, "Elena hates thunder", "--data-dir", server.data_dir).stdout.strip()
    other = run("dna", "remember", CHAT_ID, "Thunder woke the gulls", "--data-dir", server.data_dir).stdout.strip()
    assert run("dna", "link", CHAT_ID, node_id, other, "--data-dir", server.data_dir).stdout.startswith("e_")
    listed = json.loads(run("dna", "list", CHAT_ID, "--json", "--data-dir", server.data_dir).stdout)
    assert {node_id, other} <= {n["id"] for n in listed["nodes"]}
    exported = json.loads(run("export", CHAT_ID, "--data-dir", server.data_dir).stdout)
    assert len(exported["messages"]) == 12
    result = run("reindex", CHAT_ID, "--data-dir", server.data_dir)
    assert "memories indexed" in result.stderr
    lines = run("dna", "events", "--chat", CHAT_ID, "--jsonl", "--data-dir", server.data_dir).stdout.splitlines()
    assert lines and all(json.loads(line)["chat_id"] == CHAT_ID for line in lines)
    run("dna", "export-assets", tmp_path / "assets", "--data-dir", server.data_dir)
    assert (tmp_path / "assets" / "genes.json").exists() and (tmp_path / "assets" / "events.jsonl").exists()
    result = run("dna", "import-assets", tmp_path / "assets", "--data-dir", server.data_dir)
    assert "genes: 0 added" in result.stderr and "already there" in result.stderr

    # a second server on the same directory is refused
    result = run("serve", "--port", free_port(), "--data-dir", server.data_dir, expect=1)
    assert f"(pid {server.proc.pid})" in result.stderr and "already serves" in result.stderr


@pytest.mark.e2e
def test_after_the_server_stops_commands_open_the_directory(tmp_path):
    data = tmp_path / "data"
    srv = Server(data)
    run("settings", "recall.budget_tokens", "700", "--data-dir", data)
    srv.stop()
    assert not (data / LOCK_NAME).exists()                       # removed on a clean stop
    assert "recall.budget_tokens = 700" in run("settings", "recall.budget_tokens", "--data-dir", data).stdout


@pytest.mark.e2e
def test_a_server_with_a_token_needs_it(tmp_path):
    data = tmp_path / "data"
    srv = Server(data, token="s3cret-token")
    try:
        result = run("stats", "--data-dir", data, env={"STBME_TOKEN": ""}, expect=1)
        assert "STBME_TOKEN" in result.stderr and "requires its API token" in result.stderr
        result = run("stats", "--json", "--data-dir", data, env={"STBME_TOKEN": "s3cret-token"})
        assert json.loads(result.stdout)["chats"] == []
    finally:
        srv.stop()


@pytest.mark.e2e
def test_a_killed_server_leaves_a_lock_that_does_not_block(tmp_path):
    data = tmp_path / "data"
    srv = Server(data)
    srv.process.stop(DEADLINE_S, sig=signal.SIGKILL)
    assert (data / LOCK_NAME).exists()
    assert "0 chats" in run("stats", "--data-dir", data).stdout   # opened here: the lock's process is gone
