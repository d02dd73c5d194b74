"""The Authority wire format: checks for request bodies (each failure is a 400 that names the field at
fault) and the timestamps answers carry."""

from __future__ import annotations

import math
import re
import time
from typing import Any

from ..errors import BadRequest

MAX_ID_CHARS = 512
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def body_object(body: Any) -> dict:
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def text(value: Any, field: str, *, max_chars: int = MAX_ID_CHARS, default: str | None = None) -> str:
    """A non-empty string without NUL characters (or the default when the value is missing)."""
    if value is None and default is not None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)  # ids that happen to be numbers
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"'{field}' must be a non-empty string", field=field)
    if len(value) > max_chars:
        raise BadRequest(f"'{field}' is longer than {max_chars} characters", field=field)
    if "\x00" in value:
        raise BadRequest(f"'{field}' contains a NUL character", field=field)
    return value


def name(value: Any, field: str, default: str) -> str:
    """A database name: 1-64 letters, digits, '.', '_' or '-'."""
    value = default if value is None or value == "" else value
    if not isinstance(value, str) or not _NAME.match(value):
        raise BadRequest(f"'{field}' must be 1-64 letters, digits, '.', '_' or '-'", field=field)
    return value


def integer(value: Any, field: str, *, lo: int, hi: int, default: int | None = None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadRequest(f"'{field}' must be a whole number from {lo} to {hi}", field=field)
    return value


def number(value: Any, field: str, *, default: float | None = None) -> float:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"'{field}' must be a finite number", field=field)
    return float(value)


def array(value: Any, field: str, *, max_items: int, allow_empty: bool = True) -> list:
    if not isinstance(value, list):
        raise BadRequest(f"'{field}' must be an array", field=field)
    if len(value) > max_items:
        raise BadRequest(f"'{field}' has {len(value)} entries; at most {max_items} per request", field=field)
    if not value and not allow_empty:
        raise BadRequest(f"'{field}' must not be empty", field=field)
    return value


def optional_object(value: Any, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"'{field}' must be an object", field=field)
    return value


def iso_time(ts: float) -> str:
    """A unix time as the ISO 8601 UTC text answers carry (milliseconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1000):03d}Z"
