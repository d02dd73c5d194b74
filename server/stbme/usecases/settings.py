"""Changing settings: validated, saved, applied, then announced to whoever depends on them (the embedder
switch, the memory LLM)."""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from .. import config
from ..dna.environment import apply_plan_environment
from ..store import Store
from ..store.settings import load_settings, save_settings

# A listener gets the values just saved and the values they replaced.
Listener = Callable[[dict[str, Any], dict[str, Any]], Awaitable[None]]


def open_settings(store: Store, cli_settings: dict[str, Any] | None = None) -> config.Settings:
    """The effective settings of a data directory; `--setting` values from the command line are saved first."""
    clean = config.validate_updates(cli_settings or {})
    if clean:
        store.write_sync(lambda conn: save_settings(conn, clean))
    glob, chats = store.read_sync(lambda conn: load_settings(conn, config.BY_NAME))
    apply_plan_environment(glob, chats)
    return config.Settings(glob, chats)


class SettingsService:
    def __init__(self, store: Store, settings: config.Settings):
        self.store = store
        self.settings = settings
        self.validators: list[Callable[[dict[str, Any], Callable[[str], Any]], Awaitable[None]]] = []
        self.listeners: list[Listener] = []

    async def update_global(self, updates: dict[str, Any]) -> dict[str, Any]:
        """Validate every value (and the combination), save, apply, notify. Nothing changes on error."""
        clean = config.validate_updates(updates)
        candidate = lambda name: clean[name] if name in clean else self.settings[name]  # noqa: E731
        for validate in self.validators:
            await validate(clean, candidate)
        previous = {k: self.settings[k] for k in clean}
        await self.store.write(lambda conn: save_settings(conn, clean))
        self.settings.apply_global(clean)
        for listener in self.listeners:
            await listener(clean, previous)
        return self.settings.all()

    async def update_chat(self, chat_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        """Per-chat overrides (None removes one). Returns the chat's effective settings."""
        clean = config.validate_updates(updates, per_chat=True)
        await self.store.write(lambda conn: save_settings(conn, clean, scope=chat_id))
        self.settings.apply_chat(chat_id, clean)
        return self.settings.all(chat_id)
