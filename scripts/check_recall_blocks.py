#!/usr/bin/env python
"""Does a change of the read path change what recall answers? The blocks of ~660 requests on one populated
chat, from this code and from another revision, compared byte for byte.

The chat is scripts/bench_recall.py's (its populate phase: synthetic messages, one memory each, four core
memories), its HNSW and BM25 indexes built and saved once, so both revisions search the same graph. Each
revision then answers, on its own copy of the chat:
- 232 queries (bench_recall's, then a few about now, a day, a place, in English and Chinese, one empty),
  each alone and with four recent turns (the extension's request), at budgets of 300, 800 and 1,500
  tokens, looking only (`reinforce: false`, nothing stored changes);
- the first 200 of those again with reinforcement, each count written before the next request;
and the reinforced memories' access counts and weights are read back. Text, token count, memory ids and
scores, language and query plan must be equal.

    .venv/bin/python scripts/check_recall_blocks.py                       # against main, 10k memories
    .venv/bin/python scripts/check_recall_blocks.py --baseline c8acab5 --size 2000
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

CHAT_ID = "bench/chat"
SCRIPTS = Path(__file__).resolve().parent
EXTRA_QUERIES = ["what is Mira doing now?", "where is the sword now", "what happened yesterday in the tavern",
                 "Mira 现在在哪里？", "昨天在酒馆发生了什么", "tell me about the lantern and the map", "",
                 "who hid the key?", "what did they say about it there", "那它在哪里？",
                 "the day after the storm, what happened at the harbor?", "last week at the library"]


def requests(size: int, n: int = 200) -> list[dict]:
    from _bench_data import ChatGenerator

    gen = ChatGenerator(1)
    queries = [q for _, q, _ in gen.queries(20 + n, size, "recall")] + EXTRA_QUERIES
    rng = random.Random(7)
    out = []
    for i, q in enumerate(queries):
        out.append({"query": q, "budget_tokens": 800})
        at = size if i % 2 else rng.randrange(10, size)   # the chat's last turns, or turns from anywhere
        recent = [{"role": m.role, "name": m.name, "text": m.text} for m in (gen.message(j) for j in range(at - 4, at))]
        out.append({"query": q, "budget_tokens": (800, 300, 1500)[i % 3], "recent": recent})
    return out


async def _open(chat_dir: Path, size: int):
    from _bench_data import BenchEmbedder, ChatGenerator, VectorModel
    from stbme.services import Services

    gen = ChatGenerator(1)
    model = VectorModel(gen)
    queries = {r["query"] for r in requests(size)}
    sc = Services.open(chat_dir, embedder=BenchEmbedder(model, {q: model.embed(q) for q in queries}))
    await sc.indexes.vectors.get(CHAT_ID)
    await sc.indexes.lexical.get(CHAT_ID)
    return sc


async def save_indexes(chat_dir: Path, size: int) -> None:
    sc = await _open(chat_dir, size)
    await sc.indexes.vectors.save_dirty()
    await sc.indexes.lexical.save_dirty()
    await sc.close()


async def dump(chat_dir: Path, size: int) -> dict:
    from stbme.api.bodies import parse_recall

    sc = await _open(chat_dir, size)

    async def call(body):
        return await sc.recall.recall(CHAT_ID, parse_recall(body, max_chars=sc.settings["server.max_message_chars"]))

    def kept(r):
        return {"text": r["text"], "tokens": r["tokens"], "language": r["language"], "query": r["query"],
                "memories": [(m["id"], m["score"]) for m in r["memories"]]}

    reqs = requests(size)
    blocks = [kept(await call({**body, "reinforce": False})) for body in reqs]
    for body in reqs[:200]:
        blocks.append(kept(await call(body)))
        sc.recall.reinforcement.flush()
        await sc.store.write(lambda conn: None)   # the counts are written before the next request
    weights = await sc.store.read(lambda conn: [list(r) for r in conn.execute(
        "SELECT id, access_count, round(weight, 9) FROM nodes WHERE access_count > 0 ORDER BY id")])
    await sc.close()
    return {"requests": [json.dumps(b, ensure_ascii=False) for b in reqs], "blocks": blocks, "weights": weights}


def run(args: list[str], code: Path | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(code)] * (code is not None) + [os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, *args], check=True, env=env, stdout=sys.stderr)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--baseline", default="main", show_default=True, metavar="REV", help="The revision to compare with.")
@click.option("--size", default=10_000, show_default=True, type=click.IntRange(100), help="Memories in the chat.")
@click.option("--phase", type=click.Choice(["save", "dump"]), hidden=True)
@click.option("--chat", type=click.Path(path_type=Path), hidden=True)
@click.option("--out", type=click.Path(path_type=Path), hidden=True)
def main(baseline: str, size: int, phase: str | None, chat: Path | None, out: Path | None) -> None:
    """Compare this code's recall blocks with another revision's on one populated chat."""
    sys.path.insert(0, str(SCRIPTS))
    if phase == "save":
        asyncio.run(save_indexes(chat, size))
        return
    if phase == "dump":
        out.write_text(json.dumps(asyncio.run(dump(chat, size)), ensure_ascii=False))
        return
    from bench_recall import checkout_code, forget_newer_migrations

    root = Path(tempfile.mkdtemp(prefix="stbme-blocks-"))
    try:
        chat_dir = root / "chat"
        click.echo(f"populating {size:,} memories", err=True)
        run([str(SCRIPTS / "bench_recall.py"), "--size", str(size), "--phase", "populate", "--data-dir", str(chat_dir)])
        run([__file__, "--phase", "save", "--chat", str(chat_dir), "--size", str(size)])
        base_code = checkout_code(baseline, root / "baseline-code")
        results = {}
        for name, code in (("baseline", base_code), ("this", None)):
            copy = root / f"chat-{name}"
            shutil.copytree(chat_dir, copy)
            if code is not None:
                forget_newer_migrations(copy / "stbme.sqlite3", code)
            click.echo(f"recalling with {baseline if code else 'this code'}", err=True)
            run([__file__, "--phase", "dump", "--chat", str(copy), "--size", str(size), "--out", str(root / name)],
                code)
            results[name] = json.loads((root / name).read_text())
        base, this = results["baseline"], results["this"]
        differ = [i for i, (a, b) in enumerate(zip(base["blocks"], this["blocks"])) if a != b]
        n = len(this["blocks"])
        if differ or len(base["blocks"]) != n or base["weights"] != this["weights"]:
            first = differ[0] if differ else None
            click.echo(f"DIFFERENT: {len(differ)} of {n} blocks differ from {baseline}'s"
                       + (f"; the first is request {first % len(this['requests'])}: "
                          f"{this['requests'][first % len(this['requests'])][:200]}" if first is not None else "")
                       + ("" if base["weights"] == this["weights"] else "; the reinforced weights differ"))
            sys.exit(1)
        click.echo(f"IDENTICAL: {n} blocks ({len(this['requests'])} requests looking, 200 reinforcing) and the "
                   f"access counts and weights of {len(this['weights'])} reinforced memories equal {baseline}'s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
