"""Policy numbers of the memory system, named once. The ones a user may tune are settings (config.py);
these are the rest, shared by the layers that apply them."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class StrategyWeights:
    new_memory_weight: float   # how readily a signal is remembered (threshold = 1 - this)
    reinforce_weight: float    # chance an often-used memory is reinforced in a pass
    decay_weight: float        # chance an idle memory decays in a pass


# DNA Memory's evolution strategies (seed 001): dna.evolution_strategy picks one per chat.
STRATEGIES: dict[str, StrategyWeights] = {
    "balanced": StrategyWeights(0.5, 0.3, 0.2),
    "aggressive": StrategyWeights(0.8, 0.15, 0.05),
    "conservative": StrategyWeights(0.2, 0.4, 0.4),
    "cleanup": StrategyWeights(0.0, 0.2, 0.8),
}

# Weight (0-1) a memory gains when it is used again: injected by recall, repeated as a signal, or
# reinforced by a gene or the strategy's reinforce draw.
REINFORCE_STEP = 0.1
