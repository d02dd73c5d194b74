"""One "every N replies": `extract.every` is how many replies the memory LLM waits for. It used to be the
batch size, beside a hidden `extract.llm_every` for the LLM, so a user who set 1 still got one LLM
extraction per 3 replies. Old stored values keep the cadence they ran at; the old name is still accepted."""

from __future__ import annotations

import random
import sqlite3

import orjson
import pytest
from conftest import full_sync
from llm_fixtures import fake, llm_settings  # noqa: F401

from stbme.api.app import create_app
from stbme.services import Services
from stbme.store import Store
from stbme.store.migrations import MIGRATIONS, migrate
from test_sync_rollback import make_chat

BEFORE = [m for m in MIGRATIONS if m[0] < "m008"]


def old_database(path, rows: list[tuple[str, str, object]]) -> None:
    """A database as the last version before the merge left it, with these stored settings."""
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, BEFORE)
    conn.executemany("INSERT INTO settings (scope, name, value) VALUES (?,?,?)",
                     [(scope, name, orjson.dumps(value).decode()) for scope, name, value in rows])
    conn.close()


def stored(path) -> dict[tuple[str, str], object]:
    conn = sqlite3.connect(path)
    try:
        return {(scope, name): orjson.loads(value) for scope, name, value in
                conn.execute("SELECT scope, name, value FROM settings WHERE name LIKE 'extract.%'")}
    finally:
        conn.close()


def test_stored_pairs_become_the_cadence_they_ran_at(tmp_path):
    db = tmp_path / "stbme.sqlite3"
    old_database(db, [
        ("", "extract.every", 2), ("", "extract.llm_every", 3),   # batches of 2, LLM due after 3: it ran every 4
        ("a", "extract.llm_every", 1),                            # every batch of 2
        ("b", "extract.every", 5),                                # batches of 5, LLM due after 3: every 5
        ("c", "extract.enabled", False),                          # no say in the cadence
        ("d", "extract.every", "garbage"),                        # unreadable: follows the global setting
    ])
    Store.open(db).close()  # applies m008
    assert stored(db) == {("", "extract.every"): 4, ("a", "extract.every"): 2, ("b", "extract.every"): 5,
                          ("c", "extract.enabled"): False}


def test_the_old_defaults_stored_keep_one_extraction_per_three_replies(tmp_path):
    db = tmp_path / "stbme.sqlite3"
    old_database(db, [("", "extract.every", 1), ("chat", "extract.llm_every", 2)])
    Store.open(db).close()
    assert stored(db) == {("", "extract.every"): 3, ("chat", "extract.every"): 2}


def test_a_database_without_them_is_left_alone(tmp_path):
    db = tmp_path / "stbme.sqlite3"
    old_database(db, [("", "recall.budget_tokens", 600)])
    Store.open(db).close()
    assert stored(db) == {}


async def test_the_old_name_sets_the_new_setting(aiohttp_client, tmp_path, embedder):
    client = await aiohttp_client(create_app(tmp_path / "data", embedder=embedder))
    resp = await client.put("/v1/settings", json={"settings": {"extract.llm_every": 2}})
    data = await resp.json()
    assert resp.status == 200, data
    assert data["settings"]["extract.every"] == 2 and "extract.llm_every" not in data["settings"]
    resp = await client.put("/v1/chats/c/settings", json={"settings": {"extract.llm_every": 1}})
    assert (await resp.json())["overrides"] == {"extract.every": 1}
    schema = (await (await client.get("/v1/settings/schema")).json())["settings"]
    assert [s["name"] for s in schema if s["name"].startswith("extract.") and "every" in s["name"]] == ["extract.every"]


@pytest.mark.parametrize("every, calls", [(1, 4), (2, 2), (3, 1)])
async def test_every_n_replies_is_what_the_memory_llm_does(tmp_path, embedder, fake, every, calls):  # noqa: F811
    """The user's setting alone decides: 1 is a call for every reply; the per-message memories come with
    every reply whatever it is."""
    sc = Services.open(tmp_path / "d", embedder=embedder,
                       cli_settings=llm_settings(fake, **{"extract.every": every, "extract.smart_trigger": False}))
    try:
        chat = make_chat(random.Random(31), 4)
        await full_sync(sc, "c", chat)
        await sc.processor.process_chat("c")
        assert fake.tasks().count("extract") == calls
        status = await sc.chats.status("c")
        assert status["processed_upto"] == len(chat) - 1
    finally:
        await sc.close()


async def test_a_chat_can_have_its_own_cadence(tmp_path, embedder, fake):  # noqa: F811
    sc = Services.open(tmp_path / "d", embedder=embedder,
                       cli_settings=llm_settings(fake, **{"extract.every": 3, "extract.smart_trigger": False}))
    try:
        await sc.settings_service.update_chat("eager", {"extract.every": 1})
        chat = make_chat(random.Random(31), 3)
        await full_sync(sc, "eager", chat)
        await sc.processor.process_chat("eager")
        assert fake.tasks().count("extract") == 3
    finally:
        await sc.close()
