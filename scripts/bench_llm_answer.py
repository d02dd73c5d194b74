#!/usr/bin/env python
"""Recall on one chat while the memory LLM sends a huge answer for another (issue 20, item 2).

A fake OpenAI-compatible server (its own process, real HTTP) answers every chat completion with a body of
--mb megabytes (chunked: no Content-Length, so the sidecar must read to find out). Per code variant (this
tree, and a baseline git revision, default `main`), `stbme serve` first makes the memories of a 60-message
chat without an LLM, then is switched to the fake LLM; new chats keep its extraction asking (a new llm.*
setting every few seconds lifts the pause after a failure). Meanwhile one client sends recall requests on the
first chat back to back, another asks /health twice a second. Printed: recall and /health p50 / p95 / max
(idle, then during the huge answers), answers the fake started and MB it sent, the server's peak RSS growth.
Done means recall p95 < 1 s during the huge answers.

    .venv/bin/python scripts/bench_llm_answer.py                      # 200 MB answers, this tree and main
    .venv/bin/python scripts/bench_llm_answer.py --mb 20 --baseline-ref none
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _bench_ingest_parts import pct, recall_requests, sync_bodies  # noqa: E402
from _roleplay_data import RoleplayChat  # noqa: E402
from bench_ingest import RUNNING, Server, baseline_code, run_stopping_servers  # noqa: E402

CHAT_MESSAGES = 60
TIMEOUT_S = 60.0


# -- the fake LLM (run as its own process: `--serve-fake PORT MB`) -------------------------------------------
def serve_fake(port: int, mb: int, stats_path: Path) -> None:
    from aiohttp import web

    chunk = b"x" * (1 << 20)
    stats = {"answers": 0, "bytes": 0}

    async def completions(request):
        await request.read()
        stats["answers"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            await resp.write(b'{"id":"x","object":"chat.completion","choices":[{"index":0,"message":'
                             b'{"role":"assistant","content":"')
            for _ in range(mb):
                await resp.write(chunk)
                stats["bytes"] += len(chunk)
            await resp.write(b'"},"finish_reason":"stop"}]}')
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        stats_path.write_text(json.dumps(stats))
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


class Fake:
    def __init__(self, root: Path, mb: int):
        self.stats = root / "fake-stats.json"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve-fake", str(self.port), str(mb),
                                      str(self.stats)])

    def read(self) -> dict:
        try:
            return json.loads(self.stats.read_text())
        except (OSError, ValueError):
            return {"answers": 0, "bytes": 0}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid: int) -> dict:
    with open(f"/proc/{pid}/status") as fh:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in fh) if k in ("VmRSS", "VmHWM")}


# -- one variant ---------------------------------------------------------------------------------------------
async def timed_loop(http, method: str, path: str, bodies, stop: asyncio.Event, pause: float) -> dict:
    latencies, failures = [], 0
    while not stop.is_set():
        started = time.perf_counter()
        try:
            async with http.request(method, path, json=next(bodies) if bodies else None,
                                    timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as resp:
                await resp.read()
                failures += resp.status != 200
        except (asyncio.TimeoutError, aiohttp.ClientError):
            failures += 1
        latencies.append(time.perf_counter() - started)
        if pause:
            await asyncio.sleep(pause)
    return {"p50": pct(latencies, 50), "p95": pct(latencies, 95), "max": max(latencies, default=float("nan")),
            "n": len(latencies), "failures": failures}


async def window(http, seconds: float, requests, during=None) -> tuple[dict, dict]:
    stop = asyncio.Event()
    recall = asyncio.create_task(timed_loop(http, "POST", "/v1/chats/memory/recall", requests, stop, 0))
    health = asyncio.create_task(timed_loop(http, "GET", "/health", None, stop, 0.5))
    if during is not None:
        await during(seconds)
    else:
        await asyncio.sleep(seconds)
    stop.set()
    return await recall, await health


def say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


async def run_variant(name: str, code: Path, root: Path, fake: Fake, seconds: float) -> dict:
    server = Server(code, root / f"data-{name.split()[0]}-{len(RUNNING)}")
    say(f"{name}: starting the server")
    server.start()
    chat = RoleplayChat(seed=11)
    async with aiohttp.ClientSession(server.url) as http:
        await server.wait_healthy(http)
        pid = server.proc.pid
        say(f"{name}: making the memories of a {CHAT_MESSAGES}-message chat without an LLM")
        for body in sync_bodies(chat, CHAT_MESSAGES):
            async with http.post("/v1/chats/memory/sync", json=body) as resp:
                assert resp.status == 200, await resp.text()
        while True:  # the memories of the recalled chat, made without an LLM
            async with http.get("/v1/chats/memory/status") as resp:
                status = await resp.json()
            if status["processed_upto"] == CHAT_MESSAGES - 1 and status["unembedded"] == 0:
                break
            await asyncio.sleep(0.2)
        requests = recall_requests(chat, CHAT_MESSAGES)
        say(f"{name}: recall on an idle server")
        idle = await window(http, min(10.0, seconds), requests)
        async with http.put("/v1/settings", json={"settings": {
                "llm.mode": "openai", "llm.url": fake.url, "llm.model": "fake", "llm.retries": 0,
                "extract.every": 1, "extract.smart_trigger": False}}) as resp:
            assert resp.status == 200, await resp.text()
        before_fake, before_rss = fake.read(), rss_kib(pid)
        say(f"{name}: recall while the LLM answers with huge bodies ({seconds:g} s)")

        async def keep_the_llm_asking(seconds: float) -> None:
            end, n = time.perf_counter() + seconds, 0
            while time.perf_counter() < end:
                n += 1
                messages = [{"index": i, "role": "user" if i % 2 == 0 else "assistant", "name": "Alex",
                             "text": f"Round {n}: Elena hides the map in the lighthouse (turn {i})."} for i in range(4)]
                with_timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
                try:
                    async with http.put("/v1/settings", json={"settings": {"llm.max_tokens": 1000 + n}},
                                        timeout=with_timeout) as resp:
                        await resp.read()
                    async with http.post(f"/v1/chats/asks-{n}/sync", json={"length": 4, "messages": messages,
                                                                           "anchors": []}, timeout=with_timeout):
                        pass
                except (asyncio.TimeoutError, aiohttp.ClientError):
                    pass
                await asyncio.sleep(min(5.0, max(0.0, end - time.perf_counter())))

        flooded = await window(http, seconds, requests, keep_the_llm_asking)
        after_fake, after_rss = fake.read(), rss_kib(pid)
    server.stop()
    return {"name": name, "idle": idle, "flooded": flooded, "load": os.getloadavg()[0],
            "answers": after_fake["answers"] - before_fake["answers"],
            "mb_sent": (after_fake["bytes"] - before_fake["bytes"]) / 2 ** 20,
            "peak_growth_mb": (after_rss["VmHWM"] - before_rss["VmHWM"]) / 1024}


def line(label: str, stats: dict) -> str:
    return (f"{label} p50 {stats['p50'] * 1000:.0f} ms, p95 {stats['p95'] * 1000:.0f} ms, "
            f"max {stats['max'] * 1000:.0f} ms ({stats['n']} requests, {stats['failures']} failed)")


@click.command()
@click.option("--mb", default=200, show_default=True, help="Size of each LLM answer, in MiB.")
@click.option("--seconds", default=40.0, show_default=True, help="Length of the measured window.")
@click.option("--baseline-ref", default="main", show_default=True,
              help="Git revision whose server code is the baseline ('none' to skip it).")
@click.option("--serve-fake", nargs=3, type=str, default=None, hidden=True)
def main(mb, seconds, baseline_ref, serve_fake):
    if serve_fake:
        port, size, stats = serve_fake
        serve_fake_process(int(port), int(size), Path(stats))
        return
    with tempfile.TemporaryDirectory(prefix="stbme-llm-answer-") as tmp:
        root = Path(tmp)
        fake = Fake(root, mb)
        try:
            variants = [("this tree", HERE.parent / "server")]
            if baseline_ref != "none":
                variants.append((f"baseline {baseline_ref}", baseline_code(baseline_ref, root)))
            results = [asyncio.run(run_variant(name, code, root, fake, seconds)) for name, code in variants]
        finally:
            fake.stop()
    for r in results:
        click.echo(f"{r['name']} (load {r['load']:.1f}): the fake LLM started {r['answers']} answers of {mb} MiB "
                   f"and sent {r['mb_sent']:.0f} MiB; server peak RSS grew {r['peak_growth_mb']:.0f} MiB")
        click.echo("  " + line("idle   recall", r["idle"][0]) + "; " + line("/health", r["idle"][1]))
        click.echo("  " + line("during recall", r["flooded"][0]) + "; " + line("/health", r["flooded"][1]))
        click.echo(f"  recall p95 during the huge answers: {r['flooded'][0]['p95']:.2f} s (done means < 1 s)")


serve_fake_process = serve_fake

if __name__ == "__main__":
    run_stopping_servers(main)
