#!/usr/bin/env python
"""Authority bridge benchmark: Trivium search-hybrid at 10k and 100k vectors, beside an exact numpy scan.

For each size it fills one Trivium database the way ST-BME does (bulk-upsert chunks of 1000 items of
384-d vectors with ST-BME-like payloads, in one namespace), then times, for the same queries:
  - search-hybrid through the bridge's service (JSON-shaped body in, vector list parsed, HNSW + BM25,
    reciprocal-rank fusion, payloads fetched from SQLite, answer built): what a request costs minus HTTP;
  - the exact baseline in the same process: a numpy scan of all vectors (normalised matrix @ query,
    argpartition, sort) for the vector top-k;
  - the same search-hybrid request with that exact scan in place of HNSW (what HNSW saves);
and prints p50/p95 of each, the ratios, HNSW's recall@10 against the exact scan, the fill time and the
time to build the caches on first use. numpy/BLAS are pinned to one thread before numpy is imported so the
baseline is a steady single-core scan (hnswlib's queries are single-threaded too).

    .venv/bin/python scripts/bench_authority.py                 # 10k and 100k: a few minutes on 2 cores
    .venv/bin/python scripts/bench_authority.py --sizes 10000 --queries 100
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy is imported, or the BLAS pool is already sized

import asyncio  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import click  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_data import ChatGenerator, VectorModel  # noqa: E402
from stbme.authority import AuthorityService  # noqa: E402
from stbme.authority.sessions import Sessions  # noqa: E402
from stbme.store import Store  # noqa: E402

NAMESPACE = "st-bme::bench chat"
CHUNK = 1000        # ST-BME's default authorityVectorSyncChunkSize
TOP_K = 24          # what ST-BME's candidate provider asks for: max(4 * topK, 24) with small topK
WARMUP = 20


def payload(i: int, text: str) -> dict:
    node = f"node-{i:07d}"
    return {"chatId": "bench chat", "nodeId": node, "externalId": node, "collectionId": NAMESPACE,
            "type": "event", "archived": False, "seqStart": i, "seqEnd": i, "sourceFloor": i, "index": i,
            "importance": 5, "updatedAt": 1_700_000_000_000 + i, "scopeLayer": "objective", "text": text,
            "title": "", "summaryPreview": text[:120], "contentHash": i * 2654435761 % 2 ** 32,
            "modelScope": "authority|authority-trivium|direct|openai|bench|e5-small", "revision": 1}


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


async def run_size(size: int, queries: int, gen: ChatGenerator, model: VectorModel) -> dict:
    with tempfile.TemporaryDirectory(prefix="stbme-bench-authority-") as tmp:
        store = Store.open(Path(tmp) / "stbme.sqlite3")
        service = AuthorityService(Path(tmp) / "authority", store, lambda: None)
        session = Sessions().open({"extensionId": "third-party/st-bme",
                                   "declaredPermissions": {"trivium": {"private": True}}})
        trivium = service.extension(session).trivium
        try:
            vectors = np.zeros((size, model.dim), np.float32)
            started = time.perf_counter()
            for start in range(0, size, CHUNK):
                items = []
                for i in range(start, min(size, start + CHUNK)):
                    text = gen.message(i).text
                    vectors[i] = model.embed(text)
                    items.append({"externalId": f"node-{i:07d}", "namespace": NAMESPACE,
                                  "vector": vectors[i].tolist(), "payload": payload(i, text)})
                await trivium.call("bulk-upsert", {"database": "st_bme_vectors", "items": items})
            fill_s = time.perf_counter() - started

            qs = gen.queries(queries + WARMUP, size, salt="authority")
            bodies = [{"database": "st_bme_vectors", "vector": model.embed(text).tolist(), "topK": TOP_K,
                       "queryText": text} for _, text, _ in qs]
            started = time.perf_counter()
            await trivium.call("search-hybrid", bodies[0])  # loads (builds) the HNSW and BM25 caches
            cache_build_s = time.perf_counter() - started

            matrix = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

            def exact(query: np.ndarray) -> np.ndarray:
                sims = matrix @ (query / np.linalg.norm(query))
                top = np.argpartition(-sims, TOP_K)[:TOP_K]
                return top[np.argsort(-sims[top])]

            _, db = await trivium.get({"database": "st_bme_vectors"})
            # node-i was the i-th item written: its internal id is i + 1
            internal = np.arange(1, size + 1)
            hnsw_hits = db.caches.vector_hits

            def exact_hits(query: np.ndarray, k: int) -> list[tuple[int, float]]:
                sims = matrix @ (query / np.linalg.norm(query))
                top = np.argpartition(-sims, k)[:k]
                top = top[np.argsort(-sims[top])]
                return [(int(internal[i]), float(sims[i])) for i in top]

            hybrid_ms, exact_ms, hybrid_exact_ms, hnsw_recall = [], [], [], []
            for n, body in enumerate(bodies):
                q = np.asarray(body["vector"], np.float32)
                t0 = time.perf_counter()
                answer = await trivium.call("search-hybrid", body)
                t1 = time.perf_counter()
                truth = exact(q)
                t2 = time.perf_counter()
                db.caches.vector_hits = exact_hits  # the same request with an exact scan instead of HNSW
                try:
                    await trivium.call("search-hybrid", body)
                finally:
                    db.caches.vector_hits = hnsw_hits
                t3 = time.perf_counter()
                if n < WARMUP:
                    continue
                assert answer["results"], "search-hybrid found nothing"
                hybrid_ms.append((t1 - t0) * 1000)
                exact_ms.append((t2 - t1) * 1000)
                hybrid_exact_ms.append((t3 - t2) * 1000)
                pool = TOP_K * 4 + 20  # what search-hybrid asks HNSW for (trivium.search)
                ann = [i for i, _ in hnsw_hits(q, pool)[:10]]
                hnsw_recall.append(len(set(ann) & {int(internal[i]) for i in truth[:10]}) / 10)
            return {"size": size, "fill_s": fill_s, "cache_build_s": cache_build_s,
                    "hybrid_p50": percentile(hybrid_ms, 50), "hybrid_p95": percentile(hybrid_ms, 95),
                    "exact_p50": percentile(exact_ms, 50), "exact_p95": percentile(exact_ms, 95),
                    "hx_p50": percentile(hybrid_exact_ms, 50), "hx_p95": percentile(hybrid_exact_ms, 95),
                    "recall10": float(np.mean(hnsw_recall))}
        finally:
            await service.close()
            store.close()


@click.command()
@click.option("--sizes", default="10000,100000", show_default=True, help="Comma-separated vector counts.")
@click.option("--queries", default=200, show_default=True, help="Timed queries per size (after 20 warm-ups).")
def main(sizes: str, queries: int) -> None:
    """Trivium search-hybrid latency against an exact numpy scan of the same vectors."""
    gen = ChatGenerator(seed=7)
    model = VectorModel(gen)
    rows = []
    for size in [int(s) for s in sizes.split(",")]:
        click.echo(f"filling and measuring {size} vectors ...", err=True)
        rows.append(asyncio.run(run_size(size, queries, gen, model)))
    click.echo(f"\nTrivium search-hybrid (top {TOP_K}, {model.dim}-d, {queries} queries) vs exact numpy scan "
               "(1 BLAS thread)")
    click.echo(f"{'vectors':>8} {'fill s':>7} {'build s':>8} | {'hybrid p50':>10} {'p95':>8} | {'scan p50':>9} "
               f"{'p95':>8} | {'hyb+scan p50':>12} {'p95':>8} | {'scan/hybrid':>11} {'hyb+scan/hybrid':>15} "
               f"{'HNSW recall@10':>14}")
    for r in rows:
        click.echo(f"{r['size']:>8} {r['fill_s']:>7.1f} {r['cache_build_s']:>8.1f} | {r['hybrid_p50']:>8.2f}ms "
                   f"{r['hybrid_p95']:>6.2f}ms | {r['exact_p50']:>7.2f}ms {r['exact_p95']:>6.2f}ms | "
                   f"{r['hx_p50']:>10.2f}ms {r['hx_p95']:>6.2f}ms | {r['exact_p50'] / r['hybrid_p50']:>10.2f}x "
                   f"{r['hx_p50'] / r['hybrid_p50']:>14.2f}x {r['recall10']:>14.3f}")
    click.echo("hybrid   = search-hybrid minus HTTP: body parsing, HNSW + BM25, fusion, payload fetch, answer\n"
               "scan     = the exact numpy scan alone (vector top-k, no text, no payloads)\n"
               "hyb+scan = the same search-hybrid request with the exact scan in place of HNSW")


if __name__ == "__main__":
    main()
