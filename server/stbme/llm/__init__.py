"""LLM clients (OpenAI-compatible HTTP, relay through the ST extension, none), JSON repair, usage."""

from .base import LLMClient, LLMError, LLMResult, Usage, complete_json
from .factory import make_llm

__all__ = ["LLMClient", "LLMError", "LLMResult", "Usage", "complete_json", "make_llm"]
