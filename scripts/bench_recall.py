#!/usr/bin/env python
"""Recall benchmark: one chat each of 1k, 10k and 100k memories, measured in one run.

For each size it prints recall latency through the full product read path (the recall use case: HNSW,
BM25, fusion, SQLite fetch, rendering with tiktoken), without the query embedding; the same queries
against a brute-force numpy scan of the same vectors (the baseline, same process); the HNSW index
alone and its recall@10; the latency of syncing one appended message; index build and reopen times;
and peak RSS. A final table checks the targets (PASS/MISS; nothing is asserted).

Each size runs in two fresh processes: `populate` writes the chat through the product's write
path (sync in chunks of 2000 messages, memories via ChangeSet.insert_node), and `measure` opens it
cold, so each size's RSS is its own and the generator's memory is not counted.

    .venv/bin/python scripts/bench_recall.py                  # 1k, 10k, 100k: about 4 minutes on 2 cores
    .venv/bin/python scripts/bench_recall.py --sizes 10000 --json
    .venv/bin/python scripts/bench_recall.py --sizes 10000,100000 --baseline c8acab5   # ratios to that revision
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import json
import os
import platform
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The baseline (a numpy matrix product) must not depend on how many BLAS threads a busy machine grants:
# one thread, pinned before numpy loads its BLAS, here and in the phase processes (they inherit it).
# The product's own numpy work per recall is too small for BLAS to thread.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[_var] = "1"

import click  # noqa: E402
import numpy as np  # noqa: E402

from _bench_data import (CORE_MEMORIES, DIM, BenchEmbedder, ChatGenerator, VectorModel, anchor_indexes,
                         sync_body)
from stbme.graph.changes import ChangeSet
from stbme.graph.model import Node, new_id, node_text
from stbme.hashing import chain_hash, message_hash, text_hash
from stbme.api.bodies import parse_recall, parse_sync_request
from stbme.services import Services

CHAT_ID = "bench/chat"
SYNC_CHUNK = 2000      # messages per sync request while populating (server.max_sync_messages)
NODE_BATCH = 2000      # memories per write transaction while populating
WARMUP_QUERIES = 20
WARMUP_SYNCS = 10
SYNC_TAIL = 4          # the extension sends the last few messages plus chain anchors
BUDGET_TOKENS = 800
TOP_K = 40             # what bench_recall asks HNSW and BM25 for (recall/tuning.py CANDIDATES is the product's)
TARGETS = (            # (size, metric key, limit, label)
    (10_000, "recall_p50_ms", 3.0, "recall p50 at 10k memories <= 3 ms"),
    (100_000, "recall_p50_ms", 5.0, "recall p50 at 100k memories <= 5 ms"),
    (100_000, "rss_peak_mb", 600.0, "peak RSS at 100k memories < 600 MB"),
    (100_000, "rss_peak_mb", 500.0, "build peak RSS at 100k <= 500 MB"),
    (100_000, "rss_reopen_fresh_mb", 500.0, "reopened peak RSS at 100k <= 500 MB"),
)


# -- small helpers ---------------------------------------------------------------------------------

async def sync(sc: Services, body: dict) -> dict:
    req = parse_sync_request(body, max_messages=sc.settings["server.max_sync_messages"],
                             max_chars=sc.settings["server.max_message_chars"])
    return await sc.sync.sync(CHAT_ID, req)


async def recall(sc: Services, body: dict) -> dict:
    return await sc.recall.recall(CHAT_ID, parse_recall(body, max_chars=sc.settings["server.max_message_chars"]))

def log(size: int, text: str) -> None:
    click.echo(f"[{size:>7,}] {text}", err=True)


def rss_now_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def cpu_sample() -> tuple[float, float, float]:
    """(wall, machine busy CPU seconds, this process's CPU seconds): the difference between two samples
    tells how much CPU other processes used meanwhile, i.e. how noisy the timings are."""
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:9]]
    busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.monotonic(), busy, ru.ru_utime + ru.ru_stime


def other_cpu(start: tuple[float, float, float]) -> float | None:
    """Cores used by other processes since `start` (0 = quiet machine); None for windows too short
    for the 10 ms clock ticks."""
    end = cpu_sample()
    if end[0] - start[0] < 0.5:
        return None
    return max(0.0, ((end[1] - start[1]) - (end[2] - start[2])) / (end[0] - start[0]))


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


def summary_ms(seconds: list[float]) -> dict:
    ms = [s * 1000 for s in seconds]
    return {"p50": pct(ms, 50), "p95": pct(ms, 95), "p99": pct(ms, 99), "mean": float(np.mean(ms)), "n": len(ms)}


def progressbar(length: int, label: str):
    return click.progressbar(length=length, label=label, file=sys.stderr, show_percent=True, show_eta=True)


# -- phase 1: populate -----------------------------------------------------------------------------
async def populate(size: int, data_dir: Path, seed: int) -> dict:
    """Write the chat: messages through the sync use case, one event memory per message through
    `ChangeSet.insert_node`, with vectors from the stand-in model (no worker runs)."""
    gen = ChatGenerator(seed)
    model = VectorModel(gen)
    embedder = BenchEmbedder(model)
    sc = Services.open(data_dir, embedder=embedder)
    started = time.perf_counter()
    sync_s = embed_s = insert_s = 0.0
    chains: list[str] = []

    core = []
    for type_, fields in CORE_MEMORIES:
        text = node_text(fields)
        core.append(Node(id=new_id("n"), chat_id=CHAT_ID, type=type_, fields=fields, importance=8.0,
                         source="manual", embedding=model.embed(text), embedder=embedder.id,
                         text_hash=text_hash(text)))

    def write_core(conn):
        cs = ChangeSet(conn, CHAT_ID, reason="manual")
        for node in core:
            cs.insert_node(node)

    await sc.store.write(write_core)
    with progressbar(size, f"[{size:>7,}] populating") as bar:
        for start in range(0, size, SYNC_CHUNK):
            end = min(start + SYNC_CHUNK, size)
            messages = [gen.message(i) for i in range(start, end)]
            prev = chains[-1] if chains else ""
            for m in messages:
                prev = chain_hash(prev, message_hash(m.role, m.name, m.text))
                chains.append(prev)
            t = time.perf_counter()
            result = await sync(sc, sync_body(messages, end, chains))
            sync_s += time.perf_counter() - t
            if result["status"] != "synced" or result["stored_length"] != end:
                raise click.ClickException(f"populating sync did not converge: {result}")

            for b in range(0, len(messages), NODE_BATCH):
                part = messages[b:b + NODE_BATCH]
                t = time.perf_counter()
                nodes = []
                for m in part:
                    fields = m.memory_fields()
                    text = node_text(fields)
                    nodes.append(Node(id=new_id("n"), chat_id=CHAT_ID, type="event", fields=fields,
                                      importance=5.0, seq_from=m.index, seq_to=m.index,
                                      embedding=model.embed(text), embedder=embedder.id,
                                      text_hash=text_hash(text), source="heuristic"))
                embed_s += time.perf_counter() - t

                def write(conn, nodes=nodes, lo=part[0].index, hi=part[-1].index):
                    # As the worker's process_chat batch does: journaled memories of messages lo..hi,
                    # then the chat's processed mark.
                    cs = ChangeSet(conn, CHAT_ID, reason="heuristic", msg_range=(lo, hi))
                    for node in nodes:
                        cs.insert_node(node)
                    conn.execute("UPDATE chats SET processed_upto = ? WHERE chat_id = ?", (hi, CHAT_ID))

                t = time.perf_counter()
                await sc.store.write(write)
                insert_s += time.perf_counter() - t
                bar.update(len(part))
    await sc.close()
    db = data_dir / "stbme.sqlite3"
    db_bytes = sum(p.stat().st_size for p in data_dir.glob("stbme.sqlite3*"))
    return {"size": size, "core_memories": len(core), "populate_s": time.perf_counter() - started,
            "sync_s": sync_s, "embed_s": embed_s, "insert_s": insert_s, "db_mb": db_bytes / 2**20,
            "db": str(db), "rss_peak_mb": rss_peak_mb()}


# -- phase 2: measure ------------------------------------------------------------------------------
async def measure(size: int, data_dir: Path, seed: int, n_queries: int, n_syncs: int) -> dict:
    import stbme

    out: dict = {"size": size, "code": str(Path(stbme.__file__).parent)}
    gen = ChatGenerator(seed)
    model = VectorModel(gen)
    queries = gen.queries(WARMUP_QUERIES + n_queries, size, "recall")
    qvecs = {q: model.embed(q) for _, q, _ in queries}
    warmup, measured = queries[:WARMUP_QUERIES], queries[WARMUP_QUERIES:]
    out["query_kinds"] = {k: sum(1 for kind, _, _ in measured if kind == k) for k in ("rare", "topic", "miss")}

    # Sync requests for the appended messages, built client-side before any timing.
    appended = [gen.message(i) for i in range(size, size + WARMUP_SYNCS + n_syncs)]
    need = set()
    for m in appended:
        need |= anchor_indexes(m.index + 1, max(0, m.index + 1 - SYNC_TAIL))
    chain_at, prev = gen.chains(size, {i for i in need if i < size})
    for m in appended:
        prev = chain_at[m.index] = chain_hash(prev, message_hash(m.role, m.name, m.text))
    by_index = {m.index: m for m in appended}
    bodies = []
    for m in appended:
        length = m.index + 1
        tail = [by_index.get(i) or gen.message(i) for i in range(max(0, length - SYNC_TAIL), length)]
        bodies.append(sync_body(tail, length, chain_at))
    del chain_at, by_index
    gc.collect()
    out["rss_fixtures_mb"] = rss_now_mb()  # interpreter, libraries, generator and query vectors

    # Cold open and build: what the first recall of a chat with no saved index pays.
    cpu_measure = cpu_sample()
    embedder = BenchEmbedder(model, qvecs)
    t = time.perf_counter()
    sc = Services.open(data_dir, embedder=embedder)
    out["open_s"] = time.perf_counter() - t
    with progressbar(size, f"[{size:>7,}] HNSW build") as bar:
        t = time.perf_counter()
        index = await sc.indexes.vectors.rebuild(CHAT_ID, progress=lambda done, total: bar.update(done - bar.pos))
        out["hnsw_build_s"] = time.perf_counter() - t
    log(size, f"HNSW build {out['hnsw_build_s']:.1f} s ({len(index):,} vectors)")
    t = time.perf_counter()
    lexical = await sc.indexes.lexical.get(CHAT_ID)
    out["lexical_build_s"] = time.perf_counter() - t
    log(size, f"lexical build {out['lexical_build_s']:.1f} s ({len(lexical.postings):,} terms)")
    out["indexed"] = len(index)
    out["lexical_docs"] = len(lexical)

    for _, q, _ in queries:  # warm the query-vector LRU: no query embedding inside the timed calls
        await sc.embeddings.embed_query(q)

    def body(q: str) -> dict:
        return {"query": q, "budget_tokens": BUDGET_TOKENS}

    t = time.perf_counter()
    await recall(sc, body(warmup[0][1]))
    out["first_recall_ms"] = (time.perf_counter() - t) * 1000
    for _, q, _ in warmup[1:]:
        await recall(sc, body(q))

    log(size, f"recall x {len(measured)}")
    cpu_start = cpu_sample()
    cpu_self = time.process_time()
    latencies, took, memories, tokens, by_kind, named = [], [], [], [], {}, []
    for kind, q, name in measured:
        t = time.perf_counter()
        result = await recall(sc, body(q))
        dt = time.perf_counter() - t
        latencies.append(dt)
        by_kind.setdefault(kind, []).append(dt)
        took.append(result["took_ms"])
        memories.append(len(result["memories"]))
        tokens.append(result["tokens"])
        if name:  # a rare-name query: does the block bring back a memory that names it?
            named.append(name.lower() in result["text"].lower())
    # CPU the process spent per recall (every thread): unlike wall time, hardly changed by other programs.
    out["recall_cpu_ms"] = (time.process_time() - cpu_self) * 1000 / len(measured)
    out["other_cpu_recall"] = other_cpu(cpu_start)
    out["recall"] = summary_ms(latencies)
    out["recall_p50_ms"] = out["recall"]["p50"]
    out["recall_by_kind_p50_ms"] = {k: pct(v, 50) * 1000 for k, v in by_kind.items()}
    out["recall_took_ms_p50"] = pct(took, 50)
    out["recall_memories_mean"] = float(np.mean(memories))
    out["recall_tokens_mean"] = float(np.mean(tokens))
    out["rare_name_in_block"] = float(np.mean(named)) if named else None
    out["query_misses"] = embedder.query_misses

    # The extension's real request: the user's input plus the turns before it (its recentMessages, 4).
    recent = [{"role": m.role, "name": m.name, "text": m.text} for m in (gen.message(i) for i in range(size - 4, size))]
    log(size, f"recall with recent turns x {len(measured)}")
    misses_before, real = embedder.query_misses, []
    cpu_self = time.process_time()
    for _, q, _ in measured:
        t = time.perf_counter()
        await recall(sc, {**body(q), "recent": recent})
        real.append(time.perf_counter() - t)
    out["recall_real"] = summary_ms(real)
    out["recall_real_cpu_ms"] = (time.process_time() - cpu_self) * 1000 / len(measured)
    out["recent_turns_embedded"] = embedder.query_misses - misses_before  # 0: their stored vectors were reused

    # The two retrievers alone, on the same queries.
    hnsw_s, hnsw_top10, lex_s = [], [], []
    for _, q, _ in measured:
        vec = qvecs[q]
        t = time.perf_counter()
        hits = index.query(vec, TOP_K)
        hnsw_s.append(time.perf_counter() - t)
        hnsw_top10.append([n for n, _ in hits[:10]])
        t = time.perf_counter()
        lexical.search(q, TOP_K)
        lex_s.append(time.perf_counter() - t)
    out["hnsw_only"] = summary_ms(hnsw_s)
    out["bm25_only"] = summary_ms(lex_s)

    log(size, f"sync x {len(bodies)}")
    sync_lat = []
    for i, b in enumerate(bodies):
        t = time.perf_counter()
        result = await sync(sc, b)
        dt = time.perf_counter() - t
        if result["status"] != "synced":
            raise click.ClickException(f"sync of message {b['length'] - 1} did not converge: {result}")
        if i >= WARMUP_SYNCS:
            sync_lat.append(dt)
    out["other_cpu_measure"] = other_cpu(cpu_measure)
    out["sync"] = summary_ms(sync_lat)
    out["rss_peak_mb"] = rss_peak_mb()
    out["rss_now_mb"] = rss_now_mb()

    # Save, close, reopen: the usual start of a session with a saved index.
    t = time.perf_counter()
    await sc.indexes.vectors.save_dirty()
    out["index_save_s"] = time.perf_counter() - t
    t = time.perf_counter()
    await sc.indexes.lexical.save_dirty()
    out["lexical_save_s"] = time.perf_counter() - t
    out["index_file_mb"] = sum(p.stat().st_size for p in (data_dir / "indexes").glob("*")) / 2**20
    await sc.close()
    del sc, index, lexical
    gc.collect()
    t = time.perf_counter()
    sc = Services.open(data_dir, embedder=embedder)
    await sc.indexes.vectors.get(CHAT_ID)
    out["reopen_hnsw_s"] = time.perf_counter() - t
    t = time.perf_counter()
    await sc.indexes.lexical.get(CHAT_ID)
    out["reopen_lexical_s"] = time.perf_counter() - t
    t = time.perf_counter()
    await recall(sc, body(measured[0][1]))
    out["reopen_first_recall_ms"] = (time.perf_counter() - t) * 1000
    await sc.close()
    del sc
    gc.collect()
    out["rss_peak_after_reopen_mb"] = rss_peak_mb()

    # Baseline: brute-force scan of the same vectors, read back from the store.
    conn = sqlite3.connect(f"file:{data_dir / 'stbme.sqlite3'}?mode=ro", uri=True)
    count = conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0 AND embedder = ?",
                         (CHAT_ID, embedder.id)).fetchone()[0]
    ids = []
    matrix = np.empty((count, DIM), dtype=np.float32)
    for i, (node_id, blob) in enumerate(conn.execute(
            "SELECT id, embedding FROM nodes WHERE chat_id = ? AND archived = 0 AND embedder = ?",
            (CHAT_ID, embedder.id))):
        ids.append(node_id)
        matrix[i] = np.frombuffer(blob, dtype=np.float32)
    conn.close()
    brute_s, overlap, top1_found = [], {}, []
    for (kind, q, _), hnsw_ids in zip(measured, hnsw_top10):
        vec = qvecs[q]
        t = time.perf_counter()
        sims = matrix @ vec
        top = np.argpartition(-sims, TOP_K - 1)[:TOP_K]
        top = top[np.argsort(-sims[top])]
        brute_s.append(time.perf_counter() - t)
        truth = {ids[j] for j in top[:10]}
        overlap.setdefault(kind, []).append(len(truth & set(hnsw_ids)) / len(truth))
        if kind == "rare":  # its best match stands out (shares the rare name): did HNSW find it?
            top1_found.append(ids[top[0]] in hnsw_ids)
    out["brute"] = summary_ms(brute_s)
    out["hnsw_recall_at_10"] = float(np.mean([v for vs in overlap.values() for v in vs]))
    out["hnsw_recall_at_10_by_kind"] = {k: float(np.mean(v)) for k, v in overlap.items()}
    out["hnsw_rare_top1_found"] = float(np.mean(top1_found)) if top1_found else None
    out["rss_peak_with_baseline_mb"] = rss_peak_mb()
    return out


# -- HNSW quality on real vectors (the bundled model's, of real chat text) ---------------------------
REAL_SIZES = (1_000, 10_000, 30_000, 100_000)
REAL_GRID = ((16, 128, (64, 128, 256)), (32, 200, (64, 128, 256)))   # (M, ef_construction, ef values)


def hnsw_real_quality(sizes=REAL_SIZES, n_queries: int = 500, cached_only: bool = False) -> list[dict]:
    """recall@10 of the product's ChatIndex against an exact scan, on the bundled model's vectors of real
    chat text (scripts/_real_vectors.py: the recall set's messages and Topical-Chat turns, whole and cut
    into sentences; queries are other texts of the same pool, embedded as queries). The product's
    defaults come first (index.m, index.ef_construction, index.ef_search; recall asks for
    recall/tuning.CANDIDATES neighbours, so ef is at least that)."""
    import _real_vectors
    from stbme import config
    from stbme.index.hnsw import ChatIndex

    from stbme.recall import tuning

    defaults = {k: config.setting(k).default for k in ("index.m", "index.ef_construction", "index.ef_search")}
    defaults["recall.candidates"] = tuning.CANDIDATES
    grid = [(defaults["index.m"], defaults["index.ef_construction"], (defaults["index.ef_search"],))] + [
        g for g in REAL_GRID]
    stored, queries, facts = _real_vectors.load(max(sizes), n_queries, progress=lambda text: log(0, text),
                                                cached_only=cached_only)
    rows = []
    for size in sorted({s for s in sizes if s <= len(stored)} | ({len(stored)} if cached_only else set())):
        vectors = stored[:size]
        sims = queries @ vectors.T
        truth = np.argsort(-sims, axis=1)[:, :10]
        ids = [f"n{i}" for i in range(size)]
        for m, ef_c, efs in grid:
            index = ChatIndex(vectors.shape[1], "real", m=m, ef_construction=ef_c, capacity=size)
            t = time.perf_counter()
            index.upsert(ids, vectors, [1] * size)
            build_s = time.perf_counter() - t
            for ef in efs:
                index.ef_search = ef
                hits, took = [], []
                for q in queries:
                    t = time.perf_counter()
                    found = index.query(q, max(10, defaults["recall.candidates"]))
                    took.append(time.perf_counter() - t)
                    hits.append({int(n[1:]) for n, _ in found[:10]})
                recall = float(np.mean([len(h & set(t.tolist())) / 10 for h, t in zip(hits, truth)]))
                rows.append({"size": size, "m": m, "ef_construction": ef_c, "ef": ef, "recall_at_10": recall,
                             "query_p50_ms": pct(took, 50) * 1000, "build_s": build_s,
                             "default": (m, ef_c, ef) == (defaults["index.m"], defaults["index.ef_construction"],
                                                          defaults["index.ef_search"])})
                log(size, f"real vectors M={m} efC={ef_c} ef={ef}: recall@10 {recall:.3f}")
            del index
    for row in rows:
        row["facts"] = facts
    return rows


def print_real_quality(rows: list[dict]) -> None:
    if not rows:
        return
    facts = rows[0]["facts"]
    print(f"\nHNSW on real vectors ({facts['texts']:,} texts cached of {facts['available']:,}; sources "
          f"{facts['sources']}; mean {facts['mean_chars']} characters; the bundled model at its default weights)")
    print(f"{'memories':>9} {'M':>3} {'efC':>4} {'ef':>4} {'recall@10':>10} {'query p50':>10} {'build':>7}")
    for r in rows:
        print(f"{r['size']:>9,} {r['m']:>3} {r['ef_construction']:>4} {r['ef']:>4} {r['recall_at_10']:>10.3f} "
              f"{r['query_p50_ms']:>8.2f}ms {r['build_s']:>6.1f}s{'  <- defaults' if r['default'] else ''}")
    print("recall@10: share of the exact scan's 10 nearest that the index returns among its first 10, asked "
          "for recall/tuning.CANDIDATES neighbours as recall asks; ef is raised to that count by the index.")


# -- phase 3: reopen -------------------------------------------------------------------------------
async def reopen(size: int, data_dir: Path, seed: int, n_queries: int) -> dict:
    """The next session's start: a fresh process opens the saved store and indexes and recalls. Its peak
    RSS is what the sidecar holds for this chat after a restart; the measure phase's "peak after a reopen"
    also carries what that process's build and syncs left in the allocator."""
    gen = ChatGenerator(seed)
    model = VectorModel(gen)
    queries = gen.queries(WARMUP_QUERIES + n_queries, size, "recall")
    qvecs = {q: model.embed(q) for _, q, _ in queries}
    gc.collect()
    out: dict = {"rss_fixtures_mb": rss_now_mb()}
    t = time.perf_counter()
    sc = Services.open(data_dir, embedder=BenchEmbedder(model, qvecs))
    await sc.indexes.vectors.get(CHAT_ID)
    await sc.indexes.lexical.get(CHAT_ID)
    out["open_s"] = time.perf_counter() - t
    for _, q, _ in queries:
        await sc.embeddings.embed_query(q)
    lat = []
    for i, (_, q, _) in enumerate(queries):
        t = time.perf_counter()
        await recall(sc, {"query": q, "budget_tokens": BUDGET_TOKENS})
        if i >= WARMUP_QUERIES:
            lat.append(time.perf_counter() - t)
    out["recall"] = summary_ms(lat)
    out["rss_peak_mb"] = rss_peak_mb()
    await sc.close()
    return out


# -- the parent: runs the phases, prints the table -------------------------------------------------
def run_phase(size: int, phase: str, data_dir: Path, extra: list[str],
              code: Path | None = None) -> tuple[dict, float]:
    """One phase in a fresh process; with `code`, the stbme package found there (another revision's)."""
    cmd = [sys.executable, __file__, "--size", str(size), "--phase", phase, "--data-dir", str(data_dir), *extra]
    env = {**os.environ, "PYTHONPATH": str(code) + os.pathsep + os.environ.get("PYTHONPATH", "")} if code else None
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        raise click.ClickException(f"the {phase} phase for {size:,} memories failed (exit {proc.returncode})")
    return json.loads(proc.stdout.strip().splitlines()[-1]), time.perf_counter() - started


def checkout_code(rev: str, into: Path) -> Path:
    """The server package of git revision `rev`, extracted under `into` (for the same-run baseline)."""
    repo = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev, "server"], stdout=subprocess.PIPE, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "server"


