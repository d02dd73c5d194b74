"""Evolution strategies: how readily a chat remembers new signals, reinforces used memories and decays
idle ones (DNA Memory v3). Pure; the randomness comes from a per-chat seeded generator so a run can be
replayed exactly (the chat id and a counter kept in `dna_state` make the seed)."""

from __future__ import annotations

import hashlib
import random

from ..policy import STRATEGIES

DAY = 86400.0
REINFORCE_MIN_ACCESS = 3   # "access count > 3"


def chat_rng(chat_id: str, counter: int) -> random.Random:
    """The generator for a chat's `counter`-th DNA pass: same chat and counter, same draws."""
    digest = hashlib.sha256(f"{chat_id}\x00{counter}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


class Strategy:
    """One strategy's decisions. `rng` supplies the draws (use `chat_rng` for reproducible runs)."""

    def __init__(self, name: str, rng: random.Random | None = None):
        if name not in STRATEGIES:
            raise ValueError(f"unknown strategy {name!r}; use one of {', '.join(STRATEGIES)}")
        self.name = name
        self.weights = STRATEGIES[name]
        self.rng = rng or random.Random(0)

    @property
    def remember_threshold(self) -> float:
        return round(1.0 - self.weights.new_memory_weight, 6)

    def should_remember(self, confidence: float) -> bool:
        """A signal is remembered when its confidence reaches 1 - new_memory_weight (never under cleanup)."""
        return confidence >= self.remember_threshold

    def should_reinforce(self, access_count: int) -> bool:
        """Often used (more than 3 accesses), then a draw against reinforce_weight."""
        return access_count > REINFORCE_MIN_ACCESS and self.rng.random() < self.weights.reinforce_weight

    def should_decay(self, last_used: float, now: float, decay_days: float) -> bool:
        """Unused for more than decay_days, then a draw against decay_weight."""
        return (now - last_used) / DAY > decay_days and self.rng.random() < self.weights.decay_weight
