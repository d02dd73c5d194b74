#!/usr/bin/env python
"""/health while large valid Authority requests run (issue 20, item 3), against a running `stbme serve`.

Per code variant (this tree, and a baseline git revision, default `main`), each of the issue's requests is
sent while a client asks /health every 50 ms: a search-hybrid with a 20 MB queryText (refused here: at
most 200,000 characters) and with 200,000 characters, a bulk-upsert of 1,500 items of 19,000 characters,
and a 2,000-statement SQL transaction (ST-BME's node upsert, and 2,000 distinct statements). Printed per
request: its status and time, and /health p50 / max while it ran.

    .venv/bin/python scripts/bench_authority_load.py
    .venv/bin/python scripts/bench_authority_load.py --baseline-ref none
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import click
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _bench_ingest_parts import pct  # noqa: E402
from bench_ingest import RUNNING, Server, baseline_code, run_stopping_servers  # noqa: E402

NS = "st-bme::bench"
UPSERT_NODE = ("INSERT INTO st_bme_graph_nodes (chat_id, record_id, payload_json, node_type, source_floor, archived, "
               "updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chat_id, record_id) DO UPDATE "
               "SET payload_json = excluded.payload_json, updated_at = excluded.updated_at")


def words(rng, n: int) -> str:
    vocab = ["lighthouse", "silver", "key", "harbour", "storm", "letter", "vault", "oak", "dragon", "ring"]
    return " ".join(rng.choice(vocab, n)) + " " + " ".join(f"w{int(x)}" for x in rng.integers(0, 50000, n // 4))


def requests(rng) -> list[tuple[str, str, dict]]:
    vector = rng.standard_normal(16).tolist()
    items = [{"externalId": f"n{i}", "namespace": NS, "vector": rng.standard_normal(16).tolist(),
              "payload": {"text": words(rng, 2400)[:19000]}} for i in range(1500)]
    same = [{"statement": UPSERT_NODE, "params": ["c", f"r{i}", "{}", "event", i, 0, 0, None]} for i in range(2000)]
    # distinct texts of one shape (the spacing differs): remembering parsed statements cannot help. They match
    # no row: the time is the checking, not 2,000 result sets of 2,000 rows (which the first version measured)
    distinct = [{"statement": "SELECT record_id FROM st_bme_graph_nodes WHERE chat_id =" + " " * (1 + i % 50)
                 + "? AND source_floor >=" + " " * (1 + i // 50) + "?", "params": ["c", 10 ** 9]}
                for i in range(2000)]
    return [
        ("search-hybrid, 20 MB queryText", "/trivium/search-hybrid",
         {"database": "st_bme_vectors", "vector": vector, "topK": 24, "queryText": words(rng, 2_500_000)[:20_000_000]}),
        ("search-hybrid, 200,000-char queryText", "/trivium/search-hybrid",
         {"database": "st_bme_vectors", "vector": vector, "topK": 24, "queryText": words(rng, 25_000)[:200_000]}),
        ("bulk-upsert, 1,500 items x 19,000 chars", "/trivium/bulk-upsert", {"database": "st_bme_vectors", "items": items}),
        ("sql/transaction, 2,000 node upserts", "/sql/transaction", {"database": "default", "statements": same}),
        ("sql/transaction, 2,000 distinct statements", "/sql/transaction", {"database": "default", "statements": distinct}),
    ]


async def health_while(http, request_coro) -> tuple[dict, list[float]]:
    stop, latencies = asyncio.Event(), []

    async def poll():
        while not stop.is_set():
            started = time.perf_counter()
            async with http.get("/health", timeout=aiohttp.ClientTimeout(total=120)) as resp:
                await resp.read()
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)

    poller = asyncio.create_task(poll())
    await asyncio.sleep(0.3)  # a few idle samples first
    try:
        result = await request_coro
    finally:
        stop.set()
        await poller
    return result, latencies


async def run_variant(name: str, code: Path, root: Path, seed: int) -> list[dict]:
    server = Server(code, root / f"data-{name.split()[0]}-{len(RUNNING)}")
    server.start()
    out = []
    async with aiohttp.ClientSession(server.url) as http:
        await server.wait_healthy(http)
        async with http.post("/v1/authority/session/init", json={"extensionId": "third-party/bench", "declaredPermissions": {
                "sql": {"private": True}, "trivium": {"private": True}}}) as resp:
            token = (await resp.json())["sessionToken"]
        headers = {"x-authority-session-token": token}
        async with http.post("/v1/authority/trivium/bulk-upsert", headers=headers, json={"items": [
                {"externalId": "seed", "namespace": NS, "vector": [1.0] * 16, "payload": {"text": "seed"}}]}):
            pass
        rng = np.random.default_rng(seed)
        for label, path, body in requests(rng):
            async def send():
                started = time.perf_counter()
                async with http.post("/v1/authority" + path, headers=headers, json=body,
                                     timeout=aiohttp.ClientTimeout(total=600)) as resp:
                    await resp.read()
                    return resp.status, time.perf_counter() - started
            (status, took), health = await health_while(http, send())
            out.append({"label": label, "status": status, "took": took, "health_p50": pct(health, 50),
                        "health_max": max(health), "samples": len(health)})
            click.echo(f"  {name}: {label}: HTTP {status} in {took:.2f} s", err=True)
    server.stop()
    return out


@click.command()
@click.option("--baseline-ref", default="main", show_default=True,
              help="Git revision whose server code is the baseline ('none' to skip it).")
@click.option("--seed", default=20, show_default=True)
def main(baseline_ref, seed):
    with tempfile.TemporaryDirectory(prefix="stbme-authority-load-") as tmp:
        root = Path(tmp)
        variants = [("this tree", HERE.parent / "server")]
        if baseline_ref != "none":
            variants.append((f"baseline {baseline_ref}", baseline_code(baseline_ref, root)))
        results = {name: asyncio.run(run_variant(name, code, root, seed)) for name, code in variants}
    click.echo(f"load average {os.getloadavg()[0]:.1f}")
    for name, rows in results.items():
        click.echo(name)
        for r in rows:
            click.echo(f"  {r['label']}: HTTP {r['status']} in {r['took']:.2f} s; /health p50 "
                       f"{r['health_p50'] * 1000:.0f} ms, max {r['health_max'] * 1000:.0f} ms ({r['samples']} samples)")


if __name__ == "__main__":
    run_stopping_servers(main)
