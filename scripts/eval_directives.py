#!/usr/bin/env python
"""Directive evaluation: which labelled user lines (scripts/data/directives.jsonl, English and Chinese,
in and out of character) make the product create a directive memory, at default settings.

Two routes through the real product (`stbme serve` on a temporary data dir):
  preview (default): each line is sent to `POST /v1/dna/signals` (what the signal stage would find in a user
           message, with `remember` per the chat's strategy). A line creates a directive when one of its
           signals is remembered. No model work: a few seconds.
  sync:    the write path itself. The lines become a chat (each line a user message, answered by a short
           assistant message), synced and processed; the `signal` events of the DNA audit log say which
           message created a directive, or was merged into an earlier one as a near-duplicate (counted apart:
           it made no directive of its own). Embeds ~500 short texts: about a minute.
Prints precision (of the lines that create a directive, the share that are real instructions), recall
(of the real instructions, the share that create one) and type accuracy, per language and register,
then the confusion examples.

    .venv/bin/python scripts/eval_directives.py
    .venv/bin/python scripts/eval_directives.py --via sync
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

import aiohttp
import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evalkit import directives  # noqa: E402
from evalkit.sidecar import Client, Server  # noqa: E402

REPLY = {"en": "*She nods and waits for you to go on.*", "zh": "*她点点头，等你说下去。*"}


async def via_preview(client: Client, lines: list[dict]) -> tuple[dict, dict, None]:
    created, detail = {}, {}
    for line in lines:
        found = (await client.call("POST", client.url + "/v1/dna/signals", {"text": line["text"]}))["signals"]
        kept = [s for s in found if s["remember"]]
        created[line["id"]] = sorted({s["type"] for s in kept})
        detail[line["id"]] = "; ".join(f"{s['type']} {s['confidence']:.2f} on {s['content'][:50]!r}"
                                       + (f" (wrong={s['wrong']!r}, right={s['right']!r})" if s.get("wrong") else "")
                                       for s in kept)
    return created, detail, None


async def via_sync(client: Client, lines: list[dict]) -> tuple[dict, dict, dict]:
    """The lines as a chat through the write path. The DNA audit log says, per message, which directive
    it created (`signal` events) or which earlier one it only reinforced as a duplicate (`reinforce`)."""
    created: dict[str, list[str]] = defaultdict(list)
    detail: dict[str, str] = {}
    merged: dict[str, str] = {}
    for lang in sorted({line["lang"] for line in lines}):
        mine = [line for line in lines if line["lang"] == lang]
        chat_id = f"directives-{lang}"
        messages = [{"role": "assistant", "name": "Narrator", "text": REPLY[lang]}]
        at: dict[int, str] = {}
        for line in mine:
            at[len(messages)] = line["id"]
            messages.append({"role": "user", "name": "Player", "text": line["text"]})
            messages.append({"role": "assistant", "name": "Narrator", "text": REPLY[lang]})
        await client.sync(chat_id, messages)
        await client.wait_processed({chat_id: len(messages)})
        url = f"{client.url}/v1/dna/events?chat_id={quote(chat_id, safe='')}&limit=10000"
        for event in (await client.call("GET", url))["events"]:
            data, line_id = event["data"], at.get(event["data"].get("message"))
            if not line_id:
                continue
            if event["kind"] == "signal" and data.get("outcome") == "created":
                created[line_id].append(data["type"])
                detail[line_id] = (detail.get(line_id, "") + f" {data['type']} created").strip()
            elif event["kind"] == "reinforce" and data.get("reason") == "duplicate signal":
                node = await client.node(chat_id, data["node_id"])
                merged[line_id] = f"{node['type']} {node['fields'].get('content', '')[:60]!r} (cos {data['similarity']})"
    return {k: sorted(set(v)) for k, v in created.items()}, detail, merged


async def run(lines: list[dict], via: str, data_dir: Path) -> tuple[dict, dict, dict | None]:
    server = Server(data_dir, {"llm.mode": "none"}, data_dir / "eval-server.log")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            await server.wait_ready(session)
            client = Client(session, server.url)
            return await (via_preview if via == "preview" else via_sync)(client, lines)
    finally:
        server.stop()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lines", "path", type=click.Path(exists=True, path_type=Path), default=directives.DEFAULT_PATH,
              show_default=True, help="The labelled lines.")
@click.option("--via", type=click.Choice(["preview", "sync"]), default="preview", show_default=True,
              help="preview: the signals endpoint; sync: the write path (directive memories actually made).")
@click.option("--examples", "limit", default=15, show_default=True, help="Confusion examples per kind.")
def main(path: Path, via: str, limit: int) -> None:
    """Precision and recall of directive creation on labelled roleplay lines."""
    started = time.monotonic()
    lines = directives.load(path)
    data_dir = Path(tempfile.mkdtemp(prefix="stbme-directives-"))
    try:
        created, detail, merged = asyncio.run(run(lines, via, data_dir))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    langs = ", ".join(f"{lang} {sum(1 for x in lines if x['lang'] == lang)}" for lang in sorted({x["lang"] for x in lines}))
    click.echo(f"{len(lines)} labelled lines ({langs}); route: {via}; product defaults (llm.mode none)\n")
    click.echo(directives.table(lines, created, merged))
    if merged is not None:
        click.echo("(merged: made no directive of its own; the write path took it for a duplicate of an earlier"
                   " directive of the same type, cosine >= 0.9, and only reinforced that one)")
    click.echo(directives.confusions(lines, created, detail, limit, merged))
    click.echo(f"\ntime: {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
