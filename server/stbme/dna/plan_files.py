"""The plan's asset files (seed 001, `GEPAssets`): `genes.json` and `capsules.json` (JSON lists) and
`events.jsonl` (one `{timestamp, type, details}` per line), as an export and import format a user of the
plan can carry over, both ways.

Genes and capsules are written in the plan's shape (`created` in unix seconds, a gene's actions as the plan
sent them, `usage_count`; `Gene.plan_json`, `Capsule.plan_json`), followed by our own keys only where they say
something the plan's keys do not (a disabled asset, one from a hub or built in, when a gene was last used),
so a plan user's files go back out with the plan's keys; an event line adds `chat_id` when it belongs to a chat. Reading accepts the plan's files as the plan writes them (ids such as
`gene_1713370000`, any action shape, a capsule strategy we do not know: balanced, with a warning, as the
plan's `EvolutionStrategy` does). Files are written to a temporary name and renamed, so a crash leaves the
old file or the new one, never half of one."""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable

import orjson

from ..errors import BadRequest
from ..policy import STRATEGIES
from . import assets
from .actions import runnable

GENES_FILE = "genes.json"
CAPSULES_FILE = "capsules.json"
EVENTS_FILE = "events.jsonl"
GENE_KEYS = ("id", "name", "description", "triggers", "actions", "enabled", "created", "usage_count")
CAPSULE_KEYS = ("id", "name", "description", "gene_ids", "strategy", "enabled", "created")
ORIGINS = ("local", "hub")
MAX_KIND = 64
MAX_CHAT_ID = 1024
MAX_EVENT_CHARS = 64 * 1024


@dataclasses.dataclass
class PlanEvent:
    chat_id: str | None
    at: float
    kind: str
    data: str   # the details as JSON


@dataclasses.dataclass
class PlanBundle:
    """What an import carries, checked: genes, capsule bodies (checked against the genes when written),
    events, and what had to be changed on the way."""
    genes: list[assets.Gene] = dataclasses.field(default_factory=list)
    capsules: list[tuple[str, dict]] = dataclasses.field(default_factory=list)   # (where, body)
    events: list[PlanEvent] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


# -- our data in the plan's shapes ------------------------------------------------------------------
def event_json(event: dict) -> dict:
    """One of our events as the plan's `record_event` writes it."""
    line = {"timestamp": event["at"], "type": event["kind"], "details": event["data"]}
    if event["chat_id"] is not None:
        line["chat_id"] = event["chat_id"]
    return line


# -- reading the plan's shapes -------------------------------------------------------------------------
def _located(where: str, exc: BadRequest) -> BadRequest:
    return BadRequest(f"{where}: {exc.message}", field=f"{where}.{exc.field}" if exc.field else where)


def _list(value: Any, name: str) -> list:
    if not isinstance(value, list):
        raise BadRequest(f"{name} must be a JSON list", field=name)
    return value


def parse_genes(value: Any, bundle: PlanBundle, name: str = GENES_FILE) -> None:
    for i, raw in enumerate(_list(value, name)):
        where = f"{name}[{i}]"
        if not isinstance(raw, dict):
            raise BadRequest(f"{where} must be a gene object", field=where)
        try:
            gene = assets.gene_from_body({k: raw[k] for k in GENE_KEYS if k in raw})
        except BadRequest as exc:
            raise _located(where, exc) from None
        gene.origin = raw.get("origin") if raw.get("origin") in ORIGINS else "local"
        last_used = raw.get("last_used")
        if isinstance(last_used, (int, float)) and not isinstance(last_used, bool) and math.isfinite(last_used):
            gene.last_used = float(last_used)
        if "id" not in raw:
            bundle.warnings.append(f"{where} had no id: it is {gene.id}")
        bundle.genes.append(gene)
        templates = sum(1 for a in gene.actions if a["op"] == "template")
        if templates:
            bundle.warnings.append(f"{where} ({gene.id}): {templates} of {len(gene.actions)} actions kept as "
                                   "templates that do nothing here" + ("" if runnable(gene.actions) else
                                                                       "; the gene is never selected"))


def parse_capsules(value: Any, bundle: PlanBundle, name: str = CAPSULES_FILE) -> None:
    for i, raw in enumerate(_list(value, name)):
        where = f"{name}[{i}]"
        if not isinstance(raw, dict):
            raise BadRequest(f"{where} must be a capsule object", field=where)
        body = {k: raw[k] for k in CAPSULE_KEYS if k in raw}
        if "strategy" in body and body["strategy"] not in STRATEGIES:
            bundle.warnings.append(f"{where}: unknown strategy {body['strategy']!r}, using balanced")
            body["strategy"] = "balanced"
        bundle.capsules.append((where, body))


