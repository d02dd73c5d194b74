"""Changing settings: validated (each value, then the combination), saved, applied, then announced to
whoever depends on them (the embedder switch, the memory LLM). `--setting` on the command line and
`PUT /v1/settings` go through the same rules."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from .. import config
from ..dna.environment import apply_plan_environment
from ..setting_rules import check_combination, unreadable_values, usable_values
from ..store import Store
from ..store.settings import NotJson, load_settings, save_settings

# A listener gets the values just saved and the values they replaced.
Listener = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]


def plan_global_update(settings: config.Settings, updates: Any) -> tuple[dict[str, Any], dict[str, Any], list]:
    """Check a global update against every rule: (values to save, values to apply, degraded entries left).

    A stored combination set aside at start (setting_rules.usable_values) comes back when an update
    touches it, so fixing half of it restores the other half; the result must then pass the rules."""
    clean = config.validate_updates(updates)
    restored: dict[str, Any] = {}
    left = []
    for item in settings.degraded:
        touched = item.chat_id is None and set(item.rule.keys if item.rule else item.stored) & set(clean)
        if touched and item.rule is not None:
            restored.update({k: v for k, v in item.stored.items() if k not in clean})
        if not touched:
            left.append(item)
    applied = {**restored, **clean}
    check_combination(lambda name: applied[name] if name in applied else settings[name], changed=set(applied))
    return clean, applied, left


def open_settings(store: Store, cli_settings: dict[str, Any] | None = None) -> config.Settings:
    """The effective settings of a data directory. Stored values that cannot work are set aside for this
    run with a warning (never a failed start); `--setting` values are checked like an API update, then saved."""
    glob, chats = store.read_sync(lambda conn: load_settings(conn, config.BY_NAME))
    unreadable = unreadable_values(glob, chats, lambda value: isinstance(value, NotJson))
    apply_plan_environment(glob, chats)
    values, chats, degraded = usable_values(glob, chats)
    settings = config.Settings(values, chats)
    settings.degraded = unreadable + degraded
    if cli_settings:
        clean, applied, settings.degraded = plan_global_update(settings, cli_settings)
        store.write_sync(lambda conn: save_settings(conn, clean))
        settings.apply_global(applied)
    return settings


class SettingsService:
    def __init__(self, store: Store, settings: config.Settings):
        self.store = store
        self.settings = settings
        self.validators: list[Callable[[dict[str, Any], Callable[[str], Any]], Awaitable[None]]] = []
        self.listeners: list[Listener] = []

    async def update_global(self, updates: dict[str, Any]) -> dict[str, Any]:
        """Validate every value (and the combination), save, apply, notify. Nothing changes on error."""
        clean, applied, left = plan_global_update(self.settings, updates)
        candidate = lambda name: applied[name] if name in applied else self.settings[name]  # noqa: E731
        for validate in self.validators:
            await validate(applied, candidate)
        previous = {k: self.settings[k] for k in applied}
        await self.store.write(lambda conn: save_settings(conn, clean))
        self.settings.apply_global(applied)
        self.settings.degraded = left
        for listener in self.listeners:
            await listener(applied, previous)
        return self.settings.all()

    async def update_chat(self, chat_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        """Per-chat overrides (None removes one). Returns the chat's effective settings."""
        clean = config.validate_updates(updates, per_chat=True)
        await self.store.write(lambda conn: save_settings(conn, clean, scope=chat_id))
        self.settings.apply_chat(chat_id, clean)
        self.settings.degraded = [d for d in self.settings.degraded
                                  if not (d.chat_id == chat_id and set(d.stored) & set(clean))]
        return self.settings.all(chat_id)
