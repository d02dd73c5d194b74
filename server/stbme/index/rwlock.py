"""A lock that lets readers share and gives a writer the object alone.

A chat's HNSW index is read by recall on the event loop and written to disk by a save in a worker thread.
Both only read the index, yet with one mutex a recall waited for the whole save, and the event loop, so
every chat, with it: the longest wait per save was 256 ms at 100,000 memories, 45 ms at 10,000; shared, 40
and 13 ms (scripts/bench_index_save.py; what is left is hnswlib's save_index holding Python's GIL).
Readers are preferred: a writer waits for the readers present, and a reader waits only for a writer that
holds the lock, not for one that waits (recall must not queue behind an upsert that queues behind a save).
The readers here are short or rare (a recall's queries, a save now and then), so a writer is not starved.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class ReadWriteLock:
    """`with lock.reading():` alongside other readers; `with lock.writing():` alone. Not reentrant."""

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._readers = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._changed:
            while self._writing:
                self._changed.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._changed:
                self._readers -= 1
                if self._readers == 0:
                    self._changed.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._changed:
            while self._writing or self._readers:
                self._changed.wait()
            self._writing = True
        try:
            yield
        finally:
            with self._changed:
                self._writing = False
                self._changed.notify_all()