def parse_event(raw: Any, where: str) -> PlanEvent:
    if not isinstance(raw, dict):
        raise BadRequest(f"{where} must be an object {{timestamp, type, details}}", field=where)
    at = raw.get("timestamp")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at) or at < 0:
        raise BadRequest(f"{where}.timestamp must be unix seconds", field=f"{where}.timestamp")
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind.strip() or len(kind) > MAX_KIND:
        raise BadRequest(f"{where}.type must be a string of 1-{MAX_KIND} characters", field=f"{where}.type")
    chat_id = raw.get("chat_id")
    if chat_id is not None and (not isinstance(chat_id, str) or not chat_id or len(chat_id) > MAX_CHAT_ID):
        raise BadRequest(f"{where}.chat_id must be a chat id", field=f"{where}.chat_id")
    try:
        data = orjson.dumps(raw.get("details", {})).decode()
    except orjson.JSONEncodeError:
        raise BadRequest(f"{where}.details is not plain JSON", field=f"{where}.details") from None
    if len(data) > MAX_EVENT_CHARS:
        raise BadRequest(f"{where}.details is longer than {MAX_EVENT_CHARS} characters", field=f"{where}.details")
    return PlanEvent(chat_id, float(at), kind, data)


def parse_events(lines: Iterable[Any], bundle: PlanBundle, name: str = EVENTS_FILE) -> None:
    bundle.events.extend(parse_event(raw, f"{name}[{i}]") for i, raw in enumerate(lines))


def parse_body(body: Any) -> PlanBundle:
    """An import through the API: `{genes?, capsules?, events?}`, the files' contents."""
    if not isinstance(body, dict):
        raise BadRequest("send {\"genes\": [...], \"capsules\": [...], \"events\": [...]} (the plan's files)")
    unknown = set(body) - {"genes", "capsules", "events", "replace"}
    if unknown:
        key = sorted(unknown)[0]
        raise BadRequest(f"unknown key {key!r}", field=key)
    bundle = PlanBundle()
    parse_genes(body.get("genes", []), bundle, "genes")
    parse_capsules(body.get("capsules", []), bundle, "capsules")
    parse_events(_list(body.get("events", []), "events"), bundle, "events")
    return bundle


# -- the files ---------------------------------------------------------------------------------------------
def _load_json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{path.name} is not valid JSON: {exc}", field=path.name) from None
    except OSError as exc:
        raise BadRequest(f"cannot read {path}: {exc.strerror or exc}", field=path.name) from None


def read_dir(directory: Path) -> PlanBundle:
    """The plan's files in `directory` (a missing file is an empty one; none at all is an error)."""
    directory = Path(directory)
    paths = [directory / n for n in (GENES_FILE, CAPSULES_FILE, EVENTS_FILE)]
    if not any(p.is_file() for p in paths):
        raise BadRequest(f"{directory} holds none of {GENES_FILE}, {CAPSULES_FILE}, {EVENTS_FILE}", field="dir")
    bundle = PlanBundle()
    genes, capsules, events = paths
    if genes.is_file():
        parse_genes(_load_json(genes), bundle)
    if capsules.is_file():
        parse_capsules(_load_json(capsules), bundle)
    if events.is_file():
        try:
            _read_events(events, bundle)
        except OSError as exc:
            raise BadRequest(f"cannot read {events}: {exc.strerror or exc}", field=EVENTS_FILE) from None
    return bundle


def _read_events(events: Path, bundle: PlanBundle) -> None:
    """events.jsonl a line at a time (blank lines skipped); a bad line is a 400 naming its number."""
    with events.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{EVENTS_FILE} line {number}"
            try:
                raw = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise BadRequest(f"{where} is not valid JSON: {exc}", field=EVENTS_FILE) from None
            bundle.events.append(parse_event(raw, where))


class AtomicFile:
    """A file written under a temporary name in its directory and renamed into place on success."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def __enter__(self):
        fd, self.tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        self.file = os.fdopen(fd, "wb")
        return self.file

    def __exit__(self, exc_type, exc, tb):
        self.file.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            os.unlink(self.tmp)


def write_json(path: Path, value: Any) -> None:
    with AtomicFile(path) as f:
        f.write(orjson.dumps(value, option=orjson.OPT_INDENT_2))
