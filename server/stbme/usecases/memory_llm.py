"""The memory LLM as configured now: its client (swapped when llm.* settings change), its health, the
usage meter, and the relay channel to the extension."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from .. import config
from ..errors import StbmeError
from ..llm import make_llm
from ..llm.factory import check_llm_settings
from ..llm.health import LLMHealth
from ..llm.relay import RelayChannel
from ..llm.usage import UsageMeter

log = logging.getLogger("stbme")


class MemoryLLM:
    def __init__(self, settings: config.Settings, relay: RelayChannel):
        self.settings = settings
        self.relay = relay
        self.usage = UsageMeter()
        self.health = LLMHealth(lambda: settings["llm.redo_degraded_after_s"])
        self.client = self._make()

    def _make(self):
        try:
            return make_llm(self.settings.__getitem__, self.relay, self.usage)
        except StbmeError as exc:  # stored settings that cannot work: say so, run heuristic-only
            log.warning("LLM disabled: %s", exc.message)
            self.settings.apply_global({"llm.mode": "none"})
            return make_llm(self.settings.__getitem__, self.relay, self.usage)

    @property
    def mode(self) -> str:
        return self.settings["llm.mode"]

    async def validate(self, updates: dict[str, Any], candidate) -> None:
        """Settings validator: LLM settings that cannot work are refused before saving."""
        if any(k.startswith("llm.") for k in updates):
            await check_llm_settings(candidate)

    async def reconfigure(self) -> None:
        """Swap the client after llm.* settings changed (the next batch uses it) and try it at once."""
        old, self.client = self.client, self._make()
        self.health.reset()
        if old is not self.client:
            with contextlib.suppress(Exception):
                await old.close()

    def status(self) -> dict:
        return {"mode": self.mode, "client": self.client.id, "relay_clients": self.relay.connected,
                "usage": self.usage.snapshot()}

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.client.close()
