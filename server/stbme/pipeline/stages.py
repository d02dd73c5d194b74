"""The batch pipeline's stages, in order (see pipeline/batch.py for the contract)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .batch import Stage
from .heuristic import HeuristicStage

if TYPE_CHECKING:
    from ..sidecar import Sidecar


def default_stages(sidecar: "Sidecar") -> list[Stage]:
    return [HeuristicStage()]
