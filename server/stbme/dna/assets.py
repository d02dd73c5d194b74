"""GEP assets: genes (trigger -> actions templates), capsules (gene bundles with a strategy), and the
gene selection by signals. Events (the audit log) live in store/events.py.

A gene's triggers are `{type, pattern}`: a signal type (or `repair_loop`) and a regular expression
(empty = any text of that type). Its actions act on the memory graph (dna/actions.py, which also carries
the plan's actions). The plan's gene keys `created` (unix seconds) and `usage_count` are accepted too.
"""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import time
import uuid
from typing import Any

import orjson

from ..errors import BadRequest, Conflict, NotFound
from ..index.lexical import tokenize
from ..patterns import MAX_PATTERN_CHARS, PatternError, check_pattern, matches
from .actions import exported, runnable, validate_actions
from .signals import SIGNAL_TYPES
from ..policy import STRATEGIES

TRIGGER_TYPES = SIGNAL_TYPES + ("repair_loop",)
TYPE_MATCH = 0.3
SIMILARITY_WEIGHT = 0.7
MAX_PATTERN = MAX_PATTERN_CHARS
MAX_NAME = 120
MAX_DESCRIPTION = 2000


@dataclasses.dataclass
class Gene:
    id: str
    name: str
    description: str
    triggers: list[dict]
    actions: list[dict]
    enabled: bool = True
    builtin: bool = False
    origin: str = "local"
    usage_count: int = 0
    last_used: float | None = None
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def ops(self, target: str = "directive") -> list[dict]:
        return [a for a in self.actions if a.get("target", "directive") == target]

    def has(self, op: str) -> bool:
        return any(a["op"] == op for a in self.actions)

    def plan_json(self) -> dict:
        """The gene as the plan's `create_gene` writes it: `{id, name, description, triggers, actions, created,
        usage_count}`, its actions as they were sent, `created` in unix seconds. Our own keys follow only when
        they say something the plan has no key for: `enabled: false`, an `origin` other than local, and
        `last_used` once it was used here. So a plan user's gene goes back out with the plan's keys alone."""
        out = {"id": self.id, "name": self.name, "description": self.description, "triggers": self.triggers,
               "actions": [exported(a) for a in self.actions], "created": self.created_at,
               "usage_count": self.usage_count}
        return {**out, **_ours(enabled=self.enabled, origin=self.origin, last_used=self.last_used)}

    def api_json(self) -> dict:
        """The gene as the API answers it: the plan's keys (`created` in unix seconds, our typed actions),
        then ours."""
        return {"id": self.id, "name": self.name, "description": self.description, "triggers": self.triggers,
                "actions": self.actions, "created": self.created_at, "usage_count": self.usage_count,
                "enabled": self.enabled, "builtin": self.builtin, "origin": self.origin, "last_used": self.last_used,
                "updated_at": self.updated_at}


@dataclasses.dataclass
class Capsule:
    id: str
    name: str
    description: str
    gene_ids: list[str]
    strategy: str = "balanced"
    enabled: bool = True
    builtin: bool = False
    origin: str = "local"
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def plan_json(self) -> dict:
        """The capsule as the plan's `create_capsule` writes it: `{id, name, gene_ids, strategy, created}`; our
        keys follow only when they say something: a `description`, `enabled: false`, an `origin` other than
        local."""
        out = {"id": self.id, "name": self.name, "gene_ids": self.gene_ids, "strategy": self.strategy,
               "created": self.created_at}
        return {**out, **({"description": self.description} if self.description else {}),
                **_ours(enabled=self.enabled, origin=self.origin)}

    def api_json(self) -> dict:
        """The capsule as the API answers it: the plan's keys (`created` in unix seconds), then ours."""
        return {"id": self.id, "name": self.name, "gene_ids": self.gene_ids, "strategy": self.strategy,
                "created": self.created_at, "description": self.description, "enabled": self.enabled,
                "builtin": self.builtin, "origin": self.origin, "updated_at": self.updated_at}


def _ours(*, enabled: bool, origin: str, last_used: float | None = None) -> dict:
    """Our keys in an asset file, where they differ from what a plan file without them means."""
    return {**({} if enabled else {"enabled": False}), **({} if origin == "local" else {"origin": origin}),
            **({} if last_used is None else {"last_used": last_used})}


