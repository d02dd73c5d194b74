"""One setting's definition: its type, bounds and help, and how a value is checked against it
(config.py holds the table of all of them)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from .errors import BadRequest

SettingValue = Any


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: SettingValue
    type: str  # int | float | bool | str | choice | list
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    per_chat: bool = False
    secret: bool = False
    restart: bool = False  # takes effect on the next start
    check: Callable[[Any], None] | None = None  # a further rule on the value; raises ValueError saying why

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[0]

    def as_schema(self) -> dict:
        return {
            "name": self.name,
            "type": self.type,
            "default": "" if self.secret else self.default,
            "min": self.min,
            "max": self.max,
            "choices": list(self.choices) if self.choices else None,
            "help": self.help,
            "group": self.group,
            "per_chat": self.per_chat,
            "secret": self.secret,
            "restart": self.restart,
        }

    def validate(self, value: Any) -> SettingValue:
        """Return the value coerced to this setting's type, or raise BadRequest naming the setting."""
        value = self._typed(value)
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                raise BadRequest(f"setting {self.name!r}: {exc}", field=self.name) from None
        return value

    def _typed(self, value: Any) -> SettingValue:
        bad = lambda why: BadRequest(f"setting {self.name!r}: {why}", field=self.name)  # noqa: E731
        if self.type == "bool":
            if isinstance(value, bool):
                return value
            raise bad(f"expected true or false, got {value!r}")
        if self.type in ("int", "float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise bad(f"expected a number, got {value!r}")
            if self.type == "int":
                if isinstance(value, float) and not value.is_integer():
                    raise bad(f"expected a whole number, got {value!r}")
                value = int(value)
            else:
                value = float(value)
                if not math.isfinite(value):
                    raise bad("expected a finite number")
            if self.min is not None and value < self.min:
                raise bad(f"{value} is below the minimum {self.min:g}")
            if self.max is not None and value > self.max:
                raise bad(f"{value} is above the maximum {self.max:g}")
            return value
        if self.type == "choice":
            if value not in (self.choices or ()):
                raise bad(f"expected one of {', '.join(self.choices or ())}, got {value!r}")
            return value
        if self.type == "str":
            if not isinstance(value, str):
                raise bad(f"expected a string, got {value!r}")
            if len(value) > 4000:
                raise bad("longer than 4000 characters")
            return value
        if self.type == "list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise bad("expected a list of strings")
            return list(value)
        raise AssertionError(f"unknown setting type {self.type}")
