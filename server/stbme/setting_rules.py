"""Rules between settings (a combination that cannot work is refused before it is saved, by the API and
by `--setting` alike), and stored settings made usable at start: a sidecar always starts, a bad stored
value degrades with a warning instead of a crash loop."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable

import orjson

from .config import BY_NAME, defaults
from .errors import BadRequest

log = logging.getLogger("stbme.settings")


@dataclasses.dataclass(frozen=True)
class Rule:
    """`field` is the setting a refusal names; `fallback` the values that make a stored combination work
    for one run."""
    field: str
    keys: tuple[str, ...]  # the settings the rule reads
    broken: Callable[[Callable[[str], Any]], bool]
    message: str
    fallback: dict[str, Any]


RULES: tuple[Rule, ...] = (
    Rule("embed.openai_url", ("embed.provider", "embed.openai_url"),
         lambda get: get("embed.provider") == "openai" and not get("embed.openai_url").strip(),
         "embed.provider is openai but embed.openai_url is empty: set the base URL of your embeddings API "
         "(for example http://127.0.0.1:11434/v1)", {"embed.provider": "local"}),
    Rule("llm.url", ("llm.mode", "llm.url"),
         lambda get: get("llm.mode") == "openai" and not get("llm.url").strip(),
         "llm.mode is openai but llm.url is empty: set the base URL of an OpenAI-compatible API "
         "(for example https://api.openai.com/v1)", {"llm.mode": "none"}),
    Rule("network.hub_url", ("network.enabled", "network.hub_url"),
         lambda get: get("network.enabled") and not get("network.hub_url").strip(),
         "network.enabled is on but network.hub_url is empty: set the hub's base URL "
         "(for example http://127.0.0.1:8770)", {"network.enabled": False}),
)


def check_combination(get: Callable[[str], Any], changed: set[str] | None = None) -> None:
    """Refuse (BadRequest naming the setting) a combination that cannot work; with `changed`, only the
    rules that read a changed setting (the others were checked when their values were saved)."""
    for rule in RULES:
        if (changed is None or changed & set(rule.keys)) and rule.broken(get):
            raise BadRequest(rule.message, field=rule.field)


@dataclasses.dataclass
class Degraded:
    """A stored setting this run does not use: why, and the stored values it set aside."""
    field: str
    message: str
    stored: dict[str, Any]
    rule: Rule | None = None  # None: one value that no longer validates (it is not restored)
    chat_id: str | None = None  # a per-chat override that was dropped

    def to_json(self) -> dict:
        return {"field": self.field, "message": self.message}


def unreadable_values(stored: dict[str, Any], chats: dict[str, dict], is_unreadable: Callable[[Any], bool]) -> list[Degraded]:
    """Take the stored values that are not JSON out of `stored` and `chats` (in place): the default (or the
    global value, for a chat) runs instead, until `stbme settings KEY VALUE` or the panel saves a new one."""
    degraded = []
    for chat_id, values in [(None, stored), *chats.items()]:
        for name in [n for n, v in values.items() if is_unreadable(v)]:
            raw = values.pop(name)
            where = f"value for chat {chat_id!r}" if chat_id else "value"
            instead = "the global value" if chat_id else "the default"
            shown = raw if len(raw) <= 60 else raw[:60] + "…"
            degraded.append(Degraded(name, f"the stored {where} {shown!r} is not JSON, so it is ignored; using "
                                     f"{instead} (save a new value to repair it: `stbme settings {name} VALUE`"
                                     + (f" --chat {chat_id!r}" if chat_id else "") + ")", {name: str(raw)},
                                     chat_id=chat_id))
    for item in degraded:
        log.warning("setting %s: %s", item.field, item.message)
    return degraded


def usable_values(stored: dict[str, Any], chats: dict[str, dict]) -> tuple[dict, dict, list[Degraded]]:
    """Stored settings made usable for this run: a value that no longer validates is replaced by its
    default (a per-chat one is dropped), a broken combination gets its rule's fallback. Nothing is
    written back: fixing the setting, or restarting after fixing it, ends the fallback."""
    degraded: list[Degraded] = []

    def clean(values: dict[str, Any], chat_id: str | None) -> dict[str, Any]:
        out = {}
        for name, value in values.items():
            try:
                out[name] = BY_NAME[name].validate(value)
            except BadRequest as exc:
                where = f"value for chat {chat_id!r}" if chat_id else "value"
                instead = "the global value" if chat_id else "the default"
                degraded.append(Degraded(name, f"the stored {where} is ignored ({exc.message}); using {instead}",
                                         {name: value}, chat_id=chat_id))
        return out

    values = clean(stored, None)
    chats = {chat: clean(over, chat) for chat, over in chats.items()}
    effective = defaults() | values
    for rule in RULES:
        if rule.broken(effective.__getitem__):
            running = ", ".join(f"{k} = {orjson.dumps(v).decode()}" for k, v in rule.fallback.items())
            degraded.append(Degraded(rule.field, f"{rule.message}; running with {running} until it is fixed",
                                     {k: effective[k] for k in rule.fallback}, rule))
            values.update(rule.fallback)
            effective.update(rule.fallback)
    for item in degraded:
        log.warning("setting %s: %s", item.field, item.message)
    return values, chats, degraded
