"""The CLI is safe (issue 20 items 4, 5, 8): a stored setting that is not JSON stops no command and can be
repaired from the CLI; the CLI proves which server it talks to before it sends a token or a chat; a server
answering in unexpected shapes gets one line, not a traceback; one odd message does not refuse a whole
chat. (The data directory's modes: test_data_dir.py; the server's side of item 4: test_bad_input.py.)"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import sqlite3
import stat
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import HashEmbedder, one_line_error, serve_process, st_chat_file, st_message
from test_cli import run

from stbme.data_dir import LOCK_NAME
from stbme.server_identity import proof
from stbme.services import Services

def empty_data_dir(path: Path) -> Path:
    asyncio.run(Services.open(path, embedder=HashEmbedder()).close())
    return path


# -- item 4: a stored setting that is not JSON ----------------------------------------------------------------
def store_raw_settings(data: Path, rows: list[tuple[str, str, str]]) -> None:
    with sqlite3.connect(data / "stbme.sqlite3") as conn:
        conn.executemany("INSERT OR REPLACE INTO settings (scope, name, value) VALUES (?,?,?)", rows)


BROKEN = [("", "recall.budget_tokens", "800x"), ("c1", "recall.max_memories", "{oops")]


def test_a_setting_that_is_not_json_stops_neither_settings_nor_stats_and_can_be_repaired(tmp_path):
    data = empty_data_dir(tmp_path / "data")
    store_raw_settings(data, BROKEN)
    result = run("settings", "--data-dir", data)
    assert "recall.budget_tokens = 800\n" in result.stdout                  # the default runs
    assert "warning: setting recall.budget_tokens: the stored value '800x' is not JSON" in result.stderr
    assert "warning: setting recall.max_memories: the stored value for chat 'c1' '{oops' is not JSON" in result.stderr
    assert "0 chats" in run("stats", "--data-dir", data).stdout
    assert "recall.budget_tokens" in run("stats", "--data-dir", data).stderr
    # repaired by saving a value, globally and for the chat
    assert run("settings", "recall.budget_tokens", "900", "--data-dir", data).stdout.startswith(
        "recall.budget_tokens = 900")
    run("settings", "recall.max_memories", "null", "--chat", "c1", "--data-dir", data)
    result = run("settings", "--data-dir", data)
    assert "recall.budget_tokens = 900" in result.stdout and "warning" not in result.stderr


@pytest.mark.e2e
def test_a_setting_that_is_not_json_does_not_stop_the_server(tmp_path):
    data = empty_data_dir(tmp_path / "data")
    store_raw_settings(data, BROKEN)
    with serve_process(data) as base:
        with urllib.request.urlopen(base + "/health", timeout=30) as resp:
            health = json.loads(resp.read())
        assert {d["field"] for d in health["settings_degraded"]} == {"recall.budget_tokens", "recall.max_memories"}
        result = run("settings", "recall.budget_tokens", "--data-dir", data)
        assert result.stdout.startswith("recall.budget_tokens = 800") and "not JSON" in result.stderr


# -- item 5: the lock file names a server; the CLI proves it is that one ------------------------------------------
class Impostor(http.server.ThreadingHTTPServer):
    """A program on the lock's port after a crash: it answers like a sidecar and records what it is sent.
    `secret`: it knows the lock's secret (a real sidecar of another version, answering in odd shapes)."""

    def __init__(self, secret: str | None = None, answers: dict | None = None):
        self.requests: list[dict] = []
        self.secret, self.answers = secret, answers or {}
        super().__init__(("127.0.0.1", 0), ImpostorHandler)
        self.port = self.server_address[1]
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self):
        self.shutdown()
        self.server_close()


class ImpostorHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        server: Impostor = self.server
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        server.requests.append({"method": self.command, "path": path, "headers": dict(self.headers), "body": body})
        if path == "/v1/identity":
            nonce = urllib.parse.parse_qs(url.query).get("nonce", [""])[0]
            answer = {"proof": proof(server.secret, nonce, server.port) if server.secret else "0" * 64,
                      "version": "0.1.0"}
        elif path in server.answers:
            answer = server.answers[path]
        else:   # what a sidecar's /health looks like, for anything else
            answer = {"ok": True, "version": "0.1.0", "store": {"path": None}, "status": "synced"}
        data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = _answer


def write_lock(data: Path, port: int, secret: str) -> None:
    """The lock a server left: its pid is alive (this process), its port taken by someone else."""
    (data / LOCK_NAME).write_text(json.dumps({"pid": os.getpid(), "host": "127.0.0.1", "port": port,
                                              "started_at": time.time() - 3600, "token_required": False,
                                              "secret": secret}), encoding="utf-8")


