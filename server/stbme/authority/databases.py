"""SQLite files of the Authority bridge, opened on demand: one Store (one writer thread) per file."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from ..errors import StbmeError
from ..hashing import chat_file_key
from ..store import Store

Migrations = list[tuple[str, Callable]]


class TooManyDatabases(StbmeError):
    status = 403


class StoreSet:
    """The databases of one kind for one extension: a file per name (hashed: names are client strings),
    at most `limit` of them, each opened once and kept open until close()."""

    def __init__(self, directory: Path, migrations: Migrations, *, limit: int, what: str):
        self.directory = Path(directory)
        self.migrations = migrations
        self.limit = limit
        self.what = what
        self._stores: dict[str, Store] = {}
        self._lock = asyncio.Lock()

    def path(self, name: str) -> Path:
        return self.directory / f"{chat_file_key(name)}.sqlite3"

    def exists(self, name: str) -> bool:
        return name in self._stores or self.path(name).exists()

    def opened(self) -> dict[str, Store]:
        return dict(self._stores)

    async def get(self, name: str) -> Store:
        store = self._stores.get(name)
        if store is not None:
            return store
        async with self._lock:
            store = self._stores.get(name)
            if store is None:
                if not self.path(name).exists() and len(list(self.directory.glob("*.sqlite3"))) >= self.limit:
                    raise TooManyDatabases(f"at most {self.limit} {self.what} databases per extension",
                                           field="database")
                self.directory.mkdir(parents=True, exist_ok=True)
                store = await asyncio.to_thread(Store.open, self.path(name), self.migrations)
                self._stores[name] = store
            return store

    def close(self) -> None:
        for store in self._stores.values():
            store.close()
        self._stores.clear()
