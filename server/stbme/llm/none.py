"""llm.mode = none: no LLM. The heuristic stage is the only writer; nothing calls this client."""

from __future__ import annotations

from .base import LLMError, LLMResult
from .usage import UsageMeter


class NoLLM:
    id = "none"

    def __init__(self):
        self.usage = UsageMeter()

    async def complete(self, messages, *, task, json_mode=True, max_tokens=None, schema=None) -> LLMResult:
        raise LLMError(f"no LLM is configured (llm.mode = none), so {task} cannot run; "
                       "set llm.mode to openai or relay")

    async def close(self) -> None:
        return None
