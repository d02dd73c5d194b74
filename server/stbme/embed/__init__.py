"""Embedders: the bundled local model (default) and any OpenAI-compatible /v1/embeddings API."""

from .base import Embedder, EmbedError
from .service import EmbeddingService

__all__ = ["Embedder", "EmbedError", "EmbeddingService"]
