#!/usr/bin/env python
"""The read path of this tree against another revision's, in ONE process, question by question.

scripts/bench_recall.py --baseline measures the two revisions one after the other in separate processes;
on this shared machine two such runs of the very same code differ by up to 15%, more than most changes
to the read path are worth. Here both run in one process on two copies of one populated chat: the
revision's `server/stbme` is extracted as the package `stbme_base` (the package imports itself only
relatively, so the copy runs its own code), and every query is asked of both, the order alternating. The
ratio of their p50s and the median of the per-query ratios come from the same moments of the machine.
Run it on an idle machine and read the per-query median first: two copies of the same code gave 0.997 to
0.999 idle, but under scripts/cpu_load.sh a p50 ratio of 1.43 (per-query median 1.025) over 100 queries.
It also counts the queries whose recalled memories differ: a change meant only for speed shows none. Both
sides load one saved index, built once by this tree: hnswlib builds its graph on every core, so two builds of
a chat past EXACT_MAX differ, and at 100,000 memories 12 of 400 recalls of the same code differed by that alone.

    .venv/bin/python scripts/bench_read_path_ab.py                       # this tree against HEAD, 10k
    .venv/bin/python scripts/bench_read_path_ab.py --baseline 1e4dddf --size 100000 --queries 200
    .venv/bin/python scripts/bench_read_path_ab.py --about-now      # every query asks how things stand now
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

import bench_recall as br
from _bench_data import BenchEmbedder, ChatGenerator, VectorModel

ROOT = Path(__file__).resolve().parent.parent
BUDGET_TOKENS = br.BUDGET_TOKENS


def extract_baseline(rev: str, into: Path) -> None:
    """`server/stbme` of `rev` as the package `stbme_base` under `into` (put on sys.path by the caller)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "server/stbme"], stdout=subprocess.PIPE,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "server" / "stbme").rename(into / "stbme_base")


async def build_indexes(data_dir: Path, model: VectorModel) -> None:
    """The chat's HNSW and keyword indexes built by this tree and saved, for both sides to load."""
    from stbme.services import Services
    sc = Services.open(data_dir, embedder=BenchEmbedder(model))
    await sc.indexes.vectors.rebuild(br.CHAT_ID)
    await sc.indexes.lexical.get(br.CHAT_ID)
    await sc.indexes.vectors.save_dirty()
    await sc.indexes.lexical.save_dirty()
    await sc.close()


async def open_side(package: str, data_dir: Path, model: VectorModel, queries: list[str]):
    """A Services of `package` on `data_dir`, its saved indexes loaded and the query vectors warm: an ask(body)
    call. (A revision that cannot read a file rebuilds it: the keyword index the same, the graph not quite.)"""
    services = __import__(f"{package}.services", fromlist=["Services"])
    bodies = __import__(f"{package}.api.bodies", fromlist=["parse_recall"])
    sc = services.Services.open(data_dir, embedder=BenchEmbedder(model, {q: model.embed(q) for q in queries}))
    await sc.indexes.vectors.get(br.CHAT_ID)
    await sc.indexes.lexical.get(br.CHAT_ID)
    for q in queries:
        await sc.embeddings.embed_query(q)
    max_chars = sc.settings["server.max_message_chars"]

    async def ask(body: dict) -> dict:
        return await sc.recall.recall(br.CHAT_ID, bodies.parse_recall(body, max_chars=max_chars))
    return sc, ask


def as_a_question_about_now(query: str) -> str:
    """The query asked about the present ("Where did Mara hide the key now?"): the latest-word stage
    (recall/current.py) reads every candidate for such a question, and few of the generator's queries ask one."""
    return query.rstrip("?.! ") + " now?"


