"""DNA-style commands against a chat (`stbme dna ...`) and the hub server (`stbme hub`)."""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import click
import orjson

from ..api.hub import DEFAULT_HUB_PORT, create_hub_app
from ..api.middleware import is_loopback
from ..graph.schema import NODE_TYPES, RELATIONS, Strength
from ..services import Services
from ..usecases.memories import NewMemory
from ..usecases.recall import RecallRequest
from .commands import _chat_arg
from .common import create_option, data_dir_option, echo_json as _echo_json, json_option as _json_option, run


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
    node = run(data_dir, lambda svc: svc.memories.create(
        chat_id, NewMemory(type_, {field: text}, importance=importance, pinned=pin)))
    if as_json:
        _echo_json(node)
    else:
        click.echo(node["id"])
        click.echo(f"remembered a {type_} memory in {chat_id}", err=True)


@dna_group.command("recall")
@click.argument("chat_id", callback=_chat_arg)
@click.argument("query")
@data_dir_option
@_json_option
def recall_cmd(chat_id, query, data_dir, as_json):
    """The memories recall would inject for QUERY (reinforces them, as a real recall does)."""
    result = run(data_dir, lambda svc: svc.recall.recall(chat_id, RecallRequest(query)))
    if as_json:
        _echo_json(result)
        return
    for m in result["memories"]:
        click.echo(f"{m['id']}  {m['type']:<11} {m['score']:.3f}  {m['label']}")
    click.echo(f"-- {len(result['memories'])} memories, {result['tokens']} tokens", err=True)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@data_dir_option
@_json_option
def reflect(chat_id, data_dir, as_json):
    """Consolidate memory layers and look for repair loops now."""
    report = run(data_dir, lambda svc: svc.dna.reflect(chat_id))
    if as_json:
        _echo_json(report)
        return
    layers = report["layers"]
    click.echo(f"layers: {layers['working']} working, {layers['short_term']} short-term, "
               f"{layers['long_term']} long-term; {len(report['archived'])} archived; "
               f"{len(report['repair_loops'])} new repair loops")


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@data_dir_option
@_json_option
def decay(chat_id, data_dir, as_json):
    """Run one decay pass now (memories under dna.forget_threshold are archived, not deleted)."""
    report = run(data_dir, lambda svc: svc.dna.decay(chat_id))
    if as_json:
        _echo_json(report)
        return
    click.echo(f"{report['decayed']} of {report['checked']} memories decayed ({report['strategy']}), "
               f"{len(report['archived'])} archived")


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
    edge = run(data_dir, lambda svc: svc.memories.link(chat_id, from_id, to_id, relation, strength))
    click.echo(edge["id"])


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
    data = run(data_dir, lambda svc: svc.memories.list(
        chat_id, limit=limit, type_=type_, archived=None if archived == "all" else archived == "true"))
    if as_json:
        _echo_json(data)
        return
    for n in data["nodes"]:
        flags = "".join(f for f, on in (("P", n["pinned"]), ("L", n["locked"]), ("A", n["archived"])) if on)
        click.echo(f"{n['id']}  {n['type']:<11} w={n['weight']:.2f} i={n['importance']:g} {flags:<3} {n['label']}")
    click.echo(f"-- {len(data['nodes'])} of {data['total']}", err=True)


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.argument("node_id")
@data_dir_option
def delete(chat_id, node_id, data_dir):
    """Archive a memory (DNA never deletes: restore it from the memory browser or the API)."""
    node = run(data_dir, lambda svc: svc.memories.act(chat_id, node_id, "archive"))
    click.echo(f"archived {node['id']}", err=True)


@dna_group.command()
@click.argument("chat_id", required=False, callback=_chat_arg)
@data_dir_option
@_json_option
def stats(chat_id, data_dir, as_json):
    """DNA stats of CHAT_ID (layers, weights, directives, strategy, open repair loops), or of all chats."""
    data = run(data_dir, lambda svc: svc.dna.chat_stats(chat_id) if chat_id else svc.dna.global_stats())
    if as_json or not chat_id:
        _echo_json(data)
        return
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


@dna_group.command()
@click.argument("chat_id", callback=_chat_arg)
@click.option("-o", "--output", type=click.File("wb"), default="-", help="File to write (default stdout).")
@data_dir_option
def export(chat_id, output, data_dir):
    """Export CHAT_ID's memories with its DNA events (JSON)."""
    async def go(svc: Services):
        doc = await svc.transfer.export_chat(chat_id)
        doc["dna"] = {"stats": await svc.dna.chat_stats(chat_id),
                      "events": await svc.dna_assets.events(chat_id=chat_id, limit=100_000, oldest_first=True)}
        return doc

    doc = run(data_dir, go)
    output.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    click.echo(f"exported {len(doc['nodes'])} memories and {len(doc['dna']['events'])} events", err=True)


