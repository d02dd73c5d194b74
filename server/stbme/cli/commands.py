"""The main commands: serve, stats, recall, export, import, reindex, settings. Each says once what it sends
to the sidecar's HTTP API and what it reads back (cli/common.py `run` finds the sidecar); the server stack
is imported only by `serve` and by a command that opens the data directory itself."""

from __future__ import annotations

import sys

import click
import orjson

from .. import __version__
from ..errors import StbmeError
from .client import Sidecar, chat_path
from .common import (ProgressBar, chat_arg, create_option, data_dir_option, echo_json, has_data, owner_of,
                     require_chat, run, warn_degraded)

DEFAULT_PORT = 8765   # api.DEFAULT_PORT (a test keeps them equal; importing api here would load the server)
POLL_S = 0.25


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
    import logging

    from aiohttp import web

    from .. import config
    from ..api.app import check_binding, create_app
    from .listen import listen
    from .owner import Owned, claim, release

    data_dir = data_dir.expanduser()
    try:
        # Everything that can refuse does so before anything is created: no database, no lock, no banner.
        check_binding(host, token)
        cli_settings = {name: config.parse_cli_value(value) for name, value in settings}
        config.validate_updates(cli_settings)
    except StbmeError as exc:
        raise click.ClickException(exc.message) from None
    sock = listen(host, port)
    try:
        try:
            # Other commands find the server by this lock and go through it instead of writing beside it.
            lock = claim(data_dir, host, sock.getsockname()[1], bool(token))
        except Owned as exc:
            raise click.ClickException(str(exc)) from None
        try:
            logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                                stream=sys.stderr)
            try:
                app = create_app(data_dir, host=host, token=token, cli_settings=cli_settings,
                                 identity_secret=lock.secret)
            except StbmeError as exc:
                raise click.ClickException(exc.message) from None
            shown = f"[{host}]" if ":" in host else host
            click.echo(f"ST-BME sidecar {__version__} on http://{shown}:{lock.port}  (data: {data_dir})", err=True)
            web.run_app(app, sock=sock, print=None, access_log=None)
        finally:
            release(data_dir, lock)
    finally:
        sock.close()


@click.command()
@data_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def stats(data_dir, as_json):
    """Show chats, memories, progress (messages processed, memories embedded) and the job queue."""
    async def go(api: Sidecar):
        health = await api.get("/health")
        chats = await api.get("/v1/chats", want="chats")
        for chat in chats:
            chat["progress"] = await api.get(chat_path(chat["chat_id"], "/status"), want="progress")
        loops = await api.get("/v1/dna/repair-loops", params={"status": "open"}, want="repair_loops")
        return {"health": health, "chats": chats, "repair_loops": loops}

    run(data_dir, go, show=echo_json if as_json else lambda data: show_stats(data, data_dir))


def show_stats(data: dict, data_dir) -> None:
    from ..usecases.progress import format_duration  # noqa: PLC0415

    h = data["health"]
    warn_degraded(h.get("settings_degraded"))
    click.echo(f"store: {h['store']['path'] or data_dir} (schema {h['store']['schema_version']})")
    click.echo(f"embedder: {h['embedder']['id']} ({h['embedder']['dim']}-d)")
    click.echo(f"queue: {h['queue']['pending']} pending, {h['queue']['running']} running, "
               f"{h['queue']['failed']} failed")
    click.echo(f"{len(data['chats'])} chats, {h['store']['nodes']} active memories")
    for task, reasons in ((h.get("llm") or {}).get("usage") or {}).get("dropped", {}).items():
        click.echo(f"memory LLM {task}: left out of its answers since start: "
                   + ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in reasons.items()))
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
@click.argument("chat_id", callback=chat_arg)
@click.argument("query")
@data_dir_option
@click.option("--budget", type=int, default=None, help="Token budget (default: recall.budget_tokens).")
@click.option("--json", "as_json", is_flag=True, help="Print the full JSON answer.")
def recall_cmd(chat_id, query, data_dir, budget, as_json):
    """Print the memory block the sidecar would inject for QUERY in CHAT_ID (it changes nothing: no
    memory is reinforced, as a look is not an injection)."""
    body = {"query": query, "reinforce": False}
    if budget is not None:
        body["budget_tokens"] = budget

    async def go(api: Sidecar):
        await require_chat(api, chat_id, data_dir)
        return await api.post(chat_path(chat_id, "/recall"), body)

    def show(result: dict) -> None:
        click.echo(result["text"] or "(nothing relevant remembered)")
        click.echo(f"-- {result['tokens']} tokens, {len(result['memories'])} memories", err=True)
        if result.get("degraded"):   # vectors were not used: why (keywords answered alone)
            click.echo(f"-- {result['degraded']}", err=True)

    run(data_dir, go, show=echo_json if as_json else show)


