"""Build the LLM client the settings ask for."""

from __future__ import annotations

from typing import Callable

from ..errors import BadRequest, StbmeError
from .none import NoLLM
from .openai import OpenAIChat
from .relay import RelayChannel, RelayLLM
from .usage import UsageMeter


def make_llm(setting: Callable[[str], object], channel: RelayChannel, usage: UsageMeter):
    """The client for `llm.mode` (none | openai | relay), sharing one usage meter."""
    mode = setting("llm.mode")
    if mode == "openai":
        return OpenAIChat(setting("llm.url"), setting("llm.model"), setting("llm.key"),
                          temperature=setting("llm.temperature"), max_tokens=setting("llm.max_tokens"),
                          timeout_s=setting("llm.timeout_s"), concurrency=setting("llm.concurrency"),
                          retries=setting("llm.retries"), usage=usage)
    if mode == "relay":
        return RelayLLM(channel, max_tokens=setting("llm.max_tokens"), timeout_s=setting("llm.relay_timeout_s"),
                        usage=usage)
    client = NoLLM()
    client.usage = usage
    return client


async def check_llm_settings(setting: Callable[[str], object]) -> None:
    """Refuse LLM settings that cannot work (BadRequest naming the setting), before they are saved."""
    try:
        client = make_llm(setting, RelayChannel(), UsageMeter())
    except StbmeError as exc:
        raise BadRequest(exc.message, field=exc.field) from None
    await client.close()
