#!/usr/bin/env python
"""Chat processing while Authority jobs flood the queue (issue 20, item 1), against a running `stbme serve`.

Per code variant (this tree, and a baseline git revision, default `main`): the time a new 10-message chat
takes until its memories are made and embedded on an idle server, then the same while 30 Authority
sessions (30 extensions) each queue up to 10 one-minute `delay` jobs (what the sidecar accepts of them).
Printed: idle and flooded p50 / max, and flooded / idle. Done means flooded p50 <= 2x idle p50.

    .venv/bin/python scripts/bench_job_lanes.py                      # this tree and main
    .venv/bin/python scripts/bench_job_lanes.py --baseline-ref none  # this tree only

The baseline's flooded chats usually never finish within the flood: each is cut at --timeout and shown as
">N s".
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_ingest import RUNNING, Server, baseline_code, run_stopping_servers  # noqa: E402

SESSIONS = 30
JOBS_PER_SESSION = 10
DELAY_MS = 60_000
CHAT_MESSAGES = 10


def chat_body(n: int, tag: str) -> dict:
    messages = [{"index": i, "role": "user" if i % 2 == 0 else "assistant",
                 "name": "Alex" if i % 2 == 0 else "Elena",
                 "text": f"{tag} turn {i}: the keeper of the lighthouse hid the silver key under the old oak, "
                         f"and the storm over Greywater has not stopped for {i + 2} days."} for i in range(n)]
    return {"length": n, "messages": messages, "anchors": []}


async def process_one(http: aiohttp.ClientSession, chat_id: str, timeout: float) -> float | None:
    """Seconds from the sync until the chat's memories are made and embedded (None: not within timeout)."""
    started = time.perf_counter()
    async with http.post(f"/v1/chats/{chat_id}/sync", json=chat_body(CHAT_MESSAGES, chat_id)) as resp:
        assert resp.status == 200, await resp.text()
    while time.perf_counter() - started < timeout:
        async with http.get(f"/v1/chats/{chat_id}/status") as resp:
            status = await resp.json()
        if status["processed_upto"] == CHAT_MESSAGES - 1 and status["unembedded"] == 0 \
                and status["jobs"]["pending"] == 0:
            return time.perf_counter() - started
        await asyncio.sleep(0.02)
    return None


async def flood(http: aiohttp.ClientSession) -> tuple[int, int]:
    """30 extensions each queue up to 10 minute-long delay jobs: (queued, refused)."""
    queued = refused = 0
    for n in range(SESSIONS):
        async with http.post("/v1/authority/session/init", json={
                "extensionId": f"third-party/flood-{n}", "declaredPermissions": {"jobs": {"background": True}}}) as resp:
            token = (await resp.json())["sessionToken"]
        for _ in range(JOBS_PER_SESSION):
            async with http.post("/v1/authority/jobs/create", headers={"x-authority-session-token": token},
                                 json={"type": "delay", "payload": {"durationMs": DELAY_MS}}) as resp:
                if resp.status != 200:
                    refused += 1
                    break
                queued += 1
    return queued, refused


async def run_variant(name: str, code: Path, root: Path, rounds: int, timeout: float) -> dict:
    server = Server(code, root / f"data-{len(RUNNING)}-{name.split()[0]}")
    server.start()
    async with aiohttp.ClientSession(server.url) as http:
        await server.wait_healthy(http)
        await process_one(http, "warm-up", 300)  # the embedding model loads
        idle = [await process_one(http, f"idle-{i}", timeout) for i in range(rounds)]
        queued, refused = await flood(http)
        load = os.getloadavg()[0]
        flooded = [await process_one(http, f"flooded-{i}", timeout) for i in range(rounds)]
    server.stop()
    return {"name": name, "idle": idle, "flooded": flooded, "queued": queued, "refused": refused, "load": load}


def fmt(value: float | None, timeout: float) -> str:
    return f">{timeout:.0f} s" if value is None else f"{value:.2f} s"


@click.command()
@click.option("--baseline-ref", default="main", show_default=True,
              help="Git revision whose server code is the baseline ('none' to skip it).")
@click.option("--rounds", default=5, show_default=True, help="New chats timed idle and under the flood.")
@click.option("--timeout", default=150.0, show_default=True, help="Give up on one chat after this many seconds.")
@click.option("--baseline-rounds", default=1, show_default=True,
              help="Rounds for the baseline (its flooded chats wait out --timeout each).")
def main(baseline_ref, rounds, timeout, baseline_rounds):
    with tempfile.TemporaryDirectory(prefix="stbme-lanes-") as tmp:
        root = Path(tmp)
        results = [asyncio.run(run_variant("this tree", HERE.parent / "server", root, rounds, timeout))]
        if baseline_ref != "none":
            results.append(asyncio.run(run_variant(f"baseline {baseline_ref}", baseline_code(baseline_ref, root),
                                                   root, baseline_rounds, timeout)))
    for r in results:
        idle = [v for v in r["idle"] if v is not None]
        idle_p50 = statistics.median(idle) if idle else float("nan")
        done = [v for v in r["flooded"] if v is not None]
        flooded_p50 = statistics.median(r["flooded"]) if len(done) == len(r["flooded"]) else None
        worst = None if len(done) < len(r["flooded"]) else max(done)
        click.echo(f"{r['name']}: {r['queued']} delay jobs queued ({r['refused']} refusals), load {r['load']:.1f}")
        click.echo(f"  idle:    p50 {fmt(idle_p50, timeout)}, max {fmt(max(idle) if idle else None, timeout)}"
                   f"  ({', '.join(fmt(v, timeout) for v in r['idle'])})")
        click.echo(f"  flooded: p50 {fmt(flooded_p50, timeout)}, max {fmt(worst, timeout)}"
                   f"  ({', '.join(fmt(v, timeout) for v in r['flooded'])})")
        ratio = f"{flooded_p50 / idle_p50:.2f}x" if flooded_p50 is not None else f">{timeout / idle_p50:.0f}x"
        click.echo(f"  flooded / idle p50: {ratio} (done means <= 2x)")


if __name__ == "__main__":
    run_stopping_servers(main)
