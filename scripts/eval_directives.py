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
           it made no directive of its own). The messages carry SillyTavern send_dates 3 minutes apart, as
           in one long evening session (`--send-dates session`), so every line has the ~20 lines around it
           inside the dedupe's one-hour window; `--send-dates none` leaves them out, so the window falls
           back to the wall clock and the whole chat is one hour (a bulk ingest). About a minute.
Prints precision (of the lines that create a directive, the share that are real instructions), recall
(of the real instructions, the share that create one) and type accuracy, per language and register, for
the lines written before the signal rule (the rule was tuned on them) and for the held-out ones; then
the confusion examples; then (unless --no-rules) the signal rules against the plan's: counting,
confidence, and the dedupe's similarity (`evalkit/signal_rules.py`), and the rule on the recall set's
~3,000 user messages (its OOC instructions, chatter and look-alikes are labelled).

    .venv/bin/python scripts/eval_directives.py
    .venv/bin/python scripts/eval_directives.py --via sync
    .venv/bin/python scripts/eval_directives.py --setting dna.signal_scope '"message"'
"""

from __future__ import annotations

import asyncio
import datetime as dt
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
from evalkit import directives, signal_rules  # noqa: E402
from evalkit.sidecar import Client, Server, parse_settings  # noqa: E402
from evalkit.stdate import format_send_date  # noqa: E402

REPLY = {"en": "*She nods and waits for you to go on.*", "zh": "*她点点头，等你说下去。*"}
SESSION_START = dt.datetime(2026, 3, 2, 19, 0)
SESSION_STEP = dt.timedelta(minutes=3)


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


async def via_sync(client: Client, lines: list[dict], send_dates: str) -> tuple[dict, dict, dict]:
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
        if send_dates == "session":
            for i, message in enumerate(messages):
                message["send_date"] = format_send_date(SESSION_START + i * SESSION_STEP)
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


async def run(lines: list[dict], via: str, send_dates: str, settings: dict,
              data_dir: Path) -> tuple[dict, dict, dict | None]:
    server = Server(data_dir, {"llm.mode": "none", **settings}, data_dir / "eval-server.log")
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            await server.wait_ready(session)
            client = Client(session, server.url)
            if via == "preview":
                return await via_preview(client, lines)
            return await via_sync(client, lines, send_dates)
    finally:
        server.stop()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--lines", "path", type=click.Path(exists=True, path_type=Path), default=directives.DEFAULT_PATH,
              show_default=True, help="The labelled lines.")
@click.option("--via", type=click.Choice(["preview", "sync"]), default="preview", show_default=True,
              help="preview: the signals endpoint; sync: the write path (directive memories actually made).")
@click.option("--send-dates", type=click.Choice(["session", "none"]), default="session", show_default=True,
              help="sync: messages 3 minutes apart in story time, or no send_date (the wall clock decides).")
@click.option("--setting", "settings", type=(str, str), multiple=True,
              help="Product setting for the run, VALUE as JSON (repeatable), as for `stbme serve`.")
@click.option("--examples", "limit", default=15, show_default=True, help="Confusion examples per kind.")
@click.option("--rules/--no-rules", default=True, show_default=True,
              help="Also measure the signal rules against the plan's (counting, confidence, dedupe similarity).")
def main(path: Path, via: str, send_dates: str, settings, limit: int, rules: bool) -> None:
    """Precision and recall of directive creation on labelled roleplay lines."""
    started = time.monotonic()
    lines = directives.load(path)
    values = parse_settings(settings)
    data_dir = Path(tempfile.mkdtemp(prefix="stbme-directives-"))
    try:
        created, detail, merged = asyncio.run(run(lines, via, send_dates, values, data_dir))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    langs = ", ".join(f"{lang} {sum(1 for x in lines if x['lang'] == lang)}" for lang in sorted({x["lang"] for x in lines}))
    held = sum(1 for x in lines if x.get("held_out"))
    route = via + (f", send_dates {send_dates}" if via == "sync" else "")
    click.echo(f"{len(lines)} labelled lines ({langs}; {held} held out); route: {route}; product defaults "
               f"(llm.mode none){''.join(f', {k} = {v!r}' for k, v in values.items())}\n")
    click.echo(directives.table(lines, created, merged))
    if merged is not None:
        click.echo("(merged: made no directive of its own; the write path took it for a duplicate of an earlier"
                   " directive of the same type and only reinforced that one)")
    click.echo(directives.confusions(lines, created, detail, limit, merged))
    if rules:
        scope = values.get("dna.signal_scope", "instructions")
        click.echo(f"\nCounting (scope {scope}, every labelled line):\n" + signal_rules.counting_table(lines, scope))
        click.echo("\nConfidence (the product's units and counting):\n" + signal_rules.confidence_table(lines, scope))
        click.echo("\nDedupe and loop similarity (the product's embedder):\n" + signal_rules.dedupe_table(lines, scope))
        click.echo("\nThe rule on another labelled source:\n" + signal_rules.recall_set_table(scope))
    click.echo(f"\ntime: {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