# -- built-ins ----------------------------------------------------------------------------------------
_EMPHASIS = r"\b(?:always|never|must|remember|absolutely)\b|一定|必须|永远|记住|绝对"
INSIST_DESCRIPTION = ("A preference, workflow or correction with 'always', 'never', 'must', 'remember' (一定, 必须, 永远, "
                      "记住) becomes an important directive with a head start: it starts at weight 0.8 instead of 0.5, "
                      "so it lasts longer before it fades (pin it to keep it for good).")
INSIST_ACTIONS = [{"op": "create_directive", "importance": 8}, {"op": "update_target"}, {"op": "reinforce", "amount": 0.3}]

BUILTIN_GENES = (
    Gene("gene_correction_fix", "Fix what a correction contradicts",
         "A correction ('her eyes are green, not blue') becomes a directive and rewrites the memory that said "
         "otherwise (or invalidates it when it cannot be rewritten).",
         [{"type": "correction", "pattern": ""}],
         [{"op": "create_directive", "importance": 8}, {"op": "update_target"}]),
    Gene("gene_preference_note", "Remember a story preference",
         "A preference ('slower pacing, don't rush the romance') becomes a directive.",
         [{"type": "preference", "pattern": ""}], [{"op": "create_directive", "importance": 7}]),
    Gene("gene_decision_record", "Record a decision",
         "A decision ('we decided the heist is at midnight') becomes a directive.",
         [{"type": "decision", "pattern": ""}], [{"op": "create_directive", "importance": 7}]),
    Gene("gene_error_guard", "Guard against a repeated mistake",
         "An error ('you keep forgetting she lost her arm') becomes an important directive.",
         [{"type": "error", "pattern": ""}], [{"op": "create_directive", "importance": 8}]),
    Gene("gene_workflow_steps", "Keep a workflow",
         "A workflow ('first describe the scene, then the dialogue') becomes a directive.",
         [{"type": "workflow", "pattern": ""}], [{"op": "create_directive", "importance": 7}]),
    # Its id is from when it pinned; pinned, a directive never decayed, so the strategy had no say over
    # what the user once insisted on (issue 22). The head start lets it last longer under every strategy.
    Gene("gene_insist_pin", "Hold on to what the user insists on", INSIST_DESCRIPTION,
         [{"type": "preference", "pattern": _EMPHASIS}, {"type": "workflow", "pattern": _EMPHASIS},
          {"type": "correction", "pattern": _EMPHASIS}], INSIST_ACTIONS),
    Gene("gene_repair_escalate", "Escalate a repair loop",
         "The model keeps making the same mistake: pin and lock the directive, raise its importance.",
         [{"type": "repair_loop", "pattern": ""}],
         [{"op": "pin"}, {"op": "lock"}, {"op": "importance", "delta": 2}, {"op": "reinforce", "amount": 1.0}]),
)
for _gene in BUILTIN_GENES:
    _gene.builtin, _gene.origin = True, "builtin"

BUILTIN_CAPSULES = (
    Capsule("capsule_story_steering", "Story steering",
            "Every built-in gene with the balanced strategy.",
            [g.id for g in BUILTIN_GENES], "balanced"),
    Capsule("capsule_strict_continuity", "Strict continuity",
            "Only confident corrections, errors and decisions; repair loops escalate (conservative).",
            ["gene_correction_fix", "gene_error_guard", "gene_decision_record", "gene_insist_pin",
             "gene_repair_escalate"], "conservative"),
    Capsule("capsule_free_form", "Free form",
            "Remember every preference, workflow and decision readily (aggressive).",
            ["gene_preference_note", "gene_workflow_steps", "gene_decision_record", "gene_correction_fix"],
            "aggressive"),
    Capsule("capsule_cleanup", "Cleanup",
            "Remember nothing new and decay idle memories fast (cleanup).", [], "cleanup"),
)
for _capsule in BUILTIN_CAPSULES:
    _capsule.builtin, _capsule.origin = True, "builtin"


def ensure_builtins(conn: sqlite3.Connection) -> None:
    """Insert missing built-in genes and capsules (users may have edited or disabled the others)."""
    for gene in BUILTIN_GENES:
        _insert_gene(conn, gene, ignore=True)
    for capsule in BUILTIN_CAPSULES:
        _insert_capsule(conn, capsule, ignore=True)


