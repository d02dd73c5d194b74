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
from ..services import DATABASE, Services
from ..setting_rules import RULES
from ..usecases.progress import format_duration
from ..usecases.recall import RecallRequest
from .common import ProgressBar, create_option, data_dir_option, owner_of, require_chat, run
from .owner import Owned, claim, release


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
    data_dir = data_dir.expanduser()
    try:
        # Other commands find the server by this lock and go through it instead of writing beside it.
        lock = claim(data_dir, data_dir / DATABASE, host, port, bool(token))
    except Owned as exc:
        raise click.ClickException(str(exc)) from None
    try:
        try:
            app = create_app(data_dir, host=host, token=token, cli_settings=cli_settings)
        except StbmeError as exc:
            raise click.ClickException(exc.message) from None
        click.echo(f"ST-BME sidecar {__version__} on http://{host}:{port}  (data: {data_dir})", err=True)
        web.run_app(app, host=host, port=port, print=None, access_log=None)
    finally:
        release(data_dir, lock)


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(data_dir, as_json):
    """Show chats, memories, progress (messages processed, memories embedded) and the job queue."""
    async def go(svc: Services):
        chats = await svc.chats.list()
        for chat in chats:
            chat["progress"] = (await svc.chats.status(chat["chat_id"]))["progress"]
        return {"health": await svc.health.report(), "chats": chats,
                "repair_loops": await svc.dna.list_loops(None)}

    data = run(data_dir, go)
    if as_json:
        click.echo(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode())
        return
    h = data["health"]
    click.echo(f"store: {h['store']['path'] or data_dir} (schema {h['store']['schema_version']})")
    click.echo(f"embedder: {h['embedder']['id']} ({h['embedder']['dim']}-d)")
    click.echo(f"queue: {h['queue']['pending']} pending, {h['queue']['running']} running, "
               f"{h['queue']['failed']} failed")
    click.echo(f"{len(data['chats'])} chats, {h['store']['nodes']} active memories")
    for chat in data["chats"]:
        p = chat["progress"]
        m, e = p["messages"], p["embedding"]
        working = f"; working, {format_duration(p['eta_s'])}" if p["working"] else ""
        click.echo(f"  {chat['chat_id']}: {chat['messages']} messages, {chat['nodes']} memories; processed "
                   f"{m['done']}/{m['total']} messages ({m['percent']:g}%), embedded {e['done']}/{e['total']} "
                   f"memories ({e['percent']:g}%){working}")
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
    async def go(svc: Services):
        await require_chat(svc, chat_id, data_dir)
        return await svc.recall.recall(chat_id, RecallRequest(query, budget_tokens=budget))

    result = run(data_dir, go)
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
    async def go(svc: Services):
        await require_chat(svc, chat_id, data_dir)
        return await svc.transfer.export_chat(chat_id, fmt)

    doc = run(data_dir, go)
    output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    click.echo(f"exported {len(doc['nodes'])} memories, {len(doc['edges'])} edges", err=True)


@click.command("import")
@click.argument("chat_id", callback=_chat_arg)
@click.argument("file", type=click.File("rb"))
@click.option("--replace", is_flag=True, help="Replace the chat's memories instead of adding to them.")
@data_dir_option
@create_option
def import_cmd(chat_id, file, replace, data_dir, create):
    """Import memories into CHAT_ID from FILE: an stbme export or an ST-BME extension graph export."""
    try:
        doc = orjson.loads(file.read())
    except orjson.JSONDecodeError as exc:
        raise click.ClickException(f"{file.name} is not valid JSON: {exc}") from None
    bar = ProgressBar("Embedding")
    try:
        result = run(data_dir, lambda svc: svc.transfer.import_chat(chat_id, doc, "replace" if replace else "merge",
                                                                    progress=bar), create=create)
    finally:
        bar.close()
    tied = result.get("tied_upto", -1)
    click.echo(f"imported {result['imported']['nodes']} memories and {result['imported']['edges']} edges"
               + (f"; skipped {len(result['skipped'])}" if result["skipped"] else "")
               + (f"; tied to messages 0-{tied}" if tied >= 0 else "")
               + (f" ({result['restored_messages']} messages restored)" if result.get("restored_messages") else "")
               + (f"; {result['left_for_processing']} memories of messages changed since the export are made "
                  "anew" if result.get("left_for_processing") else ""), err=True)