@click.command()
@click.argument("chat_id", callback=chat_arg)
@click.option("-o", "--output", type=click.File("wb"), default="-", help="File to write (default stdout).")
@click.option("--format", "fmt", type=click.Choice(["stbme", "st-bme"]), default="stbme", show_default=True,
              help="stbme: ours; st-bme: a graph the original ST-BME extension can import.")
@data_dir_option
def export(chat_id, output, fmt, data_dir):
    """Export a chat's memories as JSON."""
    async def go(api: Sidecar):
        await require_chat(api, chat_id, data_dir)
        return await api.get(chat_path(chat_id, "/export"), params={"format": fmt})

    def show(doc: dict) -> None:
        output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        click.echo(f"exported {len(doc['nodes'])} memories, {len(doc['edges'])} edges", err=True)

    run(data_dir, go, show=show)


async def while_embedding(api: Sidecar, chat_id: str, work, bar: ProgressBar):
    """Await `work` (a request that embeds the chat's memories before it answers) while the chat's status
    moves the bar."""
    import asyncio  # noqa: PLC0415

    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.wait({task}, timeout=POLL_S)
        if task.done():
            break
        try:
            embedding = (await api.get(chat_path(chat_id, "/status"), want="progress"))["embedding"]
        except StbmeError:
            continue  # the chat does not exist until the import's first write
        bar(embedding["done"], embedding["total"])
    return task.result()


@click.command("import")
@click.argument("chat_id", callback=chat_arg)
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

    async def go(api: Sidecar):
        request = api.post(chat_path(chat_id, "/import"), doc, params={"mode": "replace" if replace else "merge"})
        return await while_embedding(api, chat_id, request, bar)

    def show(result: dict) -> None:
        bar.close()
        imported, tied = result["imported"], result.get("tied_upto", -1)
        if not imported["nodes"] and not imported["edges"] and result.get("unchanged"):
            click.echo(f"nothing changed: {chat_id} already holds these {result['unchanged']} memories", err=True)
            return
        click.echo(f"imported {imported['nodes']} memories and {imported['edges']} edges"
                   + (f"; skipped {len(result['skipped'])}" if result["skipped"] else "")
                   + (f"; {result['unchanged']} already there" if result.get("unchanged") else "")
                   + (f"; tied to messages 0-{tied}" if tied >= 0 else "")
                   + (f" ({result['restored_messages']} messages restored)" if result.get("restored_messages") else "")
                   + (f"; {result['left_for_processing']} memories of messages changed since the export are made "
                      "anew" if result.get("left_for_processing") else ""), err=True)

    try:
        run(data_dir, go, create=create, show=show)
    finally:
        bar.close()


