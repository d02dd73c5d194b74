"""The plan's environment variables (seed 001: `DNA_MEMORY_STRATEGY`, line 412; `MEMORY_HUB_URL` and
`MEMORY_NODE_ID`, lines 329-332) and the plan's fallback for an unknown strategy (line 124)."""

from __future__ import annotations

import logging

import orjson
import pytest
from aiohttp import web

from conftest import HashEmbedder, full_sync, settle
from stbme.api.app import create_app
from stbme.api.keys import services_key
from stbme.dna.environment import apply_plan_environment
from stbme.services import Services

PLAN_VARS = ("DNA_MEMORY_STRATEGY", "MEMORY_HUB_URL", "MEMORY_NODE_ID")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in PLAN_VARS:
        monkeypatch.delenv(name, raising=False)


async def opened(data_dir, **cli_settings) -> Services:
    return Services.open(data_dir, embedder=HashEmbedder(), cli_settings=cli_settings or None)


def test_variables_fill_only_what_is_not_saved():
    saved = {"network.node_id": "saved-node"}
    apply_plan_environment(saved, {}, {"DNA_MEMORY_STRATEGY": "aggressive", "MEMORY_HUB_URL": "http://hub:1",
                                       "MEMORY_NODE_ID": "env-node"})
    assert saved == {"network.node_id": "saved-node", "dna.evolution_strategy": "aggressive",
                     "network.hub_url": "http://hub:1", "network.enabled": True}


def test_the_network_is_on_only_when_both_are_known_and_not_switched_off():
    one = {}
    apply_plan_environment(one, {}, {"MEMORY_HUB_URL": "http://hub:1"})
    assert one == {"network.hub_url": "http://hub:1"}
    off = {"network.enabled": False}
    apply_plan_environment(off, {}, {"MEMORY_HUB_URL": "http://hub:1", "MEMORY_NODE_ID": "n"})
    assert off["network.enabled"] is False


def test_unknown_strategies_become_balanced_with_a_warning(caplog):
    saved, chats = {}, {"old-chat": {"dna.evolution_strategy": "harden"}, "ok": {"dna.evolution_strategy": "cleanup"}}
    with caplog.at_level(logging.WARNING, logger="stbme.dna"):
        apply_plan_environment(saved, chats, {"DNA_MEMORY_STRATEGY": "repair-only"})
    assert saved == {"dna.evolution_strategy": "balanced"}
    assert chats == {"old-chat": {"dna.evolution_strategy": "balanced"}, "ok": {"dna.evolution_strategy": "cleanup"}}
    warnings = [r.getMessage() for r in caplog.records]
    assert any("DNA_MEMORY_STRATEGY" in w and "'repair-only'" in w for w in warnings)
    assert any("'old-chat'" in w and "'harden'" in w for w in warnings)


def test_a_bad_value_is_ignored_with_a_warning(caplog):
    saved = {}
    with caplog.at_level(logging.WARNING, logger="stbme.dna"):
        apply_plan_environment(saved, {}, {"MEMORY_NODE_ID": "n" * 5000})
    assert saved == {} and "MEMORY_NODE_ID ignored" in caplog.text


async def test_a_sidecar_started_with_the_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("DNA_MEMORY_STRATEGY", "conservative")
    sc = await opened(tmp_path)
    try:
        assert sc.settings["dna.evolution_strategy"] == "conservative"
        # a signal at confidence 0.7 is not remembered under conservative (threshold 0.8)
        await sc.start()
        await full_sync(sc, "c", [{"role": "user", "name": "Alex", "text": "I want slower pacing."},
                                  {"role": "assistant", "name": "Elena", "text": "Fine."}])
        await settle(sc, "c")
        assert sum((await sc.dna.chat_stats("c"))["directives"].values()) == 0
        # saving the setting makes it win on the next start
        await sc.settings_service.update_global({"dna.evolution_strategy": "aggressive"})
    finally:
        await sc.close()
    sc = await opened(tmp_path)
    try:
        assert sc.settings["dna.evolution_strategy"] == "aggressive"
    finally:
        await sc.close()
    # and --setting wins too
    sc = await opened(tmp_path, **{"dna.evolution_strategy": "cleanup"})
    try:
        assert sc.settings["dna.evolution_strategy"] == "cleanup"
    finally:
        await sc.close()


async def test_a_saved_unknown_strategy_no_longer_breaks_the_chat(tmp_path, caplog):
    """A settings row naming a strategy this version does not know (a newer version's, or edited by hand)."""
    sc = await opened(tmp_path)
    sc.store.write_sync(lambda conn: conn.execute(
        "INSERT OR REPLACE INTO settings (scope, name, value) VALUES ('', 'dna.evolution_strategy', ?)",
        (orjson.dumps("innovate").decode(),)))
    await sc.close()
    with caplog.at_level(logging.WARNING, logger="stbme.dna"):
        sc = await opened(tmp_path)
    try:
        assert sc.settings["dna.evolution_strategy"] == "balanced" and "'innovate'" in caplog.text
        await sc.start()
        await full_sync(sc, "c", [{"role": "user", "name": "Alex", "text": "I want slower pacing."},
                                  {"role": "assistant", "name": "Elena", "text": "Fine."}])
        await settle(sc, "c")
        assert (await sc.dna.chat_stats("c"))["directives"]["preference"] == 1
    finally:
        await sc.close()


async def test_the_hub_named_by_the_variables_gets_heartbeats(monkeypatch, aiohttp_server, aiohttp_client, tmp_path):
    beats = []

    async def heartbeat(request):
        beats.append(await request.json())
        return web.json_response({"tasks": []})

    app = web.Application()
    app.router.add_post("/heartbeat", heartbeat)
    hub = await aiohttp_server(app)
    monkeypatch.setenv("MEMORY_HUB_URL", str(hub.make_url("")).rstrip("/"))
    monkeypatch.setenv("MEMORY_NODE_ID", "env-node")
    client = await aiohttp_client(create_app(tmp_path, embedder=HashEmbedder()))
    status = client.server.app[services_key].hub.status()
    assert status["enabled"] and status["node_id"] == "env-node"
    resp = await client.post("/v1/dna/hub/heartbeat")
    assert resp.status == 200 and beats[-1]["node_id"] == "env-node"
