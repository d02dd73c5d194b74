"""SQLite persistence: one database, one writer thread, read-only reader connections."""

from .db import Store

__all__ = ["Store"]
