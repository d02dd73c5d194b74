"""Whether the memory LLM failed lately: batches skip it until its retry time instead of each waiting on
it (and its retries) again, and batches made without it are redone no sooner than that.

Two kinds of failure, two clocks. An outage (unreachable, HTTP errors, a prompt past the context) pauses the
LLM for every batch. An unreadable answer (LLMAnswerError: the model answered, but not with JSON the sidecar
reads, even after the repairs and retries) is about that batch's text: the next batches still ask, and only
the redo of the failed one waits. Before, one cut-off answer of a small model paused the LLM for 5 minutes,
and a bulk ingest made the next 210 messages without it (issue 20 item 9, SmolLM2-135M)."""

from __future__ import annotations

import time
from typing import Callable

from .base import LLMAnswerError, LLMError


class LLMHealth:
    def __init__(self, retry_after_s: Callable[[], float]):
        self._retry_after_s = retry_after_s
        self.retry_at = 0.0  # monotonic time before which the LLM is not called
        self.redo_at = 0.0   # ... before which batches made without it are not redone

    def down(self) -> bool:
        return time.monotonic() < self.retry_at

    def redo_due(self) -> bool:
        return time.monotonic() >= self.redo_at   # mark_down moves it with retry_at

    def mark_down(self) -> None:
        self.retry_at = self.redo_at = time.monotonic() + self._retry_after_s()

    def failed(self, error: LLMError) -> None:
        """A task failed after its retries: pause the LLM on an outage; on an unreadable answer only
        put off the redo."""
        if isinstance(error, LLMAnswerError):
            self.redo_at = time.monotonic() + self._retry_after_s()
        else:
            self.mark_down()

    def reset(self) -> None:
        """Try the LLM again now (a new configuration, or the relay connected)."""
        self.retry_at = self.redo_at = 0.0
