#!/usr/bin/env python
"""What a recall waits while a chat's HNSW index is saved: this tree against another revision, in ONE process.

Recall queries a chat's index on the event loop; the server saves it in a worker thread a few seconds after
a write. Here a thread plays recall (a query for 100 neighbours, again and again) while the main thread
saves, and the queries that overlap the save are timed. Both revisions' ChatIndex get the same vectors and
alternate, save for save. What is left when nothing waits on a lock is hnswlib's own save_index, which holds
Python's GIL while it writes (about 0.1-0.3 s at 100,000 memories here): no lock can win that back.

The vectors are random points near a common centre (cosine about .9, as a roleplay chat's memories are).

    .venv/bin/python scripts/bench_index_save.py                          # against HEAD, 10,000 and 100,000
    .venv/bin/python scripts/bench_index_save.py --baseline 0014634 --sizes 100000 --runs 9
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench_ingest_parts import pct  # noqa: E402
from bench_index_load import cone  # noqa: E402
from bench_read_path_ab import extract_baseline  # noqa: E402

BATCH = 5_000


def build(chat_index_class, vectors: np.ndarray):
    index = chat_index_class(vectors.shape[1], embedder_id="bench", capacity=len(vectors))
    for start in range(0, len(vectors), BATCH):
        part = vectors[start:start + BATCH]
        index.upsert([f"m{i:06}" for i in range(start, start + len(part))], part, [1] * len(part))
    return index


def save_while_asked(index, query: np.ndarray, into: Path) -> tuple[float, list[float]]:
    """One save, timed, and the latencies of the queries asked while it ran."""
    stop = threading.Event()
    asked: list[tuple[float, float]] = []   # (start, latency) of every query

    def recall():
        while not stop.is_set():
            started = time.perf_counter()
            index.query(query, 100)
            asked.append((started, time.perf_counter() - started))

    thread = threading.Thread(target=recall)
    thread.start()
    while len(asked) < 20:   # the asker runs before the save starts
        time.sleep(0.001)
    started = time.perf_counter()
    index.save(into / "chat")
    ended = time.perf_counter()
    stop.set()
    thread.join()
    during = [lat for at, lat in asked if at + lat >= started and at <= ended]
    return ended - started, during


@click.command()
@click.option("--baseline", default="HEAD", show_default=True, help="The git revision to compare this tree with.")
@click.option("--sizes", default="10000,100000", show_default=True, help="Memories in the chat, comma-separated.")
@click.option("--dim", default=384, show_default=True)
@click.option("--runs", default=7, show_default=True, type=click.IntRange(min=1), help="Saves per side and size.")
def main(baseline: str, sizes: str, dim: int, runs: int) -> None:
    """Query latency during a save, and the save's own time, this tree against BASELINE."""
    root = Path(tempfile.mkdtemp(prefix="stbme-save-"))
    try:
        extract_baseline(baseline, root)
        sys.path.insert(0, str(root))
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
        from stbme.index.hnsw import ChatIndex as New
        from stbme_base.index.hnsw import ChatIndex as Base
        rng = np.random.default_rng(7)
        for size in (int(s) for s in sizes.split(",")):
            vectors = cone(rng, size, dim)
            query = cone(rng, 1, dim)[0]
            sides = {"base": build(Base, vectors), "new": build(New, vectors)}
            saves = {"base": [], "new": []}
            worst = {"base": [], "new": []}
            during = {"base": [], "new": []}
            with click.progressbar(length=2 * runs, label=f"[{size:>7,}] saves", file=sys.stderr) as bar:
                for run in range(runs):
                    for name in (("base", "new") if run % 2 == 0 else ("new", "base")):
                        into = root / f"{name}-{size}"
                        into.mkdir(exist_ok=True)
                        took, latencies = save_while_asked(sides[name], query, into)
                        saves[name].append(took)
                        worst[name].append(max(latencies, default=0.0))
                        during[name].extend(latencies)
                        bar.update(1)
            click.echo(f"{size:,} memories, {runs} saves a side, this tree against {baseline}")
            for name in ("base", "new"):
                click.echo(f"  {name:4}  save p50 {statistics.median(saves[name]) * 1000:7.1f} ms   "
                           f"a query during it: p50 {statistics.median(during[name]) * 1000:6.2f} ms, "
                           f"p99 {pct(during[name], 99) * 1000:7.1f} ms, worst per save (median) "
                           f"{statistics.median(worst[name]) * 1000:7.1f} ms, queries {len(during[name])}")
            click.echo(f"  new/base: worst wait per save {statistics.median(worst['new']) / statistics.median(worst['base']):.3f}x, "
                       f"p99 {pct(during['new'], 99) / pct(during['base'], 99):.3f}x, "
                       f"save {statistics.median(saves['new']) / statistics.median(saves['base']):.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
