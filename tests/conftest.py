"""Shared fixtures: a real SQLite data dir in tmp_path, a deterministic embedder for unit tests, the
real aiohttp app, and helpers to build sync requests the way the extension does."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import hnswlib
import numpy as np
import pytest

from stbme.api import create_app
from stbme.embed.base import Embedder, normalize_rows
from stbme.hashing import chain_hash, message_hash
from stbme.index.lexical import tokenize
from stbme.api.bodies import parse_memory_edit, parse_new_memory, parse_recall, parse_sync_request
from stbme.services import Services


def pytest_report_header(config):
    return [f"sqlite {sqlite3.sqlite_version}, hnswlib {getattr(hnswlib, '__version__', '?')}"]


# A short roleplay chat with one planted fact (the silver key) and a few distractors.
SILVER_KEY_CHAT = [
    {"role": "user", "name": "Alex", "text": "Hello Elena, where did you hide the silver key?"},
    {"role": "assistant", "name": "Elena",
     "text": "I buried the silver key under the old oak tree near the lighthouse."},
    {"role": "user", "name": "Alex", "text": "Let us go fishing at the harbour tomorrow."},
    {"role": "assistant", "name": "Elena", "text": "Fine, but bring the red umbrella, it will rain."},
    {"role": "user", "name": "Alex", "text": "Tell me about the mountains."},
    {"role": "assistant", "name": "Elena", "text": "The dragon Vorthax sleeps in the northern mountains."},
    {"role": "user", "name": "Alex", "text": "hmm"},
    {"role": "assistant", "name": "Elena", "text": "Nothing else to report."},
]


class HashEmbedder(Embedder):
    """Deterministic bag-of-words embedder: texts that share words get similar vectors.
    Unit tests only; end-to-end tests use the real local model."""

    def __init__(self, dim: int = 128, id_suffix: str = ""):
        self.dim = dim
        self.id = f"test:hash-{dim}{id_suffix}"
        self.calls = 0
        self.texts_embedded = 0

    def vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dim, np.float32)
        for term in tokenize(text) or [text]:
            digest = hashlib.blake2b(term.encode(), digest_size=8).digest()
            vec[int.from_bytes(digest[:4], "little") % self.dim] += 1.0
            vec[int.from_bytes(digest[4:], "little") % self.dim] += 0.5
        vec += 0.01  # no zero vectors
        return normalize_rows(vec)[0]

    async def embed_passages(self, texts):
        self.calls += 1
        self.texts_embedded += len(texts)
        return np.vstack([self.vector(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text):
        return self.vector(text)


@pytest.fixture
def embedder():
    return HashEmbedder()


@pytest.fixture
async def sidecar(tmp_path, embedder):
    """A started Services on a temp data dir (worker running)."""
    sc = Services.open(tmp_path / "data", embedder=embedder)
    await sc.start()
    yield sc
    await sc.close()


@pytest.fixture
async def client(aiohttp_client, tmp_path, embedder):
    """A real running app (HTTP on loopback) with the deterministic embedder."""
    app = create_app(tmp_path / "data", embedder=embedder)
    return await aiohttp_client(app)


def role_of(msg: dict) -> str:
    return msg["role"]


def chains(messages: list[dict]) -> list[str]:
    out, prev = [], ""
    for m in messages:
        prev = chain_hash(prev, message_hash(m["role"], m.get("name", ""), m["text"]))
        out.append(prev)
    return out


def sync_body(messages: list[dict], start: int | None = None, tail: int = 4) -> dict:
    """A sync request as the extension builds it: the tail slice plus exponential chain anchors."""
    n = len(messages)
    start = max(0, n - tail) if start is None else start
    ch = chains(messages)
    anchors = {start - 1} if start > 0 else set()
    j = 0
    while n - 1 - (1 << j) >= 0:
        anchors.add(n - 1 - (1 << j))
        j += 1
    return {
        "length": n,
        "messages": [{"index": i, **messages[i]} for i in range(start, n)],
        "anchors": [{"index": i, "chain": ch[i]} for i in sorted(anchors) if 0 <= i < start],
    }


# Use cases called with request bodies, parsed exactly as the HTTP layer parses them.
async def sync(svc: Services, chat_id: str, body: dict) -> dict:
    req = parse_sync_request(body, max_messages=svc.settings["server.max_sync_messages"],
                             max_chars=svc.settings["server.max_message_chars"])
    return await svc.sync.sync(chat_id, req)


async def recall(svc: Services, chat_id: str, body: dict) -> dict:
    return await svc.recall.recall(chat_id, parse_recall(body, max_chars=svc.settings["server.max_message_chars"]))


async def create_node(svc: Services, chat_id: str, body: dict) -> dict:
    return await svc.memories.create(chat_id, parse_new_memory(body, max_chars=svc.settings["server.max_message_chars"]))


async def edit_node(svc: Services, chat_id: str, node_id: str, body: dict) -> dict:
    edit = parse_memory_edit(body, max_chars=svc.settings["server.max_message_chars"])
    return await svc.memories.edit(chat_id, node_id, edit)


async def full_sync(sc_or_client, chat_id: str, messages: list[dict], tail: int = 4) -> dict:
    """Sync like the extension: tail first, then whatever the sidecar asks for."""
    body = sync_body(messages, tail=tail)
    for _ in range(10):
        result = await _post_sync(sc_or_client, chat_id, body)
        if result["status"] == "synced":
            return result
        body = sync_body(messages, start=result["need_from"])
    raise AssertionError(f"sync did not converge: {result}")


async def _post_sync(target, chat_id, body):
    if isinstance(target, Services):
        return await sync(target, chat_id, body)
    from urllib.parse import quote

    resp = await target.post(f"/v1/chats/{quote(chat_id, safe='')}/sync", json=body)
    data = await resp.json()
    assert resp.status == 200, data
    return data


# Generous: CI runs on a busy 2-core machine, four test workers at once; a passing test returns at once. 60 s
# was too short there: a test that takes 13 s alone took over 60 with two suites beside six busy programs.
DEADLINE_S = 180.0


async def wait_for(predicate, what: str = "the condition", timeout: float = DEADLINE_S, interval: float = 0.02):
    """Poll `predicate` (sync or async) until it returns something truthy and return that value, or fail
    naming `what`. The one way tests wait: on a condition, never on a fixed sleep or loop count."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
        await asyncio.sleep(interval)