def forget_newer_migrations(db: Path, code: Path) -> None:
    """Let an older revision open a chat populated by this one: drop the record of the migrations it does
    not know (they changed only how stored text is indexed, which a benchmark of speed does not care about)."""
    known = subprocess.run([sys.executable, "-c", "from stbme.store.migrations import MIGRATIONS; "
                            "print('\\n'.join(n for n, _ in MIGRATIONS))"], stdout=subprocess.PIPE, text=True,
                           check=True, env={**os.environ, "PYTHONPATH": str(code)}).stdout.split()
    forget_migrations_except(db, known)


def forget_migrations_except(db: Path, known: list[str]) -> None:
    """Drop the record of every applied migration not named in `known` (see forget_newer_migrations)."""
    conn = sqlite3.connect(db)
    with conn:
        conn.execute(f"DELETE FROM migrations WHERE name NOT IN ({','.join('?' * len(known))})", known)
    conn.close()


def local_query_ms(calls: int = 20) -> dict:
    """p50 of embedding one query with the bundled local model (what a recall with a new query adds)."""
    try:
        from stbme.embed.local import LocalEmbedder

        emb = LocalEmbedder()
        emb.load()
        emb.embed_query_sync("warm-up query")
        times = []
        for i in range(calls):
            text = f"What did Mira hide in the tavern before the storm, and why? ({i})"
            t = time.perf_counter()
            emb.embed_query_sync(text)
            times.append(time.perf_counter() - t)
        # What reusing the recent turns' stored vectors saves: embedding two turns (600 characters each,
        # as recall cuts them) as queries.
        gen = ChatGenerator(5)
        turns = [" ".join(gen.message(2 * i + 1).text for _ in range(3))[:600] for i in range(calls)]
        turn_times = []
        for i in range(0, calls, 2):
            t = time.perf_counter()
            emb.embed_query_sync(turns[i])
            emb.embed_query_sync(turns[i + 1])
            turn_times.append(time.perf_counter() - t)
        return {"model": emb.id, "p50_ms": pct(times, 50) * 1000, "calls": calls,
                "turns_p50_ms": pct(turn_times, 50) * 1000}
    except Exception as exc:  # report, don't fail the benchmark
        return {"model": "local", "error": f"{type(exc).__name__}: {exc}"}


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fmt(value, spec=".1f", unit="") -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{value:{spec}}{unit}"