@dna_group.command()
@click.option("--disable", "disable_id", metavar="GENE_ID", default=None, help="Disable a gene.")
@click.option("--enable", "enable_id", metavar="GENE_ID", default=None, help="Enable a gene.")
@click.option("--add", "add_file", type=click.File("rb"), default=None,
              help="Add a gene from a JSON file {name, description, triggers, actions}.")
@data_dir_option
@_json_option
def genes(disable_id, enable_id, add_file, data_dir, as_json):
    """List genes (and capsules); add, enable or disable one."""
    async def go(svc: Services):
        if add_file is not None:
            try:
                body = orjson.loads(add_file.read())
            except orjson.JSONDecodeError as exc:
                raise click.ClickException(f"{add_file.name} is not valid JSON: {exc}") from None
            click.echo(f"added {(await svc.dna_assets.create_gene(body))['id']}", err=True)
        for gene_id, on in ((disable_id, False), (enable_id, True)):
            if gene_id:
                await svc.dna_assets.edit_gene(gene_id, {"enabled": on})
                click.echo(f"{'enabled' if on else 'disabled'} {gene_id}", err=True)
        return {"genes": await svc.dna_assets.list_genes(), "capsules": await svc.dna_assets.list_capsules()}

    data = run(data_dir, go)
    if as_json:
        _echo_json(data)
        return
    for g in data["genes"]:
        triggers = ", ".join(t["type"] + (f"~/{t['pattern']}/" if t["pattern"] else "") for t in g["triggers"])
        actions = ", ".join(a["op"] for a in g["actions"])
        click.echo(f"{'+' if g['enabled'] else '-'} {g['id']:<24} used {g['usage_count']:>4}x  [{triggers}] -> {actions}")
    for c in data["capsules"]:
        click.echo(f"{'+' if c['enabled'] else '-'} {c['id']:<24} capsule ({c['strategy']}): {', '.join(c['gene_ids'])}")


@dna_group.command()
@click.option("--chat", "chat_id", default=None, help="Only this chat's events.")
@click.option("--kind", default=None, help="Only this kind (signal, gene_use, correct, decay, archive, repair_loop, "
                                            "rollback, reflect, ...).")
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True, help="Most events.")
@click.option("--jsonl", is_flag=True, help="Print JSON lines, oldest first (the export format).")
@data_dir_option
def events(chat_id, kind, limit, jsonl, data_dir):
    """The audit log: every gene use, signal, correction, decay, archive, repair loop and rollback."""
    if jsonl:
        async def write(svc: Services):
            async for page in svc.dna_assets.event_lines(chat_id=chat_id, kind=kind):
                sys.stdout.buffer.write(page)
        run(data_dir, write)
        return
    rows = run(data_dir, lambda svc: svc.dna_assets.events(chat_id=chat_id, kind=kind, limit=limit))
    for e in reversed(rows):
        at = datetime.datetime.fromtimestamp(e["at"]).isoformat(timespec="seconds")
        click.echo(f"{at}  {e['kind']:<14} {e['chat_id'] or '-':<20} {orjson.dumps(e['data']).decode()}")


@dna_group.command("export-assets")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--chat", "chat_id", default=None, help="Only this chat's events (genes and capsules are global).")
@data_dir_option
def export_assets(directory, chat_id, data_dir):
    """Write genes.json, capsules.json and events.jsonl into DIRECTORY, in the DNA Memory plan's shapes."""
    report = run(data_dir, lambda svc: svc.dna_assets.export_plan_dir(directory, chat_id=chat_id))
    click.echo(f"wrote {report['genes']} genes, {report['capsules']} capsules and {report['events']} events "
               f"to {directory}", err=True)


@dna_group.command("import-assets")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--replace", is_flag=True, help="Overwrite genes and capsules whose id exists (default: keep them).")
@data_dir_option
@create_option
@_json_option
def import_assets(directory, replace, data_dir, create, as_json):
    """Add the genes, capsules and events of DIRECTORY (genes.json, capsules.json, events.jsonl, as the DNA
    Memory plan writes them or export-assets does). All or nothing; events already recorded are skipped."""
    report = run(data_dir, lambda svc: svc.dna_assets.import_plan_dir(directory, replace=replace), create=create)
    if as_json:
        _echo_json(report)
        return
    for kind in ("genes", "capsules"):
        counts = report[kind]
        click.echo(f"{kind}: {counts['added']} added, {counts['replaced']} replaced, {len(counts['kept'])} kept",
                   err=True)
    click.echo(f"events: {report['events']['added']} added, {report['events']['skipped']} already there", err=True)
    for warning in report["warnings"]:
        click.echo(f"warning: {warning}", err=True)


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

    if not is_loopback(host) and not token:
        raise click.ClickException(f"binding the hub to {host} needs --token (or STBME_HUB_TOKEN)")
    click.echo(f"ST-BME DNA hub on http://{host}:{port}  (data: {data_dir})", err=True)
    web.run_app(create_hub_app(data_dir, token=token or ""), host=host, port=port, print=None, access_log=None)
