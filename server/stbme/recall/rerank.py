"""Optional LLM rerank at recall time (recall.rerank, off by default): the top non-core candidates go to
the LLM under short keys (R1, R2...); it names the useful ones, best first. Bounded pool; a timeout or
any failure falls back to the scored order, so recall never waits long or breaks."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ..llm.answer_schemas import ANSWER_SCHEMAS
from ..llm.base import LLMError, complete_json
from ..llm.prompts import system_prompt
from ..pipeline.prompting import as_list, memory_line, norm_key
from ..language import detect_language

log = logging.getLogger("stbme.rerank")


async def rerank(llm, scored: list, *, query: str, recent: list[str], max_memories: int,
                 setting: Callable[[str], object]) -> tuple[list, str | None]:
    """Reorder/trim `scored` (core first, then candidates). Returns (result, why it fell back or None)."""
    core = [s for s in scored if s.core]
    candidates = [s for s in scored if not s.core][:setting("recall.rerank_pool")]
    room = max_memories - len(core)
    if room <= 0 or len(candidates) < 2:
        return scored[:max_memories], None
    keys = {f"R{i}": s for i, s in enumerate(candidates, 1)}
    user = "\n".join(["## Query", query or "(continue the scene)", "## Recent messages", *recent[:4],
                      "## Candidates", *(memory_line(k, s.node, max_chars=240) for k, s in keys.items())])
    language = detect_language([query, *recent])
    messages = [{"role": "system", "content": system_prompt("rerank", setting, language)},
                {"role": "user", "content": user}]
    try:
        async with asyncio.timeout(setting("recall.rerank_timeout_s")):
            value, _ = await complete_json(llm, messages, task="rerank", retries=0,
                                           max_tokens=max(128, 12 * len(keys)), schema=ANSWER_SCHEMAS["rerank"])
    except TimeoutError:
        return scored[:max_memories], f"rerank timed out after {setting('recall.rerank_timeout_s')} s"
    except LLMError as exc:
        return scored[:max_memories], f"rerank failed: {exc.message}"
    chosen, seen = [], set()
    for key in as_list(value, "selected", "selected_keys", "keys"):
        item = keys.get(norm_key(key))
        if item is not None and item.node.id not in seen:
            seen.add(item.node.id)
            chosen.append(item)
    if not chosen:
        return scored[:max_memories], "rerank chose nothing usable"
    return (core + chosen)[:max_memories], None
