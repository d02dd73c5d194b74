"""Drive the real product over HTTP: `stbme serve` as a subprocess, chats synced the way the SillyTavern
extension syncs them (st_extension/lib/sync.js, docs/api.md), recall asked the way its interceptor asks
(st_extension/lib/settings.js buildRecallRequest: the user's new message as `query`, the four messages
before it as `recent`, the chat's `recall.budget_tokens` as `budget_tokens`)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import aiohttp

RECENT_MESSAGES = 4    # the extension's default `recentMessages`
SYNC_TAIL = 4          # messages the extension sends for a chat it has not synced yet
SYNC_CHUNK = 500       # the extension's DEFAULT_MAX_CHUNK


def _sha16(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def chains(messages: list[dict], prev: str = "") -> list[str]:
    """Prefix-chain hashes as docs/api.md defines them (hash = sha256(role \\n name \\n text)[:16]),
    continuing from the chain `prev` of the messages before these."""
    out = []
    for m in messages:
        prev = _sha16(prev + _sha16(f"{m['role']}\n{m['name']}\n{m['text']}"))
        out.append(prev)
    return out


def anchor_indexes(length: int, start: int) -> list[int]:
    """`start - 1` and `length - 1 - 2^j` before the slice, as the extension sends them."""
    found = {start - 1} if start > 0 else set()
    step = 1
    while length - 1 - step >= 0:
        if length - 1 - step < start:
            found.add(length - 1 - step)
        step *= 2
    return sorted(found)


def processed_length(messages: list[dict]) -> int:
    """Messages that get memories: up to the last reply (the user messages after it wait for one)."""
    return max((i + 1 for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_settings(pairs) -> dict:
    """`--setting NAME VALUE` pairs: VALUE as JSON, else as a plain string."""
    out = {}
    for name, value in pairs:
        try:
            out[name] = json.loads(value)
        except json.JSONDecodeError:
            out[name] = value
    return out


class Server:
    """`stbme serve` on a free port with the given data dir and settings (JSON values)."""

    def __init__(self, data_dir: Path, settings: dict[str, object], log_path: Path, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, "-m", "stbme", "serve", "--port", str(self.port), "--data-dir", str(data_dir),
                "--log-level", "warning"]
        for name, value in settings.items():
            args += ["--setting", name, json.dumps(value)]
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})

    async def wait_ready(self, session: aiohttp.ClientSession, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stbme serve exited with {self.proc.returncode}; see {self.log.name}")
            try:
                async with session.get(self.url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"stbme serve did not answer within {timeout:.0f} s")
            await asyncio.sleep(0.3)

    def cpu_seconds(self) -> float:
        """CPU time the server has used so far (user + system), from /proc."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Client:
    """The HTTP calls the evaluation makes, raising on any non-2xx answer."""

    def __init__(self, session: aiohttp.ClientSession, url: str):
        self.session, self.url = session, url

    def chat_url(self, chat_id: str, tail: str = "") -> str:
        return f"{self.url}/v1/chats/{quote(chat_id, safe='')}{tail}"

    async def call(self, method: str, url: str, body=None) -> dict:
        async with self.session.request(method, url, json=body) as resp:
            data = await resp.json()
            if resp.status >= 300:
                raise RuntimeError(f"{method} {url} -> {resp.status}: {data}")
            return data

    async def sync(self, chat_id: str, messages: list[dict], start: int | None = None,
                   chain: list[str] | None = None) -> dict:
        """Sync like the extension: a slice from `start` (default: the tail), then whatever is asked for."""
        chain = chain or chains(messages)
        n = len(messages)
        start = max(0, n - SYNC_TAIL) if start is None else start
        for _ in range(10_000):
            end = min(n, start + SYNC_CHUNK)
            body = {"length": n,
                    "messages": [{"index": i, "role": m["role"], "name": m["name"], "text": m["text"], "swipe_id": 0,
                                  "send_date": m.get("send_date", "")} for i, m in enumerate(messages[start:end], start)],
                    "anchors": [{"index": i, "chain": chain[i]} for i in anchor_indexes(n, start)]}
            result = await self.call("POST", self.chat_url(chat_id, "/sync"), body)
            if result["status"] == "synced" and end == n:
                return result
            start = result["need_from"] if result.get("need_from") is not None else end
        raise RuntimeError(f"sync of {chat_id} did not converge")

    async def status(self, chat_id: str) -> dict:
        return await self.call("GET", self.chat_url(chat_id, "/status"))

    async def recall(self, chat_id: str, body: dict, timeout: float = 120.0) -> dict:
        """The recall's answer once the chat's vector index is loaded: a restarted server answers from
        keywords alone while it loads, and the evaluation measures the product that has both."""
        deadline = time.monotonic() + timeout
        while True:
            answer = await self.call("POST", self.chat_url(chat_id, "/recall"), body)
            if "still loading" not in answer.get("degraded", ""):
                return answer
            if time.monotonic() > deadline:
                raise RuntimeError(f"chat {chat_id}: {answer['degraded']} after {timeout:.0f} s")
            await asyncio.sleep(0.05)

    async def node(self, chat_id: str, node_id: str) -> dict:
        return (await self.call("GET", self.chat_url(chat_id, f"/nodes/{quote(node_id, safe='')}")))["node"]

    async def settings(self) -> dict:
        return (await self.call("GET", self.url + "/v1/settings"))["settings"]

    async def put_settings(self, values: dict) -> None:
        await self.call("PUT", self.url + "/v1/settings", {"settings": values})

    async def put_chat_settings(self, chat_id: str, values: dict) -> None:
        await self.call("PUT", self.chat_url(chat_id, "/settings"), {"settings": values})

    async def settle(self, chat_id: str, length: int, timeout: float = 600.0) -> None:
        """Wait, quietly, until the chat's first `length` messages have memories and nothing is pending."""
        deadline = time.monotonic() + timeout
        while True:
            s = await self.status(chat_id)
            if s["processed_upto"] >= length - 1 and s["jobs"]["pending"] == 0 and s["unembedded"] == 0:
                return
            if s["jobs"]["failed"]:
                raise RuntimeError(f"processing failed: {chat_id}: {s['jobs']['last_error']}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"chat {chat_id} not settled after {timeout:.0f} s")
            await asyncio.sleep(0.02)

    async def wait_processed(self, lengths: dict[str, int], timeout: float = 7200.0) -> dict[str, dict]:
        """Poll until every chat's messages have memories and every memory is embedded; progress on stderr.
        `lengths`: per chat, how many messages get memories (user messages after the last reply wait for
        one, as in SillyTavern: the product processes a chat after each assistant message)."""
        started = time.monotonic()
        while True:
            statuses = {c: await self.status(c) for c in lengths}
            done = sum(min(s["processed_upto"] + 1, lengths[c]) for c, s in statuses.items())
            total = sum(lengths.values())
            waiting = sum(s["unembedded"] for s in statuses.values())
            failed = [f"{c}: {s['jobs']['last_error']}" for c, s in statuses.items() if s["jobs"]["failed"]]
            if failed:
                raise RuntimeError("processing failed: " + "; ".join(failed))
            elapsed = time.monotonic() - started
            print(f"\r  processed {done}/{total} messages, {waiting} memories waiting for embeddings,"
                  f" {elapsed:.0f} s   ", end="", file=sys.stderr, flush=True)
            if all(s["processed_upto"] >= lengths[c] - 1 and s["jobs"]["pending"] == 0 and s["unembedded"] == 0
                   for c, s in statuses.items()):
                print(file=sys.stderr)
                return statuses
            if elapsed > timeout:
                raise RuntimeError(f"chats not processed after {timeout:.0f} s")
            await asyncio.sleep(2.0)