@click.command()
@click.argument("chat_id", required=False, callback=chat_arg)
@data_dir_option
def reindex(chat_id, data_dir):
    """Rebuild the HNSW index of CHAT_ID (or of every chat), embedding what lacks a vector."""
    import asyncio  # noqa: PLC0415

    async def go(api: Sidecar):
        if chat_id is not None:
            await require_chat(api, chat_id, data_dir)
        chats = [chat_id] if chat_id else [c["chat_id"] for c in await api.get("/v1/chats", want="chats")]
        for chat in chats:
            bar = ProgressBar(f"Indexing {chat[:40]}")
            try:
                await api.post(chat_path(chat, "/reindex"))
                while True:  # the sidecar's worker rebuilds it; its status says when
                    status = await api.get(chat_path(chat, "/status"))
                    embedding = status["progress"]["embedding"]
                    bar(embedding["done"], embedding["total"])
                    if not status["jobs"]["pending"]:
                        break
                    await asyncio.sleep(POLL_S)
            finally:
                bar.close()
            if status["jobs"]["failed"]:
                raise StbmeError(f"rebuilding the index of {chat!r} failed: {status['jobs']['last_error']}")
            count = status["index"]["count"]
            click.echo(f"{chat}: {status['nodes'] if count is None else count} memories indexed", err=True)
        return len(chats)

    if not run(data_dir, go, worker=True):
        click.echo("no chats yet", err=True)


# Names people try that are not settings: where that choice is made instead.
NOT_SETTINGS = {"server.port": "the port is `stbme serve --port`", "server.host": "the address is `stbme serve --host`",
                "server.token": "the API token is `stbme serve --token` (or STBME_TOKEN)"}


def unknown_setting(key: str, message: str) -> str:
    """The error for an unknown setting name, with what the user may have meant (by similar names, not by
    substrings: 'port' is not 'importance')."""
    import difflib

    from .. import config

    if key in NOT_SETTINGS:
        return f"{message}; {NOT_SETTINGS[key]}"
    names = [s.name for s in config.SETTINGS]
    close = difflib.get_close_matches(key, names, n=5, cutoff=0.75)
    if not close:  # the same last word in another group ("budget_tokens" for "recall.budget_tokens")
        close = [n for n in names if n.split(".")[-1] == key.split(".")[-1]][:5]
    return message + (f"; did you mean {', '.join(close)}?" if close else "; `stbme settings --defaults` lists them")


@click.command()
@click.argument("key", required=False)
@click.argument("value", required=False)
@click.option("--chat", "chat_id", default=None, callback=chat_arg,
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
    from .. import config

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
        raise click.ClickException(unknown_setting(key, exc.message)) from None
    path = chat_path(chat_id, "/settings") if chat_id is not None else "/v1/settings"

    async def go(api: Sidecar):
        if value is not None:   # the server answers with the values now in force
            return await api.put(path, {"settings": {key: config.parse_cli_value(value)}}, want="settings"), []
        answer = await api.get(path)
        if not isinstance(answer, dict) or not isinstance(answer.get("settings"), dict):
            raise api.unexpected(f"GET {path}", "no 'settings'")
        return answer["settings"], answer.get("degraded") or []

    def show(answer: tuple[dict, list]) -> None:
        values, degraded = answer
        warn_degraded(degraded)
        shown = {key: values[key]} if definition else {k: v for k, v in values.items() if k in config.BY_NAME}
        if as_json:
            echo_json(shown)
            return
        for name, current in shown.items():
            s = config.BY_NAME[name]
            note = "" if s.secret or current == s.default else f"   (default {orjson.dumps(s.default).decode()})"
            click.echo(f"{name} = {orjson.dumps(current).decode()}{note}")
            if definition:
                click.echo(f"    {s.help}" + (" Per chat." if s.per_chat else "")
                           + (" Takes effect on the next start." if s.restart else ""))

    if value is None and not has_data(data_dir) and owner_of(data_dir) is None:
        click.echo(f"(no sidecar data in {data_dir} yet: these are the defaults)", err=True)
        show((config.defaults(), []))
    else:
        run(data_dir, go, create=create if value is not None else None, show=show)


def settings_markdown() -> str:
    from .. import config
    from ..setting_rules import RULES

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