def print_report(env: dict, results: list[dict]) -> None:
    echo = click.echo
    local = env["local_model"]
    echo(f"ST-BME recall benchmark  ({env['cpus']} CPUs: {env['cpu']}; Python {env['python']}, "
         f"SQLite {env['sqlite']}, hnswlib {env['hnswlib']}, numpy {env['numpy']})")
    echo(f"Data: one chat per size: N synthetic roleplay messages (seed {env['seed']}, ~20% Chinese sentences), "
         "one event memory per message, plus 4 core memories;")
    echo("written through the sync use case and ChangeSet.insert_node, with 384-d vectors from a clustered stand-in "
         "for e5 (scripts/_bench_data.py).")
    echo("Recall timings exclude the query embedding: the sidecar's embedder returns precomputed query vectors "
         "and the query LRU is warm.")
    if "p50_ms" in local:
        echo(f"Full cost of a recall with a new query: add {local['p50_ms']:.1f} ms, the p50 of {local['calls']} "
             f"query embeddings with the bundled {local['model']} (LocalEmbedder) on this machine.")
        echo(f"Embedding the request's two recent turns as queries would add {local['turns_p50_ms']:.0f} ms (p50); "
             "recall reuses the vectors their messages already have instead.")
    else:
        echo(f"(The local model could not be timed: {local['error']})")
    echo(f"Recall: {env['queries']} queries per size after {WARMUP_QUERIES} warm-up, one at a time, budget "
         f"{BUDGET_TOKENS} tokens. Sync: one appended message (tail of {SYNC_TAIL} + chain anchors), "
         f"{env['syncs']} after {WARMUP_SYNCS} warm-up.")
    echo("")

    rows: list[tuple[str, list[str] | None]] = []

    def section(title: str) -> None:
        rows.append((title, None))

    def line(label: str, fn) -> None:
        rows.append(("  " + label, [fn(r) for r in results]))

    rows.append(("memories", [f"{r['size']:,}" for r in results]))
    line("populate (sync + vectors + insert), s", lambda r: fmt(r["populate"]["populate_s"]))
    line("database size, MB", lambda r: fmt(r["populate"]["db_mb"], ".0f"))
    section("cold start (no saved index)")
    line("HNSW build (indexes.vectors.rebuild), s", lambda r: fmt(r["hnsw_build_s"], ".2f"))
    line("lexical build (indexes.lexical.get), s", lambda r: fmt(r["lexical_build_s"], ".2f"))
    line("first recall after both, ms", lambda r: fmt(r["first_recall_ms"]))
    section("reopen with a saved index")
    line("save HNSW (indexes.vectors.save_dirty), s", lambda r: fmt(r["index_save_s"], ".2f"))
    line("save BM25 (indexes.lexical.save_dirty), s", lambda r: fmt(r["lexical_save_s"], ".2f"))
    line("open + HNSW load + reconcile, s", lambda r: fmt(r["reopen_hnsw_s"], ".2f"))
    line("BM25 load + reconcile, s", lambda r: fmt(r["reopen_lexical_s"], ".2f"))
    line("first recall, ms", lambda r: fmt(r["reopen_first_recall_ms"]))
    section("recall latency, ms (the recall use case: the full read path)")
    line("p50", lambda r: fmt(r["recall"]["p50"], ".2f"))
    line("p95", lambda r: fmt(r["recall"]["p95"], ".2f"))
    line("p99", lambda r: fmt(r["recall"]["p99"], ".2f"))
    line("CPU per recall (all threads of the process), ms", lambda r: fmt(r["recall_cpu_ms"], ".2f"))
    line("p50 by query kind: rare / topic / miss",
         lambda r: " / ".join(fmt(r["recall_by_kind_p50_ms"].get(k), ".1f") for k in ("rare", "topic", "miss")))
    line("the extension's request (input + 4 recent turns) p50 / p95",
         lambda r: f"{fmt(r['recall_real']['p50'], '.2f')} / {fmt(r['recall_real']['p95'], '.2f')}")
    line("  recent turns embedded as queries (0 = reused)", lambda r: str(r["recent_turns_embedded"]))
    if any("baseline" in r for r in results):
        rev = next(r["baseline"]["rev"] for r in results if "baseline" in r)
        line(f"revision {rev} on a copy of the chat, p50 / p95",
             lambda r: f"{fmt(r['baseline']['recall']['p50'], '.2f')} / {fmt(r['baseline']['recall']['p95'], '.2f')}"
             if "baseline" in r else "-")
        line("  this code / that revision, p50 (p95)",
             lambda r: f"{fmt(r['recall']['p50'] / r['baseline']['recall']['p50'], '.2f', 'x')} "
                       f"({fmt(r['recall']['p95'] / r['baseline']['recall']['p95'], '.2f', 'x')})" if "baseline" in r else "-")
        line("  the extension's request: this / that, p50",
             lambda r: fmt(r['recall_real']['p50'] / r['baseline']['recall_real']['p50'], '.2f', 'x')
             if "baseline" in r else "-")
        line("  CPU ms per recall: this / that (ratio)",
             lambda r: f"{fmt(r['recall_cpu_ms'], '.2f')} / {fmt(r['baseline']['recall_cpu_ms'], '.2f')} "
                       f"({fmt(r['recall_cpu_ms'] / r['baseline']['recall_cpu_ms'], '.2f', 'x')})" if "baseline" in r else "-")
        line("  CPU ms per extension request: this / that (ratio)",
             lambda r: f"{fmt(r['recall_real_cpu_ms'], '.2f')} / {fmt(r['baseline']['recall_real_cpu_ms'], '.2f')} "
                       f"({fmt(r['recall_real_cpu_ms'] / r['baseline']['recall_real_cpu_ms'], '.2f', 'x')})"
             if "baseline" in r else "-")
        line("  other processes' CPU during that revision's recalls",
             lambda r: fmt(r["baseline"]["other_cpu_recall"], ".2f") if "baseline" in r else "-")
    line("rare-name queries whose block names it", lambda r: fmt(r["rare_name_in_block"], ".3f"))
    line("memories / tokens per block (mean)",
         lambda r: f"{r['recall_memories_mean']:.1f} / {r['recall_tokens_mean']:.0f}")
    section("baseline: brute-force numpy scan (matrix @ q, argpartition top 40)")
    line("p50, ms", lambda r: fmt(r["brute"]["p50"], ".2f"))
    line("p95, ms", lambda r: fmt(r["brute"]["p95"], ".2f"))
    line("product / baseline, p50", lambda r: fmt(r["recall"]["p50"] / r["brute"]["p50"], ".1f", "x"))
    line("product / baseline, p95", lambda r: fmt(r["recall"]["p95"] / r["brute"]["p95"], ".1f", "x"))
    section("retrievers alone")
    line("HNSW query (k=40) p50, ms", lambda r: fmt(r["hnsw_only"]["p50"], ".3f"))
    line("HNSW / brute force, p50", lambda r: fmt(r["hnsw_only"]["p50"] / r["brute"]["p50"], ".2f", "x"))
    line("HNSW recall@10 vs brute force", lambda r: fmt(r["hnsw_recall_at_10"], ".3f"))
    line("  by query kind: rare / topic / miss", lambda r: " / ".join(
        fmt(r["hnsw_recall_at_10_by_kind"].get(k), ".2f") for k in ("rare", "topic", "miss")))
    line("  rare queries: true top 1 in HNSW top 10", lambda r: fmt(r["hnsw_rare_top1_found"], ".3f"))
    line("BM25 search p50, ms", lambda r: fmt(r["bm25_only"]["p50"], ".3f"))
    section("sync of one appended message, ms")
    line("p50", lambda r: fmt(r["sync"]["p50"], ".2f"))
    line("p95", lambda r: fmt(r["sync"]["p95"], ".2f"))
    section("memory, MB")
    line("peak RSS: cold build, recall, sync", lambda r: fmt(r["rss_peak_mb"], ".0f"))
    line("current RSS after those", lambda r: fmt(r["rss_now_mb"], ".0f"))
    line("of which before opening the sidecar", lambda r: fmt(r["rss_fixtures_mb"], ".0f"))
    line("peak after a reopen in the same process", lambda r: fmt(r["rss_peak_after_reopen_mb"], ".0f"))
    line("peak of a fresh process reopening it", lambda r: fmt(r["rss_reopen_fresh_mb"], ".0f"))
    line("  of which before opening the sidecar", lambda r: fmt(r["reopen_fresh"]["rss_fixtures_mb"], ".0f"))
    line("  its recall p50 / p95, ms", lambda r: f"{fmt(r['reopen_fresh']['recall']['p50'], '.2f')} / "
         f"{fmt(r['reopen_fresh']['recall']['p95'], '.2f')}")
    line("peak with the baseline's matrix too", lambda r: fmt(r["rss_peak_with_baseline_mb"], ".0f"))
    line("saved index files", lambda r: fmt(r["index_file_mb"], ".0f"))
    section("run")
    line("other processes' CPU: recalls / whole measure", lambda r: f"{fmt(r['other_cpu_recall'], '.2f')} / "
         f"{fmt(r['other_cpu_measure'], '.2f')}")
    line("query vectors not precomputed (0 = ok)", lambda r: str(r["query_misses"]))
    line("wall time populate + measure, s", lambda r: f"{r['populate_wall_s']:.0f} + {r['measure_wall_s']:.0f}")
    label_w = max(len(label) for label, _ in rows if _ is not None) + 2
    width = max(len(v) for _, vals in rows if vals for v in vals) + 3
    for label, vals in rows:
        echo(label if vals is None else f"{label:<{label_w}}" + "".join(f"{v:>{width}}" for v in vals))
    echo("")
    echo("targets")
    by_size = {r["size"]: r for r in results}
    for size, key, limit, label in TARGETS:
        r = by_size.get(size)
        if r is None:
            echo(f"  {label:<40}{'not run':>12}")
            continue
        value = r[key]
        mb = key.startswith("rss")
        ok = value < limit if mb else value <= limit
        echo(f"  {label:<40}{fmt(value, '.0f' if mb else '.2f', ' MB' if mb else ' ms'):>12}  "
             f"{'PASS' if ok else 'MISS'}")
    echo("Peak RSS: high-water mark of the size's measure process (fresh) through the cold build, the recalls "
         "and the syncs,")
    echo("before the reopen and the baseline's matrix. 'Other processes' CPU' is in cores (of "
         f"{env['cpus']}); above ~0.3 the timings are noisy.")
    noisy = [r for r in results if max(r["other_cpu_recall"] or 0, r["other_cpu_measure"] or 0) > 0.3]
    if noisy:
        names = ", ".join(f"{r['size']:,}" for r in noisy)
        echo(f"Note: other processes used CPU while {names} was measured; rerun that size to check the figures.")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--sizes", default="1000,10000,100000", show_default=True,
              help="Comma-separated chat sizes (memories), run in increasing order.")
