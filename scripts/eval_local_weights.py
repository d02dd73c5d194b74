#!/usr/bin/env python
"""float32 against int8 products for the bundled model (embed.local_weights), on the generated recall set.

What the vector side of recall sees: for the --quick chats (one per language) every message a question
may find is embedded as a passage (the product's 128-token cap) and every question as a query, by the
product's LocalEmbedder with each setting; then evidence recall@5/10/20 of the model alone, and of
RRF(BM25 x2, model) as eval_recall.py's fusion baseline does, plus the cosine between the two settings'
vectors of the same texts. Much cheaper than eval_recall.py's full product run (no ingest), so it can
run on a busy machine; it measures the embedding change alone.

    .venv/bin/python scripts/eval_local_weights.py
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import click
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "server"))
from evalkit import bm25, evalset  # noqa: E402
from evalkit.metrics import recall_at  # noqa: E402
from evalkit.runs import candidates_end  # noqa: E402
from stbme.embed.local import WEIGHT_KINDS, LocalEmbedder  # noqa: E402


async def vectors(kind: str, docs: list[str], queries: list[str]) -> tuple[np.ndarray, np.ndarray]:
    embedder = LocalEmbedder(weights=kind, bulk_nice=0)
    try:
        doc_vecs = await embedder.embed_passages(docs)
        query_vecs = np.vstack([await embedder.embed_query(q) for q in queries])
    finally:
        await embedder.close()
    return doc_vecs, query_vecs


@click.command()
@click.option("--all-chats", is_flag=True, help="Every chat of the set, not one per language.")
def main(all_chats: bool) -> None:
    chats = evalset.load()["chats"]
    if not all_chats:
        chats = [next(c for c in chats if c["lang"] == lang) for lang in ("en", "zh")]
    scores: dict[str, dict[str, list[float]]] = {}
    cosines: list[np.ndarray] = []
    for chat in chats:
        end = candidates_end(chat)
        docs = [m["text"] for m in chat["messages"][:end]]
        queries = [q["query"] for q in chat["questions"]]
        lexical_index = bm25.BM25(docs)
        by_kind = {}
        for kind in WEIGHT_KINDS:
            t = time.monotonic()
            by_kind[kind] = asyncio.run(vectors(kind, docs, queries))
            click.echo(f"{chat['chat_id']}: {len(docs)} messages, {len(queries)} questions, {kind} "
                       f"{time.monotonic() - t:.0f} s", err=True)
        a, b = by_kind["float32"], by_kind["int8"]
        cosines += [(a[0] * b[0]).sum(1), (a[1] * b[1]).sum(1)]
        for kind, (doc_vecs, query_vecs) in by_kind.items():
            for i, q in enumerate(chat["questions"]):
                sims = doc_vecs @ query_vecs[i]
                vector = [int(d) for d in np.lexsort((np.arange(len(sims)), -sims))]
                fused = bm25.rrf([(2.0, bm25.ranking(lexical_index.scores(q["query"]))), (1.0, vector)])
                for system, ranked in ((f"model alone, {kind}", vector), (f"RRF(BM25x2, model), {kind}", fused)):
                    items = [(d, d) for d in ranked[:40]]
                    row = scores.setdefault(system, {f"R@{k}": [] for k in (5, 10, 20)} | {"lang": []})
                    for k in (5, 10, 20):
                        row[f"R@{k}"].append(recall_at(q["evidence"], items, k))
                    row["lang"].append(chat["lang"])
    every = np.concatenate(cosines)
    click.echo(f"\n{len(chats)} chats, {len(scores[next(iter(scores))]['R@10'])} questions; cosine int8 to "
               f"float32 over {len(every)} texts: min {every.min():.4f}, mean {every.mean():.4f}, "
               f"p5 {np.percentile(every, 5):.4f}")
    click.echo(f"{'system':32} {'R@5':>6} {'R@10':>6} {'R@20':>6} {'R@10 en':>8} {'R@10 zh':>8}")
    for system, row in sorted(scores.items()):
        langs = np.array(row["lang"])
        r10 = np.array(row["R@10"])
        click.echo(f"{system:32} {np.mean(row['R@5']):6.3f} {np.mean(r10):6.3f} {np.mean(row['R@20']):6.3f} "
                   f"{r10[langs == 'en'].mean():8.3f} {r10[langs == 'zh'].mean():8.3f}")


if __name__ == "__main__":
    main()
