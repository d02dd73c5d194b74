#!/usr/bin/env python
"""LLM pipeline benchmark: a 200-message roleplay chat played against the scripted OpenAI-compatible
server (tests/fake_openai.py, run in this process on loopback) at default settings.

Prints LLM calls, prompt and completion tokens (tiktoken) per assistant message, per task, and the
pipeline's own time (everything but the LLM calls) per assistant message, with the heuristic-only
pipeline (llm.mode = none) on the same chat as the baseline ratio. Fewer calls and tokens for the
same memories is better.

    .venv/bin/python scripts/bench_llm_pipeline.py
    .venv/bin/python scripts/bench_llm_pipeline.py --messages 400 --embedder local --json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fake_openai import FakeOpenAI  # noqa: E402

from stbme.embed.base import Embedder, normalize_rows  # noqa: E402
from stbme.index.lexical import tokenize  # noqa: E402
from stbme.api.bodies import parse_sync_request  # noqa: E402
from stbme.services import Services  # noqa: E402

NAMES = ["Elena", "Marcus", "Rhea", "Tomas", "Oswin"]
PLACES = ["Greywater", "Ashford", "the lighthouse", "the vault"]
THINGS = ["code", "key", "map", "storm", "horse", "letter", "ring", "blade", "secret", "promise"]


class HashEmbedder(Embedder):
    """Deterministic bag-of-words vectors (no model): measures the pipeline, not the embedder."""

    def __init__(self, dim: int = 256):
        self.dim, self.id = dim, f"bench:hash-{dim}"

    def _vec(self, text: str) -> np.ndarray:
        vec = np.full(self.dim, 0.01, np.float32)
        for term in tokenize(text) or [text]:
            h = hashlib.blake2b(term.encode(), digest_size=8).digest()
            vec[int.from_bytes(h[:4], "little") % self.dim] += 1.0
        return normalize_rows(vec)[0]

    async def embed_passages(self, texts):
        return np.vstack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text):
        return self._vec(text)


def roleplay(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    chat = []
    for i in range(n):
        who, where, what = rng.choice(NAMES), rng.choice(PLACES), rng.choice(THINGS)
        if i % 2 == 0:
            text = rng.choice([f"I ask {who} about the {what}.", f"Let's go to {where}.",
                               f"Did {who} really hide the {what} in {where}?", "I wait and listen."])
            chat.append({"role": "user", "name": "Alex", "text": text})
        else:
            text = rng.choice([
                f"{who} leads you to {where}. The {what} is there, half buried. <think>plan the twist</think>",
                f"{who} is wounded now; the {what} is lost somewhere near {where}!",
                f"{who} and {rng.choice(NAMES)} argue over the {what} until dawn.",
                f"The {what} glows. {who} whispers a warning about {where}.",
                f"At {where}, {who} reveals the {what} was fake all along.",
            ])
            chat.append({"role": "assistant", "name": rng.choice(NAMES[:2]), "text": text})
    return chat


# The pipeline before the LLM bill was cut (issue 12): one extraction call per reply and a separate A-MEM
# evolution call per batch. Same scripted answers, so the two graphs can be compared.
PER_REPLY = {"extract.every": 1, "extract.smart_trigger": False, "evolve.mode": "separate"}


async def run(mode: str, chat: list[dict], embedder: Embedder, fake: FakeOpenAI | None, fake_url: str | None,
              extra: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"llm.mode": mode, **(extra or {})}
        if mode == "openai":
            settings |= {"llm.url": fake_url, "llm.model": "bench"}
        sc = Services.open(Path(tmp), embedder=embedder, cli_settings=settings)
        llm_seconds = 0.0
        original = sc.memory_llm.client.complete

        async def timed(*args, **kw):
            nonlocal llm_seconds
            t0 = time.perf_counter()
            try:
                return await original(*args, **kw)
            finally:
                llm_seconds += time.perf_counter() - t0

        sc.memory_llm.client.complete = timed
        if fake is not None:
            fake.calls.clear()
        try:
            body = {"length": len(chat), "messages": [{"index": i, **m} for i, m in enumerate(chat)], "anchors": []}
            await sc.sync.sync("bench", parse_sync_request(body, max_messages=100000, max_chars=10**7))
            t0 = time.perf_counter()
            batches = await sc.processor.process_chat("bench")
            total = time.perf_counter() - t0
            graph = await sc.store.read(graph_summary)
            usage = sc.memory_llm.usage.snapshot()
        finally:
            await sc.close()
    return {"batches": batches, "seconds": total, "llm_seconds": llm_seconds, "usage": usage, **graph,
            "cacheable": cacheable_share(fake.calls) if fake is not None else None}


def graph_summary(conn) -> dict:
    """What the memories amount to: counts by source and type, edges by relation, evolved memories, and the
    names of characters and places (what a fresh reader of the graph would notice first)."""
    nodes = conn.execute("SELECT source, type, fields, evolution FROM nodes WHERE chat_id = 'bench' AND archived = 0"
                         ).fetchall()
    counts: dict[str, int] = {}
    for n in nodes:
        counts[f"{n['source']}:{n['type']}"] = counts.get(f"{n['source']}:{n['type']}", 0) + 1
    edges = dict(conn.execute("SELECT relation, count(*) FROM edges WHERE chat_id = 'bench' AND invalid_at IS NULL"
                              " GROUP BY relation").fetchall())
    named = sorted({f"{n['type']}:{json.loads(n['fields']).get('name')}" for n in nodes
                    if n["source"] == "llm" and n["type"] in ("character", "location")})
    return {"memories": counts, "edges": edges, "named": named,
            "evolved_memories": sum(1 for n in nodes if json.loads(n["evolution"] or "[]")
                                    and any("triggered_by" in h for h in json.loads(n["evolution"])))}


def cacheable_share(calls: list[dict]) -> float:
    """Share of prompt tokens in a prefix that repeats byte for byte from call to call of the same task (the
    system message): what an API's prompt cache can serve."""
    from stbme.llm.usage import count_messages
    from stbme.tokens import count_tokens

    total = cached = 0
    seen: set[str] = set()
    for call in calls:
        messages = call["body"]["messages"]
        total += count_messages(messages)
        system = messages[0]["content"]
        if system in seen:
            cached += count_tokens(system)
        seen.add(system)
    return round(cached / total, 3) if total else 0.0


