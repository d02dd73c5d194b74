"""What every embedder offers."""

from __future__ import annotations

import abc

import numpy as np

from ..errors import Unavailable


class EmbedError(Unavailable):
    """An embedding call failed after its retries."""


class Embedder(abc.ABC):
    #: identifies the model (and its vector space): indexes built by another id are rebuilt
    id: str
    dim: int

    @abc.abstractmethod
    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text, for stored memories."""

    @abc.abstractmethod
    async def embed_query(self, text: str) -> np.ndarray:
        """A unit-length float32 vector for a search query."""

    async def warm_up(self) -> None:  # noqa: B027 - optional hook
        """Make the first query quick (load a local model); nothing for an HTTP API."""

    @property
    def ready(self) -> bool:
        """False while warm_up() runs: a recall then answers from keywords instead of waiting for it."""
        return True

    @property
    def loaded(self) -> bool:
        """Whether a query is embedded now, with no model to load first (`/health` `embedder.ready`)."""
        return self.ready

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms
