"""Whether the memory LLM failed lately: batches skip it until its retry time instead of each waiting on
it (and its retries) again."""

from __future__ import annotations

import time
from typing import Callable


class LLMHealth:
    def __init__(self, retry_after_s: Callable[[], float]):
        self._retry_after_s = retry_after_s
        self.retry_at = 0.0  # monotonic time before which the LLM is not called

    def down(self) -> bool:
        return time.monotonic() < self.retry_at

    def mark_down(self) -> None:
        self.retry_at = time.monotonic() + self._retry_after_s()

    def reset(self) -> None:
        """Try the LLM again now (a new configuration, or the relay connected)."""
        self.retry_at = 0.0
