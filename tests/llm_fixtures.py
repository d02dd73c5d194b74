"""Fixtures for the LLM tests: the fake OpenAI-compatible server and a sidecar pointed at it."""

from __future__ import annotations

import pytest

from conftest import DEADLINE_S
from fake_openai import FakeOpenAI
from stbme.services import Services


@pytest.fixture
async def fake(aiohttp_server):
    script = FakeOpenAI()
    server = await aiohttp_server(script.app())
    script.url = str(server.make_url("/v1"))
    yield script
    # Every structured-output request a test made: the stages' scripted answers fit the schema they sent.
    assert not script.schema_violations, script.schema_violations[:5]


# One extraction per assistant message, as these tests were written for; the defaults (extract.every 3 and
# the smart trigger) have their own tests and the LLM bill benchmark.
PER_MESSAGE = {"extract.every": 1, "extract.smart_trigger": False}


def llm_settings(fake, **extra) -> dict:
    # The fake answers at once, but on a busy machine "at once" took over 2 s (the old timeout): the call was
    # asked again and a test counting calls saw two. A hang has its own short timeout where a test wants one.
    return {"llm.mode": "openai", "llm.url": fake.url, "llm.model": "fake-model", "llm.retries": 1,
            "llm.timeout_s": DEADLINE_S, **PER_MESSAGE, **extra}


@pytest.fixture
async def llm_sc(tmp_path, embedder, fake):
    """A sidecar in llm.mode=openai against the fake server, without its worker: tests run batches
    themselves (process_chat), so nothing races them."""
    sc = Services.open(tmp_path / "data", embedder=embedder, cli_settings=llm_settings(fake))
    sc.memory_llm.client.http.backoff_s = 0.01  # retries without the real backoff
    yield sc
    await sc.close()
