"""The DNA Memory plan's environment variables (seed 001): `DNA_MEMORY_STRATEGY` picks the evolution strategy;
`MEMORY_HUB_URL` and `MEMORY_NODE_ID` name a hub and this node, and, as in the plan's `MemoryNetwork`, the
network is on when both are known. A setting saved in the data directory (`PUT /v1/settings`, `--setting`)
wins over its variable. An unknown strategy name, in the variable or in saved settings, becomes `balanced`
with a warning, as the plan's `EvolutionStrategy` does (the HTTP API still refuses one with a 400)."""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

from .. import config
from ..errors import BadRequest
from ..policy import STRATEGIES

log = logging.getLogger("stbme.dna")
STRATEGY = "dna.evolution_strategy"
VARIABLES = {"DNA_MEMORY_STRATEGY": STRATEGY, "MEMORY_HUB_URL": "network.hub_url", "MEMORY_NODE_ID": "network.node_id"}
FALLBACK = "balanced"


def _known_strategy(value: Any, where: str) -> str:
    if value in STRATEGIES:
        return value
    log.warning("%s: unknown evolution strategy %r, using %s (known: %s)", where, value, FALLBACK, ", ".join(STRATEGIES))
    return FALLBACK


def apply_plan_environment(saved: dict[str, Any], chats: dict[str, dict], environ: Mapping[str, str] = os.environ) -> None:
    """Fill the settings not saved (`saved`: the global values loaded from the store) from the plan's
    variables, and make every saved strategy name a known one (`chats`: per-chat overrides). In place."""
    from_env = set()
    for variable, name in VARIABLES.items():
        value = environ.get(variable, "").strip()
        if not value:
            continue
        if name in saved:
            log.info("%s is set but the saved setting %s wins", variable, name)
            continue
        if name == STRATEGY:
            value = _known_strategy(value, variable)
        try:
            saved[name] = config.setting(name).validate(value)
        except BadRequest as exc:
            log.warning("%s ignored: %s", variable, exc.message)
            continue
        from_env.add(name)
    if from_env & {"network.hub_url", "network.node_id"} and "network.enabled" not in saved:
        effective = {n: saved.get(n, config.BY_NAME[n].default) for n in ("network.hub_url", "network.node_id")}
        if all(effective.values()):
            saved["network.enabled"] = True
    if STRATEGY in saved and STRATEGY not in from_env:
        saved[STRATEGY] = _known_strategy(saved[STRATEGY], f"setting {STRATEGY}")
    for chat_id, overrides in chats.items():
        if STRATEGY in overrides:
            overrides[STRATEGY] = _known_strategy(overrides[STRATEGY], f"setting {STRATEGY} of chat {chat_id!r}")
