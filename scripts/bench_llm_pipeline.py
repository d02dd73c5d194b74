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


async def run(mode: str, chat: list[dict], embedder: Embedder, fake_url: str | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        settings = {"llm.mode": mode}
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
        try:
            body = {"length": len(chat), "messages": [{"index": i, **m} for i, m in enumerate(chat)], "anchors": []}
            await sc.sync.sync("bench", parse_sync_request(body, max_messages=100000, max_chars=10**7))
            t0 = time.perf_counter()
            batches = await sc.processor.process_chat("bench")
            total = time.perf_counter() - t0
            counts = await sc.store.read(lambda conn: dict(conn.execute(
                "SELECT source || ':' || type, count(*) FROM nodes WHERE chat_id = 'bench' AND archived = 0"
                " GROUP BY 1").fetchall()))
            usage = sc.memory_llm.usage.snapshot()
        finally:
            await sc.close()
    return {"batches": batches, "seconds": total, "llm_seconds": llm_seconds, "usage": usage, "memories": counts}


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
    try:
        base = await run("none", chat, embedder, None)
        llm = await run("openai", chat, embedder, f"http://127.0.0.1:{port}/v1")
    finally:
        await runner.cleanup()
    u = llm["usage"]["total"]
    own = llm["seconds"] - llm["llm_seconds"]
    return {
        "messages": messages, "assistant_messages": assistants, "embedder": embedder.id,
        "llm_calls_per_assistant_message": round(u["calls"] / assistants, 3),
        "prompt_tokens_per_assistant_message": round(u["prompt_tokens"] / assistants, 1),
        "completion_tokens_per_assistant_message": round(u["completion_tokens"] / assistants, 1),
        "pipeline_ms_per_assistant_message_excluding_llm": round(own / assistants * 1000, 2),
        "heuristic_only_ms_per_assistant_message": round(base["seconds"] / assistants * 1000, 2),
        "ratio_vs_heuristic_only": round(own / base["seconds"], 2) if base["seconds"] else None,
        "per_task": {t: {"calls": v["calls"], "prompt_tokens": v["prompt_tokens"],
                         "completion_tokens": v["completion_tokens"]} for t, v in llm["usage"]["tasks"].items()},
        "memories_llm_mode": llm["memories"], "memories_heuristic_only": base["memories"],
        "batches": llm["batches"],
    }


@click.command()
@click.option("--messages", default=200, show_default=True, help="Chat length (half of it assistant messages).")
@click.option("--embedder", "embedder_name", type=click.Choice(["hash", "local"]), default="hash", show_default=True,
              help="hash: deterministic vectors (measures the pipeline); local: the bundled e5 model.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cli(messages: int, embedder_name: str, as_json: bool) -> None:
    """Run the benchmark and print its figures."""
    result = asyncio.run(main(messages, embedder_name))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"chat: {result['messages']} messages, {result['assistant_messages']} assistant, "
               f"{result['batches']} batches, embedder {result['embedder']}")
    for key in ("llm_calls_per_assistant_message", "prompt_tokens_per_assistant_message",
                "completion_tokens_per_assistant_message", "pipeline_ms_per_assistant_message_excluding_llm",
                "heuristic_only_ms_per_assistant_message", "ratio_vs_heuristic_only"):
        click.echo(f"  {key:50} {result[key]}")
    click.echo("  per task:")
    for task, v in result["per_task"].items():
        click.echo(f"    {task:16} calls {v['calls']:4}  prompt {v['prompt_tokens']:7}  completion {v['completion_tokens']:6}")
    click.echo(f"  active memories (LLM mode): {result['memories_llm_mode']}")


if __name__ == "__main__":
    cli()
