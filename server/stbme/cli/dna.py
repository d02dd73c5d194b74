"""DNA-style commands against a chat (`stbme dna ...`), each one definition of what it sends to the
sidecar's HTTP API and reads back, and the hub server (`stbme hub`)."""

from __future__ import annotations

import datetime
import re
import sys
from pathlib import Path
from urllib.parse import quote

import click
import orjson

from ..errors import BadRequest
from ..graph.schema import NODE_TYPES, RELATIONS, Strength
from ..origins import is_loopback
from .client import Sidecar, chat_path
from .common import chat_arg as _chat_arg
from .common import create_option, data_dir_option, echo_json as _echo_json, json_option as _json_option, run

DEFAULT_HUB_PORT = 8770   # api.hub.DEFAULT_HUB_PORT (a test keeps them equal)


@click.group("dna")
def dna_group():
    """DNA Memory commands against a chat: remember, recall, reflect, decay, link, list, delete, stats,
    export, genes, events; the plan's asset files: export-assets, import-assets.

    \b
      stbme dna remember CHAT "Elena is left-handed" --type correction --importance 8
      stbme dna list CHAT --type preference
      stbme dna decay CHAT && stbme dna reflect CHAT
      stbme dna events --chat CHAT --jsonl > events.jsonl
      stbme dna export-assets ./memory && stbme dna import-assets ./memory
    """


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.argument("text")
@click.option("--type", "type_", default="event", show_default=True, type=click.Choice(sorted(NODE_TYPES)),
              help="Memory type; the directive types are correction, preference, decision, error, workflow.")
@click.option("--importance", type=click.FloatRange(0, 10), default=6.0, show_default=True, help="Importance 0-10.")
@click.option("--pin", is_flag=True, help="Pin it (always considered first).")
@data_dir_option
@_json_option
def remember(chat_id, text, type_, importance, pin, data_dir, as_json):
    """Remember TEXT in CHAT_ID (a manual memory: chat edits never undo it)."""
    spec = NODE_TYPES[type_]
    field = spec.required[0] if spec.required else "summary"
    body = {"type": type_, "fields": {field: text}, "importance": importance, "pinned": pin}
    def show(node: dict) -> None:
        click.echo(node["id"])
        click.echo(f"remembered a {type_} memory in {chat_id}", err=True)

    run(data_dir, lambda api: api.post(chat_path(chat_id, "/nodes"), body, want="node"),
        show=_echo_json if as_json else show)


@dna_group.command("recall")
@click.argument("chat_id", callback=_chat_arg)
@click.argument("query")
@data_dir_option
@_json_option
def recall_cmd(chat_id, query, data_dir, as_json):
    """The memories recall would inject for QUERY (reinforces them, as a real recall does)."""
    def show(result: dict) -> None:
        for m in result["memories"]:
            click.echo(f"{m['id']}  {m['type']:<11} {m['score']:.3f}  {m['label']}")
        click.echo(f"-- {len(result['memories'])} memories, {result['tokens']} tokens", err=True)
        if result.get("degraded"):
            click.echo(f"-- {result['degraded']}", err=True)

    run(data_dir, lambda api: api.post(chat_path(chat_id, "/recall"), {"query": query}),
        show=_echo_json if as_json else show)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@data_dir_option
@_json_option
def reflect(chat_id, data_dir, as_json):
    """Consolidate memory layers and look for repair loops now."""
    def show(report: dict) -> None:
        layers = report["layers"]
        click.echo(f"layers: {layers['working']} working, {layers['short_term']} short-term, "
                   f"{layers['long_term']} long-term; {len(report['archived'])} archived; "
                   f"{len(report['repair_loops'])} new repair loops")

    run(data_dir, lambda api: api.post(chat_path(chat_id, "/dna/reflect"), want="reflect"),
        show=_echo_json if as_json else show)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@data_dir_option
@_json_option
def decay(chat_id, data_dir, as_json):
    """Run one decay pass now (memories under dna.forget_threshold are archived, not deleted)."""
    def show(report: dict) -> None:
        click.echo(f"{report['decayed']} of {report['checked']} memories decayed ({report['strategy']}), "
                   f"{len(report['archived'])} archived")

    run(data_dir, lambda api: api.post(chat_path(chat_id, "/dna/decay"), want="decay"),
        show=_echo_json if as_json else show)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.argument("from_id")
