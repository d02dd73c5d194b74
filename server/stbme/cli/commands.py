"""The main commands: serve, stats, recall, export, import, reindex, settings."""

from __future__ import annotations

import logging
import sys

import click
import orjson

from .. import __version__, config
from ..api import DEFAULT_PORT, create_app
from ..api.requests import check_chat_id
from ..errors import StbmeError
from ..services import Services
from ..usecases.recall import RecallRequest
from .common import ProgressBar, data_dir_option, run


def _chat_arg(ctx, param, value):
    """A CHAT_ID argument checked like the API checks it."""
    if value is None:
        return value
    try:
        return check_chat_id(value)
    except StbmeError as exc:
        raise click.BadParameter(exc.message) from None


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback requires --token.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=int, help="Port to listen on.")
@data_dir_option
@click.option("--token", envvar="STBME_TOKEN", default=None,
              help="API token clients must send as 'Authorization: Bearer …' (env STBME_TOKEN).")
@click.option("--setting", "settings", type=(str, str), multiple=True, metavar="NAME VALUE",
              help="Set a setting (saved), VALUE as JSON or plain text. Repeatable. See docs/settings.md.")
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning", "error"]),
              show_default=True, help="Log verbosity (logs go to stderr).")
def serve(host, port, data_dir, token, settings, log_level):
    """Run the sidecar HTTP server (local embeddings and SQLite: no API key needed)."""
    from aiohttp import web

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    cli_settings = {name: config.parse_cli_value(value) for name, value in settings}
    try:
        app = create_app(data_dir, host=host, token=token, cli_settings=cli_settings)
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"ST-BME sidecar {__version__} on http://{host}:{port}  (data: {data_dir})", err=True)
    web.run_app(app, host=host, port=port, print=None, access_log=None)


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(data_dir, as_json):
    """Show chats, memories and the job queue."""
    async def go(svc: Services):
        return {"health": await svc.health.report(), "chats": await svc.chats.list(),
                "repair_loops": await svc.dna.list_loops(None)}

    data = run(data_dir, go)
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    h = data["health"]
    click.echo(f"store: {h['store']['path']} (schema {h['store']['schema_version']})")
    click.echo(f"embedder: {h['embedder']['id']} ({h['embedder']['dim']}-d)")
    click.echo(f"queue: {h['queue']['pending']} pending, {h['queue']['running']} running, "
               f"{h['queue']['failed']} failed")
    click.echo(f"{len(data['chats'])} chats, {h['store']['nodes']} active memories")
    for chat in data["chats"]:
        click.echo(f"  {chat['chat_id']}: {chat['messages']} messages, {chat['nodes']} memories, "
                   f"processed up to #{chat['processed_upto']}")
    loops = data["repair_loops"]
    click.echo(f"{len(loops)} open repair loops (the model keeps making the same mistake)")
    for loop in loops:
        click.echo(f"  {loop['chat_id']}: {loop['id']} ({loop['type']}, similarity {loop['similarity']:.2f}): "
                   f"{loop['second']}")


@click.command("recall")
@click.argument("chat_id", callback=_chat_arg)
@click.argument("query")
@data_dir_option
@click.option("--budget", type=int, default=None, help="Token budget (default: recall.budget_tokens).")
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON answer.")
def recall_cmd(chat_id, query, data_dir, budget, as_json):
    """Print the memory block the sidecar would inject for QUERY in CHAT_ID."""
    if budget is not None:
        try:
            budget = config.setting("recall.budget_tokens").validate(budget)
        except StbmeError as exc:
            raise click.ClickException(exc.message) from None
    result = run(data_dir, lambda svc: svc.recall.recall(chat_id, RecallRequest(query, budget_tokens=budget)))
    if as_json:
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(result["text"] or "(nothing relevant remembered)")
        click.echo(f"-- {result['tokens']} tokens, {len(result['memories'])} memories", err=True)


@click.command()
@click.argument("chat_id", callback=_chat_arg)
@click.option("-o", "--output", type=click.File("wb"), default="-", help="File to write (default stdout).")
@click.option("--format", "fmt", type=click.Choice(["stbme", "st-bme"]), default="stbme", show_default=True,
              help="stbme: ours; st-bme: a graph the original ST-BME extension can import.")
@data_dir_option
def export(chat_id, output, fmt, data_dir):
    """Export a chat's memories as JSON."""
    doc = run(data_dir, lambda svc: svc.transfer.export_chat(chat_id, fmt))
    output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    click.echo(f"exported {len(doc['nodes'])} memories, {len(doc['edges'])} edges", err=True)


@click.command("import")
@click.argument("chat_id", callback=_chat_arg)
@click.argument("file", type=click.File("rb"))
@click.option("--replace", is_flag=True, help="Replace the chat's memories instead of adding to them.")
@data_dir_option
def import_cmd(chat_id, file, replace, data_dir):
    """Import memories into CHAT_ID from FILE: an stbme export or an ST-BME extension graph export."""
    try:
        doc = orjson.loads(file.read())
    except orjson.JSONDecodeError as exc:
        raise click.ClickException(f"{file.name} is not valid JSON: {exc}") from None
    bar = ProgressBar("Embedding")
    try:
        result = run(data_dir, lambda svc: svc.transfer.import_chat(chat_id, doc, "replace" if replace else "merge",
                                                                    progress=bar))
    finally:
        bar.close()
    click.echo(f"imported {result['imported']['nodes']} memories and {result['imported']['edges']} edges"
               + (f"; skipped {len(result['skipped'])}" if result["skipped"] else ""), err=True)


@click.command()
@click.argument("chat_id", required=False, callback=_chat_arg)
@data_dir_option
def reindex(chat_id, data_dir):
    """Rebuild the HNSW index of CHAT_ID (or of every chat), embedding what lacks a vector."""
    async def go(svc: Services):
        known = [c["chat_id"] for c in await svc.chats.list()]
        if chat_id is not None and chat_id not in known:
            raise click.ClickException(f"no chat {chat_id!r} in {data_dir}; `stbme stats` lists the chats")
        chats = [chat_id] if chat_id else known
        for chat in chats:
            bar = ProgressBar(f"Indexing {chat[:40]}")
            try:
                result = await svc.embedding.reindex(chat, progress=bar)
            finally:
                bar.close()
            click.echo(f"{chat}: {result['indexed']} memories indexed", err=True)
        return len(chats)

    count = run(data_dir, go)
    if not count:
        click.echo("no chats yet", err=True)


@click.command()
@click.option("--markdown", is_flag=True, help="Print docs/settings.md.")
def settings(markdown):
    """List every setting with its default and meaning."""
    if markdown:
        click.echo(settings_markdown(), nl=False)
        return
    for s in config.SETTINGS:
        click.echo(f"{s.name} = {orjson.dumps(s.default).decode()}\n    {s.help}")


def settings_markdown() -> str:
    lines = ["# Settings", "", "Generated by `stbme settings --markdown`; a test checks it is current.", "",
             "| name | type | default | range | per chat | meaning |", "|---|---|---|---|---|---|"]
    for s in config.SETTINGS:
        rng = (f"{s.min:g}–{s.max:g}" if s.min is not None else "") + (
            " / ".join(s.choices) if s.choices else "")
        default = "" if s.secret else orjson.dumps(s.default).decode()
        lines.append(f"| `{s.name}` | {s.type} | `{default}` | {rng} | {'yes' if s.per_chat else ''} | "
                     f"{s.help}{' (restart)' if s.restart else ''} |")
    return "\n".join(lines) + "\n"
