"""The sidecar's exceptions. Each carries its HTTP status; one middleware renders them."""

from __future__ import annotations

from typing import Any


class StbmeError(Exception):
    """Base error: a message for the user, an HTTP status and, when one input is at fault, its name."""

    status = 500

    def __init__(self, message: str, *, field: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if status is not None:
            self.status = status


class BadRequest(StbmeError):
    status = 400


class Unauthorized(StbmeError):
    status = 401


class Forbidden(StbmeError):
    status = 403


class NotFound(StbmeError):
    status = 404


class Conflict(StbmeError):
    status = 409


class PayloadTooLarge(StbmeError):
    status = 413


class Unavailable(StbmeError):
    status = 503


class StoreClosed(StbmeError):
    """The store was closed; the server is shutting down."""

    status = 503


def error_body(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    """The one JSON shape of every error the sidecar (and the hub) answers."""
    return {"ok": False, "error": message, "errors": [message], "status": status, "field": field}
