"""An embedder lent to another data directory: every call goes to the owner's embedder, but closing the
borrower leaves it open (each SillyTavern account's memory shares the one loaded model; accounts.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import Embedder


class SharedEmbedder(Embedder):
    def __init__(self, owner: Embedder):
        self.owner = owner

    @property
    def id(self) -> str:  # type: ignore[override]
        return self.owner.id

    @property
    def dim(self) -> int:  # type: ignore[override]
        return self.owner.dim

    @dim.setter
    def dim(self, value: int) -> None:
        self.owner.dim = value

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        return await self.owner.embed_passages(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        return await self.owner.embed_query(text)

    async def warm_up(self) -> None:
        """The owner's server warms it (a second warm-up would mark it busy for nothing)."""

    @property
    def ready(self) -> bool:
        return self.owner.ready

    @property
    def loaded(self) -> bool:
        return self.owner.loaded

    def __getattr__(self, name: str) -> Any:   # the owner's other attributes (clip, weights, ...)
        return getattr(self.owner, name)

    async def close(self) -> None:
        """The owner closes it: nothing to do for a borrower."""
