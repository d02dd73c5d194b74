"""Stored setting values: global ones (scope '') and per-chat overrides (scope = chat id), as JSON."""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable

import orjson


class NotJson(str):
    """A stored value that is not JSON (the row was edited by hand): its text, for the warning that sets
    it aside (setting_rules.unreadable_values). Never a setting's value."""


def load_settings(conn: sqlite3.Connection, known: Iterable[str]) -> tuple[dict[str, Any], dict[str, dict]]:
    """(global values, {chat id: overrides}); rows of settings unknown to this version are kept, unused;
    a value that is not JSON comes back as NotJson (a start must never fail on one)."""
    known = set(known)
    glob: dict[str, Any] = {}
    chats: dict[str, dict] = {}
    for row in conn.execute("SELECT scope, name, value FROM settings"):
        if row["name"] not in known:
            continue  # a setting removed in a newer version: ignore, keep the row
        target = glob if row["scope"] == "" else chats.setdefault(row["scope"], {})
        try:
            target[row["name"]] = orjson.loads(row["value"])
        except (orjson.JSONDecodeError, TypeError):
            target[row["name"]] = NotJson(row["value"] if isinstance(row["value"], str) else repr(row["value"]))
    return glob, chats


def save_settings(conn: sqlite3.Connection, values: dict[str, Any], scope: str = "") -> None:
    """Store values for a scope; a None value removes that override."""
    for name, value in values.items():
        if value is None:
            conn.execute("DELETE FROM settings WHERE scope = ? AND name = ?", (scope, name))
        else:
            conn.execute("INSERT OR REPLACE INTO settings (scope, name, value) VALUES (?,?,?)",
                         (scope, name, orjson.dumps(value).decode()))
