"""The Store: one SQLite file in WAL mode, one writer thread, read-only readers (datasette's model).

`await store.write(fn)` runs `fn(conn)` on the writer thread inside BEGIN IMMEDIATE … COMMIT, so a
memory change and its journal entries commit together or not at all, and a transaction never spans
an await. `await store.read(fn)` runs `fn(conn)` on a thread-local read-only connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..data_dir import create_private_file, private_file
from ..errors import StoreClosed
from .migrations import MIGRATIONS, Migration, migrate

log = logging.getLogger("stbme.store")
T = TypeVar("T")
_STOP = object()


def prepare_connection(conn: sqlite3.Connection) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 10000")
    conn.execute("PRAGMA foreign_keys = ON")
    # NORMAL in WAL mode: a committed transaction survives the process being killed (kill -9);
    # only an OS crash or power loss can lose the last commits.
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -16384")  # 16 MiB per connection (three of them)


class Store:
    """A SQLite database with a single writer thread. Create with `Store.open(path)`."""

    def __init__(self, path: Path, migrations: list[tuple[str, Migration]] = MIGRATIONS):
        self.path = Path(path)
        self._migrations = migrations
        self._queue: queue.Queue = queue.Queue()
        self._closed = False
        # Transactions committed so far: a reader's cached answer holds while this number is the same.
        self.write_seq = 0
        self._local = threading.local()
        self._readers = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="stbme-read")
        self._reader_conns: list[sqlite3.Connection] = []
        self._reader_lock = threading.Lock()
        self._writer_conn: sqlite3.Connection | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._thread = threading.Thread(target=self._writer_loop, name="stbme-writer", daemon=True)

    @classmethod
    def open(cls, path: Path | str, migrations: list[tuple[str, Migration]] = MIGRATIONS) -> "Store":
        """Open (creating and migrating) the database at path and start the writer thread."""
        store = cls(Path(path), migrations)
        store.path.parent.mkdir(parents=True, exist_ok=True)
        # The chats are in here: 0600 before SQLite writes a byte (its -wal and -shm files take this mode).
        create_private_file(store.path)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                private_file(f"{store.path}{suffix}")
        store._thread.start()
        store._ready.wait()
        if store._start_error is not None:
            raise store._start_error
        return store

    # -- writer ---------------------------------------------------------------------------------
    def _writer_loop(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode = WAL")
            prepare_connection(conn)
            migrate(conn, self._migrations)
            self._writer_conn = conn
        except BaseException as exc:  # reported to the opener
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        while True:
            task = self._queue.get()
            if task is _STOP:
                break
            fn, future, loop = task
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    result = fn(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                finally:
                    self.write_seq += 1   # also after a rollback: nothing cached can be trusted less for it
            except BaseException as exc:
                self._resolve(future, loop, exc=exc)
            else:
                self._resolve(future, loop, result=result)
        # The readers are closed by now (close()): as the last connection, fold the WAL back into the
        # database file, so a copy of that file alone (a backup) holds every write.
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            log.warning("could not fold the WAL back into %s: %s", self.path, exc)
        conn.close()

    @staticmethod
    def _resolve(future, loop, result=None, exc=None) -> None:
        if loop is None:  # a concurrent.futures.Future (sync callers)
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)
            return

        def settle():
            if future.cancelled():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # loop already closed
            pass

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) as one transaction on the writer thread; its return value comes back."""
        if self._closed:
            raise StoreClosed("the store is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._queue.put((fn, future, loop))
        return await future

    def write_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Blocking variant of write() for the CLI and threads without an event loop."""
        if self._closed:
            raise StoreClosed("the store is closed")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((fn, future, None))
        return future.result()

    def write_nowait(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        """Queue a write nobody awaits (access counters). Errors are logged, never raised."""
        if self._closed:
            return
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.add_done_callback(
            lambda f: f.exception() and log.warning("background write failed: %s", f.exception())
        )
        self._queue.put((fn, future, None))

    # -- readers --------------------------------------------------------------------------------
    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)
            prepare_connection(conn)
            self._local.conn = conn
            with self._reader_lock:
                self._reader_conns.append(conn)
        return conn

    def _run_read(self, fn):
        conn = self._reader()
        # One snapshot for the whole read: a writer committing in between is not seen half-way.
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) on a read-only connection in a reader thread."""
        if self._closed:
            raise StoreClosed("the store is closed")
        return await asyncio.get_running_loop().run_in_executor(self._readers, self._run_read, fn)

    def read_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run fn(conn) on the calling thread's own read-only connection: no hand-off to a reader thread.
        For the few short, index-served reads on a latency-critical path (a recall's), where waking a
        reader thread and waiting for it cost more than the read, most of all when other programs keep the
        CPU busy; anything that may scan goes through read()."""
        if self._closed:
            raise StoreClosed("the store is closed")
        return self._run_read(fn)

    def read_sync(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreClosed("the store is closed")
        return self._readers.submit(self._run_read, fn).result()

    # -- lifecycle ------------------------------------------------------------------------------
    def close(self) -> None:
        """Drain queued writes, close the readers, then stop the writer, which checkpoints the WAL into the
        database file as the last connection. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._readers.shutdown(wait=True)
        with self._reader_lock:
            for conn in self._reader_conns:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._reader_conns.clear()
        self._queue.put(_STOP)
        self._thread.join(timeout=30)
