"""Gene actions: what a gene does to the memory graph, how actions are checked, and how the plan's actions
(seed 001, `create_gene(name, description, triggers, actions)`, whose actions may have any shape) are
carried: mapped to ours when they name one of our ops, else kept as opaque templates.

Our actions are objects with `op`: `create_directive` (importance), `update_target` (a correction fixes or
invalidates what it contradicts), `pin`, `lock`, `reinforce` (amount), `decay` (amount), `importance` (delta);
`target` says whether an action applies to the new `directive` (default) or to the correction's `target`.

A plan action is anything else: a string, or an object without `op`. When it names an op (the string
itself, or the object's `type`/`action`; `remember` is the plan's verb for storing a memory) it becomes that
op, with the object's `importance`/`amount`/`delta` when they are in range. Otherwise it becomes
`{"op": "template", "original": ...}`, which does nothing here. Either way `original` keeps what was sent,
so exports and the hub give the plan's own action back."""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import BadRequest
from ..graph.changes import ChangeSet
from ..policy import REINFORCE_STEP

TEMPLATE = "template"
OPS = ("create_directive", "update_target", "pin", "lock", "reinforce", "decay", "importance", TEMPLATE)
TARGETS = ("directive", "target")
PARAMS = (("importance", 0, 10), ("amount", 0, 1), ("delta", -10, 10))
PLAN_NAMES = {**{op: op for op in OPS if op != TEMPLATE}, "remember": "create_directive"}
MAX_ACTIONS = 32
MAX_ORIGINAL_CHARS = 2000


def _original(raw: Any, where: str) -> Any:
    try:
        size = len(orjson.dumps(raw))
    except (TypeError, orjson.JSONEncodeError):
        raise BadRequest(f"'{where}' is not plain JSON", field=where) from None
    if size > MAX_ORIGINAL_CHARS:
        raise BadRequest(f"'{where}' is longer than {MAX_ORIGINAL_CHARS} characters of JSON", field=where)
    return raw


def _param(raw: dict, key: str, lo: float, hi: float) -> float | None:
    number = raw.get(key)
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not lo <= number <= hi:
        return None
    return float(number)


def our_action(raw: dict, where: str) -> dict:
    """An action in our shape ({op, ...}), checked strictly: a typo is a 400 naming it."""
    if raw.get("op") not in OPS:
        raise BadRequest(f"'{where}.op' must be one of {', '.join(OPS)}", field=f"{where}.op")
    action: dict[str, Any] = {"op": raw["op"]}
    target = raw.get("target", "directive")
    if target not in TARGETS:
        raise BadRequest(f"'{where}.target' must be directive or target", field=f"{where}.target")
    if target != "directive":
        action["target"] = target
    for key, lo, hi in PARAMS:
        if key in raw:
            number = _param(raw, key, lo, hi)
            if number is None:
                raise BadRequest(f"'{where}.{key}' must be a number from {lo} to {hi}", field=f"{where}.{key}")
            action[key] = number
    unknown = set(raw) - {"op", "target", "original"} - {key for key, _, _ in PARAMS}
    if unknown:
        key = sorted(unknown)[0]
        raise BadRequest(f"unknown key {key!r} in '{where}'", field=f"{where}.{key}")
    if "original" in raw:
        action["original"] = _original(raw["original"], f"{where}.original")
    elif action["op"] == TEMPLATE:
        raise BadRequest(f"'{where}' is a template: it needs 'original'", field=f"{where}.original")
    return action


def plan_action(raw: Any, where: str) -> dict:
    """A plan action (any JSON but an object with `op`): ours when it names an op, else a template."""
    original = _original(raw, where)
    name = raw if isinstance(raw, str) else (raw.get("type") or raw.get("action")) if isinstance(raw, dict) else None
    op = PLAN_NAMES.get(name.strip().lower()) if isinstance(name, str) else None
    if op is None:
        return {"op": TEMPLATE, "original": original}
    action: dict[str, Any] = {"op": op}
    if isinstance(raw, dict):
        for key, lo, hi in PARAMS:
            if key in raw:
                number = _param(raw, key, lo, hi)
                if number is None:   # a parameter we cannot honour: keep the whole action inert
                    return {"op": TEMPLATE, "original": original}
                action[key] = number
    action["original"] = original
    return action


def validate_actions(value: Any) -> list[dict]:
    """A gene's actions, ours checked strictly and the plan's mapped or kept (never a 400 for their shape)."""
    if not isinstance(value, list) or not value:
        raise BadRequest("'actions' must be a non-empty list of {op, ...} (or the plan's actions)", field="actions")
    if len(value) > MAX_ACTIONS:
        raise BadRequest(f"'actions' has more than {MAX_ACTIONS} entries", field="actions")
    return [our_action(raw, f"actions[{i}]") if isinstance(raw, dict) and "op" in raw else
            plan_action(raw, f"actions[{i}]") for i, raw in enumerate(value)]


def exported(action: dict) -> Any:
    """An action as exports and the hub carry it: what the plan sent, else ours."""
    return action["original"] if "original" in action else action


def runnable(actions: list[dict]) -> bool:
    """Whether any action does something here (a gene of templates only is kept, never selected)."""
    return any(a["op"] != TEMPLATE for a in actions)


def apply_ops(cs: ChangeSet, node_id: str, ops: list[dict]) -> None:
    """Apply gene actions (pin, lock, reinforce, decay, importance) to one memory; templates do nothing."""
    node = cs.get_node(node_id)
    if node is None:
        return
    changes: dict = {}
    weight, importance = node.weight, node.importance
    for op in ops:
        kind = op["op"]
        if kind == "pin":
            changes["pinned"] = True
        elif kind == "lock":
            changes["locked"] = True
        elif kind == "reinforce":
            weight = min(1.0, weight + op.get("amount", REINFORCE_STEP))
        elif kind == "decay":
            weight = max(0.0, weight - op.get("amount", REINFORCE_STEP))
        elif kind == "importance":
            importance = max(0.0, min(10.0, importance + op.get("delta", 1.0)))
    if weight != node.weight:
        changes["weight"] = round(weight, 6)
    if importance != node.importance:
        changes["importance"] = importance
    changes = {k: v for k, v in changes.items() if getattr(node, k) != v}
    if changes:
        cs.update_node(node_id, **changes)