@pytest.mark.parametrize("command", [
    ("stats",), ("recall", "Elena - 1", "the key"), ("settings", "recall.budget_tokens", "600"), ("ingest", "CHAT"),
])
def test_an_impostor_on_the_locks_port_gets_neither_the_token_nor_the_chat(tmp_path, command):
    data = empty_data_dir(tmp_path / "data")
    chat = st_chat_file(tmp_path / "Elena - 1.jsonl", [st_message(True, "The secret password is tangerine-42."),
                                                   st_message(False, "I will keep it.")])
    impostor = Impostor()
    try:
        write_lock(data, impostor.port, "the real server's secret")
        args = [chat if a == "CHAT" else a for a in command]
        result = run(*args, "--data-dir", data, env={"STBME_TOKEN": "the-users-token"}, expect=1)
        assert "cannot prove it is that sidecar" in one_line_error(result) and "nothing was sent" in result.stderr
    finally:
        impostor.close()
    assert [r["path"] for r in impostor.requests] == ["/v1/identity"]   # the challenge, nothing else
    for r in impostor.requests:
        assert "Authorization" not in r["headers"] and not r["body"]
        assert "the-users-token" not in json.dumps(r["headers"])


def test_a_lock_without_a_secret_is_not_trusted(tmp_path):
    data = empty_data_dir(tmp_path / "data")
    impostor = Impostor()
    try:
        write_lock(data, impostor.port, "")
        result = run("stats", "--data-dir", data, env={"STBME_TOKEN": "t"}, expect=1)
        assert "older version" in one_line_error(result)
    finally:
        impostor.close()
    assert all("Authorization" not in r["headers"] for r in impostor.requests)


def test_the_proof_is_bound_to_the_port():
    assert proof("s", "n" * 16, 8765) != proof("s", "n" * 16, 8766) != proof("t", "n" * 16, 8766)


@pytest.mark.e2e
def test_the_real_server_proves_itself_and_its_lock_is_private(tmp_path):
    data = tmp_path / "data"
    with serve_process(data):
        lock = json.loads((data / LOCK_NAME).read_text(encoding="utf-8"))
        assert len(lock["secret"]) == 64
        if os.name == "posix":
            assert stat.S_IMODE((data / LOCK_NAME).stat().st_mode) == 0o600
        assert "0 chats" in run("stats", "--data-dir", data).stdout


# -- item 8: unexpected answers are one line; one odd message does not refuse a chat -----------------------------
@pytest.mark.parametrize("answers, command", [
    ({"/v1/settings": {"ok": True}}, ("settings",)),
    ({"/v1/settings": {"ok": True}}, ("ingest", "CHAT")),
    ({"/v1/settings": {"settings": {"server.max_message_chars": 1000, "server.max_sync_messages": 100}},
      "/v1/chats/Elena - 1/sync": [1, 2]}, ("ingest", "CHAT")),
    ({"/v1/settings": {"settings": {"server.max_message_chars": 1000, "server.max_sync_messages": 100}},
      "/v1/chats/Elena - 1/sync": {"ok": True}}, ("ingest", "CHAT")),
    ({"/health": b"<html>busy</html>"}, ("stats",)),
    ({"/health": {"ok": True}}, ("stats",)),
    ({"/v1/chats/Elena - 1/status": {"ok": True}}, ("recall", "Elena - 1", "key")),
])
def test_unexpected_answers_from_a_proven_server_are_one_line(tmp_path, answers, command):
    data = empty_data_dir(tmp_path / "data")
    chat = st_chat_file(tmp_path / "Elena - 1.jsonl", [st_message(True, "Hello."), st_message(False, "Hello, Alex.")])
    impostor = Impostor(secret="shared", answers=answers)
    try:
        write_lock(data, impostor.port, "shared")
        result = run(*[chat if a == "CHAT" else a for a in command], "--data-dir", data, expect=1)
    finally:
        impostor.close()
    line = one_line_error(result)
    assert f"127.0.0.1:{impostor.port}" in line and ("does not" in line or "sync" in line), line


def test_an_over_long_message_and_an_odd_swipe_id_do_not_refuse_the_chat(tmp_path):
    data = tmp_path / "data"
    run("settings", "server.max_message_chars", "100", "--data-dir", data, "--create")
    chat = st_chat_file(tmp_path / "Elena - 4.jsonl", [
        st_message(True, "Where is the lantern?"), st_message(False, "On the hook. " + "Very long. " * 30),
        st_message(True, "And the map?", swipe_id=-3), st_message(False, "In the chest.", swipe_id=2**40),
        st_message(True, "Thank you, the lighthouse keeper Brannoc will be glad."),
    ])
    result = run("ingest", chat, "--no-wait", "--data-dir", data)
    assert "message 1 has 343 characters: stored cut to the first 100 (server.max_message_chars)" in result.stderr
    assert "message 2 has swipe_id -3, out of range: stored as 0" in result.stderr
    assert f"message 3 has swipe_id {2**40}, out of range: stored as 0" in result.stderr
    assert "Elena - 4: 5 messages stored (chat); 3 messages adjusted" in result.stderr
    with sqlite3.connect(data / "stbme.sqlite3") as conn:
        rows = conn.execute("SELECT idx, length(text), swipe_id FROM messages WHERE chat_id = 'Elena - 4'"
                            " ORDER BY idx").fetchall()
    assert [r[0] for r in rows] == [0, 1, 2, 3, 4] and rows[1][1] == 100 and rows[2][2] == 0 and rows[3][2] == 0