async def compare(size: int, n_queries: int, root: Path, *, now: bool = False) -> dict:
    gen = ChatGenerator(1)
    model = VectorModel(gen)
    queries = [q for _, q, _ in gen.queries(br.WARMUP_QUERIES + n_queries, size, "recall")]
    queries = [as_a_question_about_now(q) for q in queries] if now else queries
    recent = [{"role": m.role, "name": m.name, "text": m.text} for m in (gen.message(i) for i in range(size - 4, size))]
    sides, closing = {}, []
    for name, package in (("base", "stbme_base"), ("new", "stbme")):
        sc, ask = await open_side(package, root / name, model, queries)
        closing.append(sc)
        for q in queries[:br.WARMUP_QUERIES]:
            await ask({"query": q, "budget_tokens": BUDGET_TOKENS})
        sides[name] = ask
    latency = {"base": [], "new": []}
    same = 0
    with click.progressbar(length=2 * n_queries, label="paired recalls", file=sys.stderr) as bar:
        for turns in (False, True):   # the bare question, then the extension's request (4 recent turns)
            for i, q in enumerate(queries[br.WARMUP_QUERIES:]):
                body = {"query": q, "budget_tokens": BUDGET_TOKENS, **({"recent": recent} if turns else {})}
                recalled = {}
                for name in (("base", "new") if i % 2 == 0 else ("new", "base")):
                    started = time.perf_counter()
                    result = await sides[name](body)
                    latency[name].append(time.perf_counter() - started)
                    recalled[name] = [m["id"] for m in result["memories"]]
                same += recalled["base"] == recalled["new"]
                bar.update(1)
    for sc in closing:
        await sc.close()
    base, new = latency["base"], latency["new"]
    ratios = [n / b for b, n in zip(base, new)]
    return {"base_p50_ms": statistics.median(base) * 1000, "new_p50_ms": statistics.median(new) * 1000,
            "base_p95_ms": br.pct(base, 95) * 1000, "new_p95_ms": br.pct(new, 95) * 1000,
            "ratio_of_p50": statistics.median(new) / statistics.median(base),
            "median_paired_ratio": statistics.median(ratios),
            "new_faster_share": sum(r < 1 for r in ratios) / len(ratios), "same_memories": same, "asked": len(base)}


@click.command()
@click.option("--baseline", default="HEAD", show_default=True, help="The git revision to compare this tree with.")
@click.option("--size", default=10_000, show_default=True, type=click.IntRange(min=50), help="Memories in the chat.")
@click.option("--queries", default=400, show_default=True, type=click.IntRange(min=1),
              help="Timed queries (each asked bare and with recent turns, of both sides).")
@click.option("--about-now", is_flag=True, help="Ask every query about the present (\"... now?\").")
def main(baseline: str, size: int, queries: int, about_now: bool) -> None:
    """Paired, interleaved recall latency of this tree against BASELINE in one process."""
    root = Path(tempfile.mkdtemp(prefix="stbme-ab-"))
    try:
        extract_baseline(baseline, root)
        sys.path.insert(0, str(root))
        asyncio.run(br.populate(size, root / "new", 1))   # written by this tree; read by both
        asyncio.run(build_indexes(root / "new", VectorModel(ChatGenerator(1))))
        shutil.copytree(root / "new", root / "base")
        from stbme_base.store.migrations import MIGRATIONS as base_migrations   # let the baseline open it
        br.forget_migrations_except(root / "base" / "stbme.sqlite3", [name for name, _ in base_migrations])
        r = asyncio.run(compare(size, queries, root, now=about_now))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    asked = " asked about now" if about_now else ""
    click.echo(f"read path at {size:,} memories, {r['asked']} paired recalls{asked}, this tree against {baseline}")
    click.echo(f"  p50 ms    base {r['base_p50_ms']:.3f}   new {r['new_p50_ms']:.3f}   new/base {r['ratio_of_p50']:.3f}")
    click.echo(f"  p95 ms    base {r['base_p95_ms']:.3f}   new {r['new_p95_ms']:.3f}")
    click.echo(f"  per query: median new/base {r['median_paired_ratio']:.3f}, new faster in {r['new_faster_share']:.0%}")
    click.echo(f"  the same memories recalled: {r['same_memories']} of {r['asked']}")


if __name__ == "__main__":
    main()
