"""The lifecycle every per-chat cache of the store shares: loaded (and reconciled with the store) or
built on first use, kept in step after each write, saved in the background, dropped with its files.

The store is the truth; a cache can always be rebuilt from it. Subclasses say how to load, apply and save
one chat's cache; this class owns the locking that keeps a change from being lost while a load runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Generic, TypeVar

from ..hashing import chat_file_key
from ..store import Store

T = TypeVar("T")
log = logging.getLogger("stbme.index")


class PerChatCache(Generic[T]):
    def __init__(self, store: Store, directory: Path | None):
        self.store = store
        self.directory = Path(directory) if directory is not None else None
        self._items: dict[str, T] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._load_tasks: dict[str, asyncio.Task] = {}   # loads a recall stopped waiting for
        self._dirty: dict[str, float] = {}   # chat -> monotonic time of the first unsaved change

    # -- what a subclass provides -------------------------------------------------------------------
    async def _load_or_build(self, chat_id: str) -> T:
        """The chat's cache from its saved file reconciled with the store, or built from the store."""
        raise NotImplementedError

    async def _apply(self, chat_id: str, item: T, node_ids: list[str]) -> None:
        """Make the cache hold exactly the store's current version of these nodes."""
        raise NotImplementedError

    def _save(self, chat_id: str, item: T) -> None:
        """Write the cache to its files (runs in a thread; must be atomic)."""
        raise NotImplementedError

    def _delete_files(self, chat_id: str) -> None:
        raise NotImplementedError

    # -- the shared lifecycle -----------------------------------------------------------------------
    def file_base(self, chat_id: str) -> Path | None:
        """Where the chat's files live: named by a hash, never by the raw chat id."""
        return self.directory / chat_file_key(chat_id) if self.directory is not None else None

    def loaded(self, chat_id: str) -> T | None:
        return self._items.get(chat_id)

    def loaded_chats(self) -> list[str]:
        return list(self._items)

    async def get(self, chat_id: str) -> T:
        """The chat's cache, loading or building it on first use (one load per chat at a time)."""
        item = self._items.get(chat_id)
        if item is not None:
            return item
        async with self._loading.setdefault(chat_id, asyncio.Lock()):
            item = self._items.get(chat_id)
            if item is None:
                item = await self._load_or_build(chat_id)
                self._items[chat_id] = item
            return item

    async def get_within(self, chat_id: str, wait_s: float) -> T | None:
        """The chat's cache if it is loaded or loads within `wait_s` seconds; else None while it goes on
        loading (after a restart a recall answers from what is loaded instead of waiting seconds). Only
        the call that starts the load waits: later ones answer at once until it is done."""
        item = self._items.get(chat_id)
        if item is not None:
            return item
        task = self._load_tasks.get(chat_id)
        if task is not None:
            return None
        task = self._load_tasks[chat_id] = asyncio.ensure_future(self.get(chat_id))
        task.add_done_callback(lambda t, c=chat_id: self._load_done(c, t))
        done, _ = await asyncio.wait({task}, timeout=wait_s)
        return task.result() if done else None

    def _load_done(self, chat_id: str, task: asyncio.Task) -> None:
        self._load_tasks.pop(chat_id, None)
        if not task.cancelled() and task.exception() is not None:
            log.warning("loading a cache of chat %r failed: %s", chat_id, task.exception())

    def _put(self, chat_id: str, item: T) -> None:
        """Install a freshly built cache (a rebuild) and mark it for saving."""
        self._items[chat_id] = item
        self.mark_dirty(chat_id)

    def mark_dirty(self, chat_id: str) -> None:
        self._dirty.setdefault(chat_id, time.monotonic())

    async def apply(self, chat_id: str, node_ids) -> None:
        """After a write: bring the loaded cache in line with these nodes (a cache not loaded yet is
        reconciled on first use)."""
        lock = self._loading.get(chat_id)
        if lock is not None and lock.locked():
            # A load is reading an older snapshot: let it finish, then apply on top of it, or these
            # changes would be lost from the cache.
            async with lock:
                pass
        item = self._items.get(chat_id)
        node_ids = list(node_ids)
        if item is None or not node_ids:
            return
        await self._apply(chat_id, item, node_ids)
        self.mark_dirty(chat_id)

    async def save_dirty(self, older_than_s: float = 0.0) -> int:
        """Save the caches changed at least `older_than_s` seconds ago. Returns how many were saved."""
        now = time.monotonic()
        saved = 0
        for chat_id, since in list(self._dirty.items()):
            if now - since < older_than_s:
                continue
            self._dirty.pop(chat_id, None)
            item = self._items.get(chat_id)
            if item is None or self.directory is None:
                continue
            await asyncio.to_thread(self._save, chat_id, item)
            saved += 1
        return saved

    def drop(self, chat_id: str) -> None:
        """Forget the chat's cache and delete its files (the next use rebuilds from the store)."""
        self._items.pop(chat_id, None)
        self._dirty.pop(chat_id, None)
        if self.directory is not None:
            self._delete_files(chat_id)
