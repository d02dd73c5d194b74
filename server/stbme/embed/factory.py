"""Build the embedder the settings ask for."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .base import Embedder


def make_embedder(setting: Callable[[str], object], data_dir: Path | None = None) -> Embedder:
    """`embed.provider`: the bundled local model, or an OpenAI-compatible /v1/embeddings API. The local
    model keeps its built graph in `data_dir`/models (built in memory at every start without one)."""
    if setting("embed.provider") == "openai":
        from .openai import OpenAIEmbedder  # only then: it pulls in the HTTP client

        return OpenAIEmbedder(setting("embed.openai_url"), setting("embed.openai_model"), setting("embed.openai_key"),
                              batch_size=setting("embed.batch_size"), timeout_s=setting("embed.timeout_s"),
                              retries=setting("embed.retries"))
    from .local import LocalEmbedder

    return LocalEmbedder(batch_size=setting("embed.batch_size"), weights=setting("embed.local_weights"),
                         graph_dir=Path(data_dir) / "models" if data_dir is not None else None)