@click.option("--queries", default=200, show_default=True, type=click.IntRange(1),
              help="Timed recall queries per size (after 20 warm-up queries).")
@click.option("--syncs", default=100, show_default=True, type=click.IntRange(1),
              help="Timed one-message syncs per size (after 10 warm-up syncs).")
@click.option("--seed", default=1, show_default=True, help="Seed of the synthetic chat and queries.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of the table.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the chats here (one subdirectory per size) instead of a temp dir deleted after.")
@click.option("--baseline", metavar="REV",
              help="Also measure the read path of this git revision (its server/ package) on a copy of each chat,"
                   " in the same run, and print the ratios (e.g. --baseline main).")
@click.option("--real-vectors/--no-real-vectors", default=True, show_default=True,
              help="Also measure HNSW recall@10 on the bundled model's vectors of real chat text (cached in "
                   ".eval-cache/hnsw-real; embedding 100k texts takes about a CPU hour the first time).")
@click.option("--real-only", is_flag=True, help="Only the real-vector HNSW section.")
@click.option("--real-cached", is_flag=True, help="The real-vector section on the vectors cached so far (no embedding).")
@click.option("--size", type=int, hidden=True, help="Internal: run one phase for this size.")
@click.option("--phase", type=click.Choice(["populate", "measure", "reopen"]), hidden=True, help="Internal.")
def main(sizes: str, queries: int, syncs: int, seed: int, as_json: bool, data_dir: Path | None,
         baseline: str | None, real_vectors: bool, real_only: bool, real_cached: bool, size: int | None,
         phase: str | None) -> None:
    """Benchmark recall, sync, index build and memory at several chat sizes."""
    if size is not None:  # a child process: one phase for one size, JSON on stdout
        if phase is None or data_dir is None:
            raise click.UsageError("--size needs --phase and --data-dir")
        if phase == "populate":
            result = asyncio.run(populate(size, data_dir, seed))
        elif phase == "reopen":
            result = asyncio.run(reopen(size, data_dir, seed, queries))
        else:
            result = asyncio.run(measure(size, data_dir, seed, queries, syncs))
        click.echo(json.dumps(result))
        return

    if real_only:
        rows = hnsw_real_quality(cached_only=real_cached)
        click.echo(json.dumps(rows, indent=2)) if as_json else print_real_quality(rows)
        return
    try:
        size_list = sorted({int(s) for s in sizes.split(",") if s.strip()})
    except ValueError:
        raise click.BadParameter("use comma-separated whole numbers, e.g. 1000,10000", param_hint="--sizes")
    if not size_list or min(size_list) < 50:
        raise click.BadParameter("sizes must be at least 50", param_hint="--sizes")
    root = data_dir or Path(tempfile.mkdtemp(prefix="stbme-bench-"))
    extra = ["--queries", str(queries), "--syncs", str(syncs), "--seed", str(seed)]
    base_code = checkout_code(baseline, root / "baseline-code") if baseline else None
    results = []
    try:
        for n in size_list:
            chat_dir = root / f"chat-{n}"
            if chat_dir.exists() and any(chat_dir.iterdir()):
                raise click.ClickException(f"{chat_dir} is not empty; use another --data-dir")
            pop, pop_wall = run_phase(n, "populate", chat_dir, extra)
            if base_code is not None:   # on a copy: a measure syncs messages and saves indexes
                base_dir = root / f"chat-{n}-baseline"
                shutil.copytree(chat_dir, base_dir)
                forget_newer_migrations(base_dir / "stbme.sqlite3", base_code)
                base, _ = run_phase(n, "measure", base_dir, extra, code=base_code)
                shutil.rmtree(base_dir, ignore_errors=True)
            res, res_wall = run_phase(n, "measure", chat_dir, extra)
            fresh, _ = run_phase(n, "reopen", chat_dir, extra)
            res.update(populate=pop, populate_wall_s=pop_wall, measure_wall_s=res_wall, reopen_fresh=fresh,
                       rss_reopen_fresh_mb=fresh["rss_peak_mb"])
            if base_code is not None:
                res["baseline"] = {"rev": baseline, "code": base["code"], "recall": base["recall"],
                                   "recall_real": base["recall_real"], "other_cpu_recall": base["other_cpu_recall"],
                                   "recall_cpu_ms": base["recall_cpu_ms"],
                                   "recall_real_cpu_ms": base["recall_real_cpu_ms"]}
            results.append(res)
            click.echo(f"[{n:>7,}] recall p50 {res['recall']['p50']:.2f} ms, p95 {res['recall']['p95']:.2f} ms; "
                       f"brute force p50 {res['brute']['p50']:.2f} ms; peak RSS {res['rss_peak_mb']:.0f} MB",
                       err=True)
    finally:
        if data_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    click.echo("timing the local model's query embedding", err=True)
    env = {
        "cpus": os.cpu_count(), "cpu": cpu_name(), "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version, "hnswlib": _version("hnswlib"),
        "numpy": np.__version__, "seed": seed, "queries": queries, "syncs": syncs,
        "local_model": local_query_ms(),
    }
    real = hnsw_real_quality(cached_only=real_cached) if real_vectors else []
    if as_json:
        click.echo(json.dumps({"env": env, "results": results, "hnsw_real": real}, indent=2))
    else:
        print_report(env, results)
        print_real_quality(real)


if __name__ == "__main__":
    main()
