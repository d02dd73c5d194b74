#!/usr/bin/env python
"""Loading a small chat's saved HNSW index: the scanned copy read from its file against rebuilt from the graph.

A chat of up to EXACT_MAX memories is searched by a scan of a copy of its vectors (server/stbme/index/hnsw.py).
A save now writes that copy beside the index; a save without it (older, or a damaged file) rebuilds it from
the graph through hnswlib's get_items, as every load did before. Both run here in ONE process, alternating,
on one index: the baseline saves it with no copy (as the previous revision did) and loads that save.

The vectors are random points near a common centre (cosine about .9, as a roleplay chat's memories are);
a load's cost does not depend on what they say.

    .venv/bin/python scripts/bench_index_load.py                    # 1,000, 5,000 and 10,000 memories, 384-d
    .venv/bin/python scripts/bench_index_load.py --sizes 10000 --runs 21
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_ingest_parts import pct  # noqa: E402
from stbme.index import hnsw  # noqa: E402
from stbme.index.hnsw import ChatIndex  # noqa: E402


def cone(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    centre = rng.normal(size=dim)
    centre /= np.linalg.norm(centre)
    v = centre + 0.5 * rng.normal(size=(n, dim)) / np.sqrt(dim)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(size: int, dim: int, runs: int, into: Path) -> dict:
    rng = np.random.default_rng(size)
    index = ChatIndex(dim, "bench", capacity=size)
    index.upsert([f"n{i}" for i in range(size)], cone(rng, size, dim), [1] * size)
    index.remove([f"n{i}" for i in range(0, size, 50)])   # a few archived memories, as a real chat has
    if not index.exact:
        raise click.UsageError(f"{size} memories is past EXACT_MAX ({hnsw.EXACT_MAX}): no scanned copy to load")

    with_copy, without_copy = into / f"with-{size}", into / f"without-{size}"
    save_with, save_without = [], []
    for _ in range(max(3, runs // 3)):
        save_with.append(timed(lambda: index.save(with_copy)))
        # The previous save, as an older revision wrote it: the same index with no copy (put back at once).
        kept, index._exact = index._exact, None
        try:
            save_without.append(timed(lambda: index.save(without_copy)))
        finally:
            index._exact = kept
    load_with, load_without = [], []
    for run in range(runs):
        order = [(with_copy, load_with), (without_copy, load_without)]
        for base, out in (order if run % 2 == 0 else order[::-1]):
            out.append(timed(lambda: ChatIndex.load(base, embedder_id="bench", dim=dim)))
    question = cone(rng, 1, dim)[0]
    for base in (with_copy, without_copy):
        if ChatIndex.load(base, embedder_id="bench", dim=dim).query(question, 10) != index.query(question, 10):
            raise SystemExit(f"a loaded index answers differently from the one saved ({base.name})")
    copy_mb = sum(p.stat().st_size for p in with_copy.parent.glob(f"{with_copy.name}.*.npy")) / 2**20
    index_mb = sum(p.stat().st_size for p in with_copy.parent.glob(f"{with_copy.name}.*.bin")) / 2**20
    return {"size": size, "load_with": load_with, "load_without": load_without, "save_with": save_with,
            "save_without": save_without, "copy_mb": copy_mb, "index_mb": index_mb}


@click.command()
@click.option("--sizes", default="1000,5000,10000", show_default=True, help="Memories per chat, comma-separated.")
@click.option("--dim", default=384, show_default=True, help="Vector size (the bundled model's is 384).")
@click.option("--runs", default=15, show_default=True, help="Loads of each kind per size.")
def main(sizes: str, dim: int, runs: int) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-index-load-") as tmp:
        for size in (int(s) for s in sizes.split(",")):
            click.echo(f"{size:,} memories: building, saving, loading {runs} times each way ...", err=True)
            rows.append(measure(size, dim, runs, Path(tmp)))
    ms = lambda v, q: f"{pct(v, q) * 1000:8.1f}"   # noqa: E731
    click.echo(f"{'memories':>9} | {'load, copy read':>22} | {'load, copy rebuilt':>22} | {'ratio p50':>9} |"
               f" {'save with copy':>14} | {'save without':>12} | files MB (index + copy)")
    click.echo(f"{'':>9} | {'p50 ms    p95 ms':>22} | {'p50 ms    p95 ms':>22} | {'':>9} | {'p50 ms':>14} |"
               f" {'p50 ms':>12} |")
    for r in rows:
        click.echo(f"{r['size']:>9,} | {ms(r['load_with'], 50)}  {ms(r['load_with'], 95)}    |"
                   f" {ms(r['load_without'], 50)}  {ms(r['load_without'], 95)}    |"
                   f" {pct(r['load_with'], 50) / pct(r['load_without'], 50):8.2f}x |"
                   f" {ms(r['save_with'], 50):>14} | {ms(r['save_without'], 50):>12} |"
                   f" {r['index_mb']:.1f} + {r['copy_mb']:.1f}")


if __name__ == "__main__":
    main()
