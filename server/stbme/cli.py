"""The `stbme` command line."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click
import orjson

from . import __version__, config
from .app import DEFAULT_PORT, create_app
from .errors import StbmeError
from .sidecar import Sidecar


def default_data_dir() -> Path:
    return Path(click.get_app_dir("stbme"))


data_dir_option = click.option(
    "--data-dir", type=click.Path(file_okay=False, path_type=Path), envvar="STBME_DATA_DIR",
    default=default_data_dir, show_default="per-user dir, e.g. ~/.config/stbme",
    help="Where the database and indexes live (env STBME_DATA_DIR).")


def _run(data_dir: Path, fn):
    """Open the sidecar (without starting its worker), run `await fn(sidecar)`, close it."""
    async def main():
        sidecar = Sidecar.open(data_dir)
        try:
            return await fn(sidecar)
        finally:
            await sidecar.close()

    try:
        return asyncio.run(main())
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None


class _Bar:
    """A click progress bar on stderr that learns its length from the first report."""

    def __init__(self, label: str):
        self.label = label
        self.bar = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = click.progressbar(length=max(total, 1), label=self.label, file=sys.stderr,
                                         show_percent=True, show_eta=True)
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="stbme")
def main():
    """ST-BME Sidecar: long-term memory for SillyTavern roleplay chats.

    \b
    Quick start:
      stbme serve                      # start the sidecar on http://127.0.0.1:8765
      stbme stats                      # what it remembers
      stbme recall CHAT_ID "question"  # what it would inject for a question

    Then install the SillyTavern extension (st_extension/) and point it at the sidecar.
    """


@main.command()
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


@main.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(data_dir, as_json):
    """Show chats, memories and the job queue."""
    async def go(sc: Sidecar):
        return {"health": await sc.health(), "chats": await sc.list_chats(),
                "repair_loops": await sc.dna.list_loops(None)}

    data = _run(data_dir, go)
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


@main.command("recall")
@click.argument("chat_id")
@click.argument("query")
@data_dir_option
@click.option("--budget", type=int, default=None, help="Token budget (default: recall.budget_tokens).")
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON answer.")
def recall_cmd(chat_id, query, data_dir, budget, as_json):
    """Print the memory block the sidecar would inject for QUERY in CHAT_ID."""
    body = {"query": query, **({"budget_tokens": budget} if budget else {})}
    result = _run(data_dir, lambda sc: sc.recall(chat_id, body))
    if as_json:
        click.echo(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(result["text"] or "(nothing relevant remembered)")
        click.echo(f"-- {result['tokens']} tokens, {len(result['memories'])} memories", err=True)


@main.command()
@click.argument("chat_id")
@click.option("-o", "--output", type=click.File("wb"), default="-", help="File to write (default stdout).")
@data_dir_option
def export(chat_id, output, data_dir):
    """Export a chat's memories as JSON."""
    doc = _run(data_dir, lambda sc: sc.export_chat(chat_id))
    output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    click.echo(f"exported {len(doc['nodes'])} memories, {len(doc['edges'])} edges", err=True)


@main.command("import")
@click.argument("chat_id")
@click.argument("file", type=click.File("rb"))
@click.option("--replace", is_flag=True, help="Replace the chat's memories instead of adding to them.")
@data_dir_option
def import_cmd(chat_id, file, replace, data_dir):
    """Import memories into CHAT_ID from FILE: an stbme export or an ST-BME extension graph export."""
    try:
        doc = orjson.loads(file.read())
    except orjson.JSONDecodeError as exc:
        raise click.ClickException(f"{file.name} is not valid JSON: {exc}") from None
    bar = _Bar("Embedding")
    try:
        result = _run(data_dir, lambda sc: sc.import_chat(chat_id, doc, "replace" if replace else "merge",
                                                           progress=bar))
    finally:
        bar.close()
    click.echo(f"imported {result['imported']['nodes']} memories and {result['imported']['edges']} edges"
               + (f"; skipped {len(result['skipped'])}" if result["skipped"] else ""), err=True)


@main.command()
@click.argument("chat_id", required=False)
@data_dir_option
def reindex(chat_id, data_dir):
    """Rebuild the HNSW index of CHAT_ID (or of every chat), embedding what lacks a vector."""
    async def go(sc: Sidecar):
        known = [c["chat_id"] for c in await sc.list_chats()]
        if chat_id is not None and chat_id not in known:
            raise click.ClickException(f"no chat {chat_id!r} in {data_dir}; `stbme stats` lists the chats")
        chats = [chat_id] if chat_id else known
        for chat in chats:
            bar = _Bar(f"Indexing {chat[:40]}")
            try:
                result = await sc.reindex(chat, progress=bar)
            finally:
                bar.close()
            click.echo(f"{chat}: {result['indexed']} memories indexed", err=True)
        return len(chats)

    count = _run(data_dir, go)
    if not count:
        click.echo("no chats yet", err=True)


@main.command()
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


# The DNA layer's commands (`stbme dna ...`, `stbme hub`); imported last: they use this module's helpers.
from .dna.cli import dna_group, hub_command  # noqa: E402

main.add_command(dna_group)
main.add_command(hub_command)


if __name__ == "__main__":  # python -m stbme.cli
    main()