@click.argument("to_id")
@click.option("--relation", default="related", show_default=True, type=click.Choice(sorted(RELATIONS)),
              help="Edge relation.")
@click.option("--strength", type=click.FloatRange(0, 1), default=Strength.LINK, show_default=True,
              help="Edge strength 0-1.")
@data_dir_option
def link(chat_id, from_id, to_id, relation, strength, data_dir):
    """Link two memories of CHAT_ID."""
    body = {"from_id": from_id, "to_id": to_id, "relation": relation, "strength": strength}
    run(data_dir, lambda api: api.post(chat_path(chat_id, "/edges"), body, want="edge"),
        show=lambda edge: click.echo(edge["id"]))


@dna_group.command("list")
@click.argument("chat_id", callback=_chat_arg)
@click.option("--type", "type_", type=click.Choice(sorted(NODE_TYPES)), default=None, help="Only this type.")
@click.option("--archived", type=click.Choice(["false", "true", "all"]), default="false", show_default=True,
              help="Active, archived or all memories.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True, help="Most memories shown.")
@data_dir_option
@_json_option
def list_cmd(chat_id, type_, archived, limit, data_dir, as_json):
    """List memories of CHAT_ID (newest first), with weight and flags."""
    params = {"limit": limit, "archived": archived, **({"type": type_} if type_ else {})}
    def show(data: dict) -> None:
        for n in data["nodes"]:
            flags = "".join(f for f, on in (("P", n["pinned"]), ("L", n["locked"]), ("A", n["archived"])) if on)
            click.echo(f"{n['id']}  {n['type']:<11} w={n['weight']:.2f} i={n['importance']:g} {flags:<3} {n['label']}")
        click.echo(f"-- {len(data['nodes'])} of {data['total']}", err=True)

    run(data_dir, lambda api: api.get(chat_path(chat_id, "/nodes"), params=params),
        show=_echo_json if as_json else show)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.argument("node_id")
@data_dir_option
def delete(chat_id, node_id, data_dir):
    """Archive a memory (DNA never deletes: restore it from the memory browser or the API)."""
    run(data_dir, lambda api: api.post(chat_path(chat_id, f"/nodes/{quote(node_id, safe='')}/archive"), want="node"),
        show=lambda node: click.echo(f"archived {node['id']}", err=True))


@dna_group.command()
@click.argument("chat_id", required=False, callback=_chat_arg)
@data_dir_option
@_json_option
def stats(chat_id, data_dir, as_json):
    """DNA stats of CHAT_ID (layers, weights, directives, strategy, open repair loops), or of all chats."""
    def show(data: dict) -> None:
        click.echo(f"strategy: {data['strategy']['name']} (remember at confidence >= "
                   f"{data['strategy']['remember_threshold']:g})" + (f", capsule {data['capsule']}" if data["capsule"] else ""))
        layers = data["layers"]
        click.echo(f"layers: {layers['working']} working, {layers['short_term']} short-term, {layers['long_term']} "
                   f"long-term; {data['archived']} archived")
        click.echo(f"weight: average {data['weight']['average']:.2f}, {data['weight']['below_half']} below 0.5; "
                   f"{data['pinned']} pinned, {data['locked']} locked")
        click.echo("directives: " + ", ".join(f"{v} {k}" for k, v in data["directives"].items()))
        loops = data["open_repair_loops"]
        click.echo(f"open repair loops: {len(loops)}")
        for loop in loops:
            click.echo(f"  {loop['id']} ({loop['type']}, similarity {loop['similarity']:.2f}): {loop['second']}")

    run(data_dir, lambda api: api.get(chat_path(chat_id, "/dna") if chat_id else "/v1/dna/stats", want="stats"),
        show=_echo_json if as_json or not chat_id else show)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.option("-o", "--output", type=click.File("wb"), default="-", help="File to write (default stdout).")
@data_dir_option
def export(chat_id, output, data_dir):
    """Export CHAT_ID's memories with its DNA events (JSON)."""
    async def go(api: Sidecar):
        doc = await api.get(chat_path(chat_id, "/export"))
        events = await api.get("/v1/dna/events.jsonl", params={"chat_id": chat_id}, raw=True)
        doc["dna"] = {"stats": await api.get(chat_path(chat_id, "/dna"), want="stats"),
                      "events": [orjson.loads(line) for line in events.splitlines() if line.strip()]}
        return doc

    def show(doc: dict) -> None:
        output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        click.echo(f"exported {len(doc['nodes'])} memories and {len(doc['dna']['events'])} events", err=True)

    run(data_dir, go, show=show)


@dna_group.command()
@click.option("--disable", "disable_id", metavar="GENE_ID", default=None, help="Disable a gene.")
@click.option("--enable", "enable_id", metavar="GENE_ID", default=None, help="Enable a gene.")
@click.option("--add", "add_file", type=click.File("rb"), default=None,
              help="Add a gene from a JSON file {name, description, triggers, actions}.")
@data_dir_option
@_json_option
def genes(disable_id, enable_id, add_file, data_dir, as_json):
    """List genes (and capsules); add, enable or disable one."""
    body = None
    if add_file is not None:
        try:
            body = orjson.loads(add_file.read())
        except orjson.JSONDecodeError as exc:
            raise click.ClickException(f"{add_file.name} is not valid JSON: {exc}") from None

    async def go(api: Sidecar):
        if body is not None:
            click.echo(f"added {(await api.post('/v1/dna/genes', body, want='gene'))['id']}", err=True)
        for gene_id, on in ((disable_id, False), (enable_id, True)):
            if gene_id:
                await api.patch(f"/v1/dna/genes/{quote(gene_id, safe='')}", {"enabled": on}, want="gene")
                click.echo(f"{'enabled' if on else 'disabled'} {gene_id}", err=True)
        return {"genes": await api.get("/v1/dna/genes", want="genes"),
                "capsules": await api.get("/v1/dna/capsules", want="capsules")}

    def show(data: dict) -> None:
        for g in data["genes"]:
            triggers = ", ".join(t["type"] + (f"~/{t['pattern']}/" if t["pattern"] else "") for t in g["triggers"])
            actions = ", ".join(a["op"] for a in g["actions"])
            click.echo(f"{'+' if g['enabled'] else '-'} {g['id']:<24} used {g['usage_count']:>4}x  [{triggers}] -> "
                       f"{actions}")
        for c in data["capsules"]:
            click.echo(f"{'+' if c['enabled'] else '-'} {c['id']:<24} capsule ({c['strategy']}): "
                       f"{', '.join(c['gene_ids'])}")

    run(data_dir, go, show=_echo_json if as_json else show)


@dna_group.command()
@click.option("--chat", "chat_id", default=None, help="Only this chat's events.")
@click.option("--kind", default=None, help="Only this kind (signal, gene_use, correct, decay, archive, repair_loop, "
                                            "rollback, reflect, ...).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True,
              help="Most events (--jsonl: every one).")
@click.option("--jsonl", is_flag=True, help="Print JSON lines, oldest first (the export format).")
@data_dir_option
def events(chat_id, kind, limit, jsonl, data_dir):
    """The audit log: every gene use, signal, correction, decay, archive, repair loop and rollback."""
    filters = {k: v for k, v in (("chat_id", chat_id), ("kind", kind)) if v is not None}
    if jsonl:
        run(data_dir, lambda api: api.get("/v1/dna/events.jsonl", params=filters, raw=True),
            show=sys.stdout.buffer.write)
        return

    def show(rows: list) -> None:
        for e in reversed(rows):
            at = datetime.datetime.fromtimestamp(e["at"]).isoformat(timespec="seconds")
            click.echo(f"{at}  {e['kind']:<14} {e['chat_id'] or '-':<20} {orjson.dumps(e['data']).decode()}")

    run(data_dir, lambda api: api.get("/v1/dna/events", params={**filters, "limit": limit}, want="events"), show=show)


@dna_group.command("export-assets")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--chat", "chat_id", default=None, help="Only this chat's events (genes and capsules are global).")
@data_dir_option
def export_assets(directory, chat_id, data_dir):
    """Write genes.json, capsules.json and events.jsonl into DIRECTORY, in the DNA Memory plan's shapes."""
    from ..dna import plan_files

    async def go(api: Sidecar):
        data = await api.get("/v1/dna/assets")
        params = {"format": "plan", **({"chat_id": chat_id} if chat_id else {})}
        return data, await api.get("/v1/dna/events.jsonl", params=params, raw=True)

    def write(answer: tuple[dict, bytes]) -> None:
        data, events = answer
        try:
            directory.mkdir(parents=True, exist_ok=True)
            plan_files.write_json(directory / plan_files.GENES_FILE, data["genes"])
            plan_files.write_json(directory / plan_files.CAPSULES_FILE, data["capsules"])
            with plan_files.AtomicFile(directory / plan_files.EVENTS_FILE) as f:
                f.write(events)
        except OSError as exc:
            raise click.ClickException(f"cannot write to {directory}: {exc.strerror or exc}") from None
        lines = events.count(b"\n")
        click.echo(f"wrote {len(data['genes'])} genes, {len(data['capsules'])} capsules and {lines} events to "
                   f"{directory}", err=True)

    run(data_dir, go, show=write)


@dna_group.command("import-assets")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Overwrite genes and capsules whose id exists (default: keep them).")
@data_dir_option
@create_option
@_json_option
def import_assets(directory, replace, data_dir, create, as_json):
    """Add the genes, capsules and events of DIRECTORY (genes.json, capsules.json, events.jsonl, as the DNA
    Memory plan writes them or export-assets does). All or nothing; events already recorded are skipped."""
    from ..dna import plan_files

    try:
        plan_files.read_dir(directory)   # checked here: the same errors, naming the file, as the server's
        body = {"replace": replace}
        for key, name in (("genes", plan_files.GENES_FILE), ("capsules", plan_files.CAPSULES_FILE)):
            if (directory / name).is_file():
                body[key] = orjson.loads((directory / name).read_bytes())
        events = directory / plan_files.EVENTS_FILE
        lines = []   # the line number of each event sent
        if events.is_file():
            numbered = [(n, line) for n, line in enumerate(events.read_bytes().splitlines(), 1) if line.strip()]
            body["events"] = [orjson.loads(line) for _, line in numbered]
            lines = [n for n, _ in numbered]
    except BadRequest as exc:
        raise click.ClickException(exc.message) from None

    def in_files(message: str) -> str:
        """The server names what it was sent ("capsules[0]"); say which file that came from."""
        for key, name in (("genes", plan_files.GENES_FILE), ("capsules", plan_files.CAPSULES_FILE)):
            if message.startswith(f"{key}["):
                return name + message[len(key):]
        found = re.match(r"events\[(\d+)\]", message)
        if found and int(found.group(1)) < len(lines):
            return f"{plan_files.EVENTS_FILE} line {lines[int(found.group(1))]}" + message[found.end():]
        return message

    def show(report: dict) -> None:
        for kind in ("genes", "capsules"):
            counts = report[kind]
            click.echo(f"{kind}: {counts['added']} added, {counts['replaced']} replaced, {len(counts['kept'])} kept",
                       err=True)
        click.echo(f"events: {report['events']['added']} added, {report['events']['skipped']} already there", err=True)
        for warning in report["warnings"]:
            click.echo(f"warning: {warning}", err=True)

    try:
        run(data_dir, lambda api: api.post("/v1/dna/assets", body, want="imported"), create=create,
            show=_echo_json if as_json else show)
    except click.ClickException as exc:
        raise click.ClickException(in_files(exc.message)) from None


@click.command("hub")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind; anything but loopback "
              "requires --token.")
@click.option("--port", default=DEFAULT_HUB_PORT, show_default=True, type=int, help="Port to listen on.")
@data_dir_option
@click.option("--token", envvar="STBME_HUB_TOKEN", default=None,
              help="Token sidecars must send (their network.token) (env STBME_HUB_TOKEN).")
def hub_command(host, port, data_dir, token):
    """Run a DNA hub: sidecars heartbeat and share genes and capsules (never chat content)."""
    from aiohttp import web

    from ..api.hub import create_hub_app
    from .listen import listen

    if not is_loopback(host) and not token:
        raise click.ClickException(f"binding the hub to {host} needs --token (or STBME_HUB_TOKEN)")
    sock = listen(host, port)
    try:
        # The banner names the bound port: with --port 0 the OS picked it.
        click.echo(f"ST-BME DNA hub on http://{host}:{sock.getsockname()[1]}  (data: {data_dir})", err=True)
        web.run_app(create_hub_app(data_dir, token=token or ""), sock=sock, print=None, access_log=None)
    finally:
        sock.close()