# -- validation -----------------------------------------------------------------------------------------
def _text(body: dict, key: str, limit: int, *, required: bool, default: str = "") -> str:
    value = body.get(key, default)
    if value is None and not required:
        value = default
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadRequest(f"'{key}' must be a{' non-empty' if required else ''} string", field=key)
    if len(value) > limit:
        raise BadRequest(f"'{key}' is longer than {limit} characters", field=key)
    return value.strip() if required else value


def validate_triggers(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise BadRequest("'triggers' must be a non-empty list of {type, pattern}", field="triggers")
    out = []
    for i, raw in enumerate(value[:32]):
        where = f"triggers[{i}]"
        if not isinstance(raw, dict):
            raise BadRequest(f"'{where}' must be an object with 'type' and 'pattern'", field=where)
        if raw.get("type") not in TRIGGER_TYPES:
            raise BadRequest(f"'{where}.type' must be one of {', '.join(TRIGGER_TYPES)}", field=f"{where}.type")
        pattern = raw.get("pattern", "") or ""
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
            raise BadRequest(f"'{where}.pattern' must be a string of at most {MAX_PATTERN} characters",
                             field=f"{where}.pattern")
        try:
            check_pattern(pattern)
        except PatternError as exc:
            raise BadRequest(f"'{where}.pattern' is not a usable regular expression: {exc}",
                             field=f"{where}.pattern") from None
        out.append({"type": raw["type"], "pattern": pattern})
    return out


def gene_from_body(body: Any, *, base: Gene | None = None) -> Gene:
    """A gene from an API body (a full one, or a partial edit of `base`)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with 'name', 'triggers' and 'actions'")
    unknown = set(body) - {"name", "description", "triggers", "actions", "enabled", "id", "created", "usage_count"}
    if unknown:
        key = sorted(unknown)[0]
        raise BadRequest(f"unknown key {key!r}", field=key)
    gene = dataclasses.replace(base) if base else Gene(
        id=_id("gene", body.get("id")), name="", description="", triggers=[], actions=[])
    if base is None or "name" in body:
        gene.name = _text(body, "name", MAX_NAME, required=True)
    if base is None or "description" in body:
        gene.description = _text(body, "description", MAX_DESCRIPTION, required=False)
    if base is None or "triggers" in body:
        gene.triggers = validate_triggers(body.get("triggers"))
    if base is None or "actions" in body:
        gene.actions = validate_actions(body.get("actions"))
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise BadRequest("'enabled' must be true or false", field="enabled")
        gene.enabled = body["enabled"]
    if "created" in body:
        gene.created_at = _count(body, "created", float)
    if "usage_count" in body:
        gene.usage_count = int(_count(body, "usage_count", int))
    gene.updated_at = time.time()
    return gene


def _count(body: dict, key: str, kind: type) -> float:
    """A plan number: `created` (unix seconds) or `usage_count`, never negative."""
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e12 or (
            kind is int and value != int(value)):
        raise BadRequest(f"'{key}' must be " + ("a whole number from 0" if kind is int else "unix seconds"), field=key)
    return kind(value)


def capsule_from_body(conn: sqlite3.Connection, body: Any, *, base: Capsule | None = None) -> Capsule:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object with 'name', 'gene_ids' and 'strategy'")
    unknown = set(body) - {"name", "description", "gene_ids", "strategy", "enabled", "id", "created"}
    if unknown:
        key = sorted(unknown)[0]
        raise BadRequest(f"unknown key {key!r}", field=key)
    capsule = dataclasses.replace(base) if base else Capsule(
        id=_id("capsule", body.get("id")), name="", description="", gene_ids=[])
    if base is None or "name" in body:
        capsule.name = _text(body, "name", MAX_NAME, required=True)
    if base is None or "description" in body:
        capsule.description = _text(body, "description", MAX_DESCRIPTION, required=False)
    if base is None or "gene_ids" in body:
        ids = body.get("gene_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or len(ids) > 200:
            raise BadRequest("'gene_ids' must be a list of gene ids", field="gene_ids")
        for gene_id in ids:
            if get_gene(conn, gene_id) is None:
                raise BadRequest(f"no gene {gene_id!r}", field="gene_ids")
        capsule.gene_ids = list(dict.fromkeys(ids))
    if base is None or "strategy" in body:
        strategy = body.get("strategy", "balanced")
        if strategy not in STRATEGIES:
            raise BadRequest(f"'strategy' must be one of {', '.join(STRATEGIES)}", field="strategy")
        capsule.strategy = strategy
    if "enabled" in body:
        if not isinstance(body["enabled"], bool):
            raise BadRequest("'enabled' must be true or false", field="enabled")
        capsule.enabled = body["enabled"]
    if "created" in body:
        capsule.created_at = _count(body, "created", float)
    capsule.updated_at = time.time()
    return capsule


def _id(prefix: str, wanted: Any) -> str:
    if wanted is None:
        return f"{prefix}_{uuid.uuid4().hex[:16]}"
    if not isinstance(wanted, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{3,80}", wanted):
        raise BadRequest("'id' must be 3-80 letters, digits or _ . : -", field="id")
    return wanted


# -- storage ------------------------------------------------------------------------------------------
def _gene_row(row: sqlite3.Row) -> Gene:
    data = dict(row)
    for key in ("triggers", "actions"):
        data[key] = orjson.loads(data[key])
    for key in ("enabled", "builtin"):
        data[key] = bool(data[key])
    return Gene(**data)


def _capsule_row(row: sqlite3.Row) -> Capsule:
    data = dict(row)
    data["gene_ids"] = orjson.loads(data["gene_ids"])
    for key in ("enabled", "builtin"):
        data[key] = bool(data[key])
    return Capsule(**data)


def _insert_gene(conn: sqlite3.Connection, gene: Gene, *, ignore: bool = False, replace: bool = False) -> None:
    verb = "INSERT OR IGNORE" if ignore else "INSERT OR REPLACE" if replace else "INSERT"
    row = gene.to_json()
    row["triggers"] = orjson.dumps(row["triggers"]).decode()
    row["actions"] = orjson.dumps(row["actions"]).decode()
    row["enabled"], row["builtin"] = int(row["enabled"]), int(row["builtin"])
    conn.execute(f"{verb} INTO genes ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def _insert_capsule(conn: sqlite3.Connection, capsule: Capsule, *, ignore: bool = False,
                    replace: bool = False) -> None:
    verb = "INSERT OR IGNORE" if ignore else "INSERT OR REPLACE" if replace else "INSERT"
    row = capsule.to_json()
    row["gene_ids"] = orjson.dumps(row["gene_ids"]).decode()
    row["enabled"], row["builtin"] = int(row["enabled"]), int(row["builtin"])
    conn.execute(f"{verb} INTO capsules ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                 list(row.values()))


def list_genes(conn: sqlite3.Connection, *, enabled_only: bool = False) -> list[Gene]:
    rows = conn.execute("SELECT * FROM genes WHERE (? = 0 OR enabled = 1) ORDER BY builtin DESC, created_at, id",
                        (int(enabled_only),)).fetchall()
    return [_gene_row(r) for r in rows]


def get_gene(conn: sqlite3.Connection, gene_id: str) -> Gene | None:
    row = conn.execute("SELECT * FROM genes WHERE id = ?", (gene_id,)).fetchone()
    return _gene_row(row) if row else None


def require_gene(conn: sqlite3.Connection, gene_id: str) -> Gene:
    gene = get_gene(conn, gene_id)
    if gene is None:
        raise NotFound(f"no gene {gene_id!r}", field="gene_id")
    return gene


def save_gene(conn: sqlite3.Connection, gene: Gene, *, new: bool) -> Gene:
    if new and get_gene(conn, gene.id) is not None:
        raise Conflict(f"a gene {gene.id!r} exists already", field="id")
    _insert_gene(conn, gene, replace=not new)
    return gene


def delete_gene(conn: sqlite3.Connection, gene_id: str) -> None:
    gene = require_gene(conn, gene_id)
    if gene.builtin:
        raise Conflict(f"{gene_id!r} is built in: disable it instead ({{\"enabled\": false}})", field="gene_id")
    users = [c.id for c in list_capsules(conn) if gene_id in c.gene_ids]
    if users:
        raise Conflict(f"gene {gene_id!r} is used by capsule {users[0]!r}; remove it there first", field="gene_id")
    conn.execute("DELETE FROM genes WHERE id = ?", (gene_id,))


def mark_used(conn: sqlite3.Connection, gene_id: str, at: float) -> None:
    conn.execute("UPDATE genes SET usage_count = usage_count + 1, last_used = ? WHERE id = ?", (at, gene_id))


def list_capsules(conn: sqlite3.Connection) -> list[Capsule]:
    return [_capsule_row(r) for r in conn.execute("SELECT * FROM capsules ORDER BY builtin DESC, created_at, id")]


def get_capsule(conn: sqlite3.Connection, capsule_id: str) -> Capsule | None:
    row = conn.execute("SELECT * FROM capsules WHERE id = ?", (capsule_id,)).fetchone()
    return _capsule_row(row) if row else None


def require_capsule(conn: sqlite3.Connection, capsule_id: str) -> Capsule:
    capsule = get_capsule(conn, capsule_id)
    if capsule is None:
        raise NotFound(f"no capsule {capsule_id!r}", field="capsule_id")
    return capsule


def save_capsule(conn: sqlite3.Connection, capsule: Capsule, *, new: bool) -> Capsule:
    if new and get_capsule(conn, capsule.id) is not None:
        raise Conflict(f"a capsule {capsule.id!r} exists already", field="id")
    _insert_capsule(conn, capsule, replace=not new)
    return capsule


def delete_capsule(conn: sqlite3.Connection, capsule_id: str) -> None:
    capsule = require_capsule(conn, capsule_id)
    if capsule.builtin:
        raise Conflict(f"{capsule_id!r} is built in: disable it instead", field="capsule_id")
    conn.execute("DELETE FROM capsules WHERE id = ?", (capsule_id,))


# -- selection ----------------------------------------------------------------------------------------
def pattern_similarity(pattern: str, content: str) -> float:
    """How well a trigger pattern fits a signal's text: 1 when the regular expression matches, else the
    share of the pattern's literal words found in the text (0 for an empty pattern)."""
    if not pattern:
        return 0.0
    if matches(pattern, content):  # RE2: linear time, whatever the pattern (a gene's is user-written)
        return 1.0
    words = set(tokenize(re.sub(r"\\[a-zA-Z]|[\^$.*+?()\[\]{}|\\]", " ", pattern)))
    if not words:
        return 0.0
    return len(words & set(tokenize(content))) / len(words)


def gene_score(gene: Gene, signals: list[dict]) -> float:
    """The seed's score: per signal and trigger of its type, 0.3 + similarity x 0.7; divided by the number
    of signals. `signals` are {type, content}."""
    if not signals:
        return 0.0
    score = 0.0
    for signal in signals:
        for trigger in gene.triggers:
            if trigger["type"] == signal["type"]:
                score += TYPE_MATCH + SIMILARITY_WEIGHT * pattern_similarity(trigger["pattern"], signal["content"])
    return score / len(signals)


def select_gene(genes: list[Gene], signals: list[dict]) -> tuple[Gene | None, float]:
    """The best-scoring enabled gene (score > 0) with an action that does something here (a gene of plan
    templates only never silences a signal). On a tie the user's own genes win, then genes whose
    triggers ask for no particular pattern (a pattern that did not match must not win a tie), then by id."""
    def tie_key(gene: Gene):
        return (gene.builtin, sum(1 for t in gene.triggers if t["pattern"]), gene.id)

    best, best_score = None, 0.0
    for gene in sorted((g for g in genes if g.enabled and runnable(g.actions)), key=tie_key):
        score = gene_score(gene, signals)
        if score > best_score + 1e-9:
            best, best_score = gene, score
    return best, round(best_score, 6)


def genes_for_chat(conn: sqlite3.Connection, capsule_id: str) -> tuple[list[Gene], str | None]:
    """The genes a chat may use and the capsule's strategy (None: the chat's own setting)."""
    genes = list_genes(conn, enabled_only=True)
    if not capsule_id:
        return genes, None
    capsule = get_capsule(conn, capsule_id)
    if capsule is None or not capsule.enabled:
        return genes, None  # a removed capsule must not silence the chat
    allowed = set(capsule.gene_ids)
    return [g for g in genes if g.id in allowed], capsule.strategy