@click.command()
@click.argument("chat_id", required=False, callback=_chat_arg)
@data_dir_option
def reindex(chat_id, data_dir):
    """Rebuild the HNSW index of CHAT_ID (or of every chat), embedding what lacks a vector."""
    async def go(svc: Services):
        if chat_id is not None:
            await require_chat(svc, chat_id, data_dir)
        chats = [chat_id] if chat_id else [c["chat_id"] for c in await svc.chats.list()]
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
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--chat", "chat_id", default=None, callback=_chat_arg,
              help="A chat's effective values; with VALUE, set the chat's own value (per-chat settings; VALUE "
                   "null removes it).")
@click.option("--defaults", is_flag=True, help="List every setting with its default and meaning.")
@click.option("--markdown", is_flag=True, help="Print docs/settings.md.")
@data_dir_option
@create_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def settings(key, value, chat_id, defaults, markdown, data_dir, create, as_json):
    """Show the current settings, show one (KEY), or set one (KEY VALUE).

    \b
    VALUE is JSON, or plain text when it is not JSON:
      stbme settings recall.budget_tokens 600
      stbme settings server.extra_cors_origins '["http://192.168.1.10:8000"]'
    A running server gets the change at once (it goes through the server's API).
    """
    if markdown or defaults:
        if markdown:
            click.echo(settings_markdown(), nl=False)
        else:
            for s in config.SETTINGS:
                click.echo(f"{s.name} = {orjson.dumps(s.default).decode()}\n    {s.help}")
        return
    try:
        definition = config.setting(key) if key is not None else None
    except StbmeError as exc:
        close = [s.name for s in config.SETTINGS if key.split(".")[-1] in s.name][:5]
        raise click.ClickException(exc.message + (f"; did you mean {', '.join(close)}?" if close else
                                                  "; `stbme settings --defaults` lists them")) from None

    async def go(svc: Services):
        if value is not None:
            updates = {key: config.parse_cli_value(value)}
            if chat_id is not None:
                await svc.settings_service.update_chat(chat_id, updates)
            else:
                await svc.settings_service.update_global(updates)
        return await svc.chat_settings(chat_id)

    if value is None and owner_of(data_dir) is None and not (data_dir.expanduser() / DATABASE).exists():
        click.echo(f"(no sidecar data in {data_dir} yet: these are the defaults)", err=True)
        values = config.defaults()
    else:
        values = run(data_dir, go, create=create if value is not None else None)
    shown = {key: values[key]} if definition else values
    if as_json:
        click.echo(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode())
        return
    for name, current in shown.items():
        s = config.BY_NAME[name]
        note = "" if s.secret or current == s.default else f"   (default {orjson.dumps(s.default).decode()})"
        click.echo(f"{name} = {orjson.dumps(current).decode()}{note}")
        if definition:
            click.echo(f"    {s.help}" + (" Per chat." if s.per_chat else "")
                       + (" Takes effect on the next start." if s.restart else ""))


def settings_markdown() -> str:
    lines = ["# Settings", "", "Generated by `stbme settings --markdown`; a test checks it is current.", "",
             "| name | type | default | range | per chat | meaning |", "|---|---|---|---|---|---|"]
    for s in config.SETTINGS:
        rng = (f"{s.min:g}–{s.max:g}" if s.min is not None else "") + (
            " / ".join(s.choices) if s.choices else "")
        default = "" if s.secret else orjson.dumps(s.default).decode()
        lines.append(f"| `{s.name}` | {s.type} | `{default}` | {rng} | {'yes' if s.per_chat else ''} | "
                     f"{s.help}{' (restart)' if s.restart else ''} |")
    lines += ["", "## Rules between settings", "",
              "`PUT /v1/settings`, `stbme settings KEY VALUE` and `stbme serve --setting` refuse a combination that "
              "breaks one of these (400 "
              "naming the setting). A stored combination that breaks one (or a stored value that no longer "
              "validates) never stops the sidecar: it runs with the fallback, logs a warning and lists it under "
              "`settings_degraded` in `/health` and `degraded` in `GET /v1/settings` until the setting is fixed.",
              "", "| setting named | rule | fallback for the run |", "|---|---|---|"]
    for rule in RULES:
        fallback = ", ".join(f"`{k} = {orjson.dumps(v).decode()}`" for k, v in rule.fallback.items())
        lines.append(f"| `{rule.field}` | {rule.message} | {fallback} |")
    return "\n".join(lines) + "\n"