def wait_for_sync(predicate, what: str = "the condition", timeout: float = DEADLINE_S, interval: float = 0.05):
    """`wait_for` for code outside the event loop (fixtures that start processes)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:g} s")
        time.sleep(interval)


async def settle(sc: Services, chat_id: str, timeout: float = DEADLINE_S) -> dict:
    """Wait until the worker has no pending work for the chat, every memory is embedded and the chat's vector
    index is loaded: a recall waits only 0.25 s for a loading index, and on a busy machine would answer from
    keywords alone."""
    async def settled():
        status = await sc.chats.status(chat_id)
        return status if status["jobs"]["pending"] == 0 and status["unembedded"] == 0 else None

    status = await wait_for(settled, f"chat {chat_id!r} to settle", timeout)
    await asyncio.wait_for(sc.indexes.vectors.get(chat_id), timeout)
    return status


def st_message(user: bool, text: str, **extra) -> dict:
    """One message of a SillyTavern chat file (Alex the user, Elena the character)."""
    return {"name": "Alex" if user else "Elena", "is_user": user, "is_system": False,
            "send_date": "May 12, 2024 2:30pm", "mes": text, **extra}


def st_chat_file(path, messages: list[dict]):
    """A SillyTavern chat file (`.jsonl`): the header line, then the messages (st_message)."""
    header = {"user_name": "Alex", "character_name": "Elena", "create_date": "2024-05-12@14h30m22s",
              "chat_metadata": {}}
    path.write_text("\n".join(json.dumps(m) for m in [header, *messages]), encoding="utf-8")
    return path


def one_line_error(result) -> str:
    """The error of a CLI run (click's CliRunner result): exactly one line on stderr, `Error: ...`."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def free_port() -> int:
    """A port nothing listens on right now. Only for addresses that must NOT answer: a server a test
    starts takes `--port 0` (StbmeProcess), because another worker's connection can take a probed port
    before the server binds it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BANNER_URL = re.compile(r" on (http://\S+?:\d+)\s")


class StbmeProcess:
    """`stbme serve` (or `stbme hub`) as a subprocess on `--port 0`: the OS picks a port the server holds
    from its first moment, and the URL comes from the banner in its log (stderr, to `log_path` or a
    temporary file). `url_or_none()` is for callers with their own /health check (inside an event loop);
    `wait_ready()` waits for /health from outside one."""

    def __init__(self, data_dir, *, command: str = "serve", args=(), env=None, log_path=None):
        self.command = command
        self._own_log = log_path is None
        if log_path:
            self.log_path = Path(log_path)
            self._log = open(self.log_path, "w")
        else:
            fd, name = tempfile.mkstemp(prefix="stbme-", suffix=".log")
            self.log_path, self._log = Path(name), os.fdopen(fd, "w")
        # unbuffered: the banner (and the log a failure shows) is in the file as soon as it is written
        env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "stbme", command, "--port", "0", "--data-dir",
                                      str(data_dir), *args], env=env,
                                     stdout=subprocess.DEVNULL, stderr=self._log, text=True)
        self.url = ""

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def url_or_none(self) -> str | None:
        """The server's URL once its banner is out; RuntimeError (with the log's end) if it exited."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"stbme {self.command} exited ({self.proc.returncode}): {self.log()[-3000:]}")
        if not self.url:
            match = BANNER_URL.search(self.log())
            self.url = match[1] if match else ""
        return self.url or None

    def answers(self) -> bool:
        if not self.url_or_none():
            return False
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = DEADLINE_S) -> str:
        wait_for_sync(self.answers, f"stbme {self.command} to answer /health", timeout=timeout)
        return self.url

    def stop(self, timeout: float = DEADLINE_S, sig=signal.SIGTERM) -> None:
        # A graceful stop gets the shared deadline: a busy machine may take long to checkpoint and exit, and a
        # kill after a short wait leaves the WAL behind (what test_store checks is not there).
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=DEADLINE_S)
        self._log.close()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)


@contextlib.contextmanager
def serve_process(data_dir, *, command: str = "serve", stop_timeout: float = DEADLINE_S, log_path=None, args=()):
    """`stbme serve` (or `stbme hub`) as a subprocess over `data_dir`: yields its base URL once /health
    answers, then stops it (SIGTERM, SIGKILL after `stop_timeout`). `log_path`: its stderr (the log) goes
    to that file; `args`: more command-line arguments."""
    server = StbmeProcess(data_dir, command=command, args=args, log_path=log_path)
    try:
        yield server.wait_ready()
    finally:
        server.stop(stop_timeout)