def per_reply(result: dict, assistants: int) -> dict:
    u = result["usage"]["total"]
    return {"calls": round(u["calls"] / assistants, 3),
            "prompt_tokens": round(u["prompt_tokens"] / assistants, 1),
            "completion_tokens": round(u["completion_tokens"] / assistants, 1),
            "cacheable_share": result["cacheable"],
            "per_task": {t: {"calls": v["calls"], "prompt_tokens": v["prompt_tokens"],
                             "completion_tokens": v["completion_tokens"]} for t, v in result["usage"]["tasks"].items()},
            "pipeline_ms": round((result["seconds"] - result["llm_seconds"]) / assistants * 1000, 2)}


async def main(messages: int, embedder_name: str) -> dict:
    chat = roleplay(messages)
    assistants = sum(1 for m in chat if m["role"] == "assistant")
    if embedder_name == "local":
        from stbme.embed.local import LocalEmbedder
        embedder = LocalEmbedder()
    else:
        embedder = HashEmbedder()
    fake = FakeOpenAI()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    try:
        base = await run("none", chat, embedder, None, None)
        before = await run("openai", chat, embedder, fake, url, PER_REPLY)
        after = await run("openai", chat, embedder, fake, url)
    finally:
        await runner.cleanup()
    return {
        "messages": messages, "assistant_messages": assistants, "embedder": embedder.id,
        "heuristic_only_ms_per_assistant_message": round(base["seconds"] / assistants * 1000, 2),
        "before": per_reply(before, assistants) | {k: before[k] for k in ("memories", "edges", "named",
                                                                          "evolved_memories", "batches")},
        "after": per_reply(after, assistants) | {k: after[k] for k in ("memories", "edges", "named",
                                                                       "evolved_memories", "batches")},
    }


@click.command()
@click.option("--messages", default=200, show_default=True, help="Chat length (half of it assistant messages).")
@click.option("--embedder", "embedder_name", type=click.Choice(["hash", "local"]), default="hash", show_default=True,
              help="hash: deterministic vectors (measures the pipeline); local: the bundled e5 model.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cli(messages: int, embedder_name: str, as_json: bool) -> None:
    """Run the benchmark and print its figures: the pipeline before (one call per reply, separate evolution)
    and at today's defaults, on the same chat and the same scripted answers."""
    result = asyncio.run(main(messages, embedder_name))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    b, a = result["before"], result["after"]
    click.echo(f"chat: {result['messages']} messages, {result['assistant_messages']} assistant, embedder "
               f"{result['embedder']}; heuristic-only pipeline {result['heuristic_only_ms_per_assistant_message']} ms"
               " per reply")
    click.echo(f"{'per assistant message':44} {'before':>12} {'defaults':>12}")
    for key, label in (("calls", "LLM calls"), ("prompt_tokens", "prompt tokens"),
                       ("completion_tokens", "completion tokens"), ("cacheable_share", "cacheable prompt share"),
                       ("pipeline_ms", "pipeline ms (excluding the LLM)")):
        click.echo(f"  {label:42} {b[key]:>12} {a[key]:>12}")
    click.echo("  per task (calls / prompt tokens), before -> defaults:")
    for task in sorted(set(b["per_task"]) | set(a["per_task"])):
        x, y = b["per_task"].get(task, {"calls": 0, "prompt_tokens": 0}), a["per_task"].get(task, {"calls": 0,
                                                                                                     "prompt_tokens": 0})
        click.echo(f"    {task:14} {x['calls']:4} / {x['prompt_tokens']:7}  ->  {y['calls']:4} / {y['prompt_tokens']:7}")
    click.echo("  the graph, before -> defaults:")
    for key in sorted(set(b["memories"]) | set(a["memories"])):
        click.echo(f"    memories {key:28} {b['memories'].get(key, 0):5} -> {a['memories'].get(key, 0):5}")
    for key in sorted(set(b["edges"]) | set(a["edges"])):
        click.echo(f"    edges {key:31} {b['edges'].get(key, 0):5} -> {a['edges'].get(key, 0):5}")
    click.echo(f"    memories re-read by evolution       {b['evolved_memories']:5} -> {a['evolved_memories']:5}")
    same = "same" if b["named"] == a["named"] else f"before only {sorted(set(b['named']) - set(a['named']))}, " \
        f"defaults only {sorted(set(a['named']) - set(b['named']))}"
    click.echo(f"    characters and places: {same}")


if __name__ == "__main__":
    cli()
