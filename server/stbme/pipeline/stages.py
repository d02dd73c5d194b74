"""The batch pipeline's stages, in order (see pipeline/batch.py for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .batch import Stage
from ..dna.stage import SignalStage
from .heuristic import HeuristicStage

if TYPE_CHECKING:
    from ..sidecar import Sidecar


def default_stages(sidecar: "Sidecar") -> list[Stage]:
    # DNA signals first: directive memories from the user steering the story (every LLM mode).
    stages: list[Stage] = [SignalStage(), HeuristicStage()]
    if sidecar.settings["llm.mode"] != "none":
        # The heuristic per-message events stay as the raw episodic layer; the LLM adds structure on top.
        from .dedupe import DedupeStage
        from .evolve import EvolveStage
        from .extract import ExtractStage
        from .maintain import MaintainStage

        stages += [ExtractStage(sidecar), DedupeStage(), EvolveStage(), MaintainStage()]
    return stages
