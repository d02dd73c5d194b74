"""An import stays tied to its chat: export, import into a fresh data directory, open the same chat (sync):
nothing doubles and nothing is redone; an edit rolls the imported memories of the edited message back.
What cannot be tied (another chat, an older export without messages) is added as separate memories."""

from __future__ import annotations

import pytest
from conftest import SILVER_KEY_CHAT, HashEmbedder, full_sync, settle
from llm_fixtures import fake  # noqa: F401

from stbme.services import Services

CHAT = SILVER_KEY_CHAT + [
    {"role": "user", "name": "Alex", "text": "Elena, who is Captain Mirov?"},
    {"role": "assistant", "name": "Elena", "text": "Captain Mirov sailed the Gray Heron; Mirov swam ashore alone."},
    {"role": "user", "name": "Alex", "text": "Then we ask Mirov about the northern reef."},
]


@pytest.fixture
async def other(tmp_path):
    """A second, fresh data directory."""
    sc = Services.open(tmp_path / "other", embedder=HashEmbedder())
    await sc.start()
    yield sc
    await sc.close()


def signatures(doc: dict) -> list:
    return sorted(repr((n["type"], sorted(n["fields"].items()), n["seq_range"], n["archived"], n["pinned"],
                        n["source"])) for n in doc["nodes"])


async def state(sc: Services, chat_id: str) -> tuple:
    doc = await sc.transfer.export_chat(chat_id)
    return signatures(doc), len(doc["edges"])


async def processed(sc: Services, chat_id: str, chat: list[dict]) -> dict:
    await full_sync(sc, chat_id, chat)
    await settle(sc, chat_id)
    return await sc.transfer.export_chat(chat_id)


async def test_export_carries_messages_and_origins(sidecar):
    doc = await processed(sidecar, "c", CHAT)
    assert [m["text"] for m in doc["messages"]] == [m["text"] for m in CHAT]
    assert doc["processed_upto"] == len(CHAT) - 2     # the last message (a user turn) waits for a reply
    derived = [n for n in doc["nodes"] if n["derived_from"]]
    assert derived and all(0 <= n["derived_from"][0] <= n["derived_from"][1] < len(CHAT) for n in derived)
    assert all(e["derived_from"] for e in doc["edges"])


async def test_imported_into_a_fresh_directory_and_opened_nothing_doubles_or_is_redone(sidecar, other):
    doc = await processed(sidecar, "c", CHAT)
    result = await other.transfer.import_chat("c", doc)
    assert result["tied_upto"] == doc["processed_upto"] and result["restored_messages"] == len(CHAT)
    await settle(other, "c")   # the last message was queued as the source would have it
    assert await state(other, "c") == await state(sidecar, "c")

    answer = await full_sync(other, "c", CHAT)      # SillyTavern opens the chat
    assert answer["status"] == "synced" and answer["rolled_back"] == 0 and answer["diverged_at"] is None
    assert answer["processed_upto"] == doc["processed_upto"]
    await settle(other, "c")
    assert await state(other, "c") == await state(sidecar, "c")
    assert await other.dna_assets.events(chat_id="c", kind="rollback") == []


async def test_an_edit_after_an_import_rolls_the_imported_memory_back(sidecar, other):
    doc = await processed(sidecar, "c", CHAT)
    await other.transfer.import_chat("c", doc)
    await settle(other, "c")
    edited = [dict(m) for m in CHAT]
    edited[5] = {**edited[5], "text": "The dragon Vorthax flew south to the desert."}
    answer = await full_sync(other, "c", edited)
    assert answer["diverged_at"] == 5 and answer["rolled_back"] > 0
    await settle(other, "c")
    texts = " ".join(signatures(await other.transfer.export_chat("c")))
    assert "flew south" in texts and "sleeps in the northern mountains" not in texts
    # exactly what a fresh ingest of the edited chat makes
    await processed(sidecar, "fresh", edited)
    assert await state(other, "c") == await state(sidecar, "fresh")


@pytest.mark.parametrize("mode", ["merge", "replace"])
async def test_import_into_a_chat_that_changed_since_the_export(sidecar, other, mode):
    doc = await processed(sidecar, "c", CHAT)
    changed = [dict(m) for m in CHAT]
    changed[7] = {**changed[7], "text": "Nothing else to report, except the storm."}
    await processed(other, "c", changed)            # the chat went on differently from message 7
    result = await other.transfer.import_chat("c", doc, mode)
    # tied up to the last batch that ends before message 7
    assert -1 <= result["tied_upto"] < 7 and result["restored_messages"] == 0 and result["left_for_processing"] > 0
    await settle(other, "c")
    await processed(sidecar, "fresh", changed)
    assert await state(other, "c") == await state(sidecar, "fresh")   # no duplicate, no stale memory


async def test_importing_the_same_export_again_changes_nothing(sidecar):
    doc = await processed(sidecar, "c", CHAT)
    before = await state(sidecar, "c")
    ids = await sidecar.store.read(lambda conn: conn.execute("SELECT id, rev FROM nodes ORDER BY id").fetchall())
    for mode in ("merge", "replace"):
        result = await sidecar.transfer.import_chat("c", doc, mode)
        assert result["tied_upto"] == doc["processed_upto"]
        # nothing written, and said so (before: every memory undone and made again under a new id)
        assert result["imported"] == {"nodes": 0, "edges": 0} and result["unchanged"] == len(doc["nodes"])
        await settle(sidecar, "c")
        assert await state(sidecar, "c") == before
        assert await sidecar.store.read(lambda conn: conn.execute("SELECT id, rev FROM nodes ORDER BY id").fetchall()) == ids


async def test_manual_memories_stay_separate_and_survive_edits(sidecar, other):
    await processed(sidecar, "c", CHAT)
    await sidecar.memories.create("c", __import__("stbme.usecases.memories", fromlist=["NewMemory"]).NewMemory(
        "event", {"summary": "Alex is allergic to cats."}, pinned=True))
    doc = await sidecar.transfer.export_chat("c")
    manual = [n for n in doc["nodes"] if n["source"] == "manual"]
    assert manual and manual[0]["derived_from"] is None
    await other.transfer.import_chat("c", doc)
    edited = [dict(m) for m in CHAT]
    edited[0] = {**edited[0], "text": "Good morning."}
    await full_sync(other, "c", edited)
    await settle(other, "c")
    assert "allergic to cats" in " ".join(signatures(await other.transfer.export_chat("c")))


async def test_another_chats_memories_are_added_separately(sidecar, other):
    doc = await processed(sidecar, "c", CHAT)
    mine = [{"role": "user", "name": "Bo", "text": "A different story starts here."},
            {"role": "assistant", "name": "Kai", "text": "In a different town, with different people."}]
    await processed(other, "new", mine)
    result = await other.transfer.import_chat("new", doc)
    assert result["tied_upto"] == -1 and result["restored_messages"] == 0
    assert result["imported"]["nodes"] == len(doc["nodes"])
    await full_sync(other, "new", [mine[0], {**mine[1], "text": "Edited."}])   # an edit of this chat
    await settle(other, "new")
    texts = " ".join(signatures(await other.transfer.export_chat("new")))
    assert "silver key under the old oak" in texts   # the imported memories were not undone


async def test_an_export_without_messages_is_imported_as_before(sidecar, other):
    doc = await processed(sidecar, "c", CHAT)
    for key in ("messages", "processed_upto", "degraded_from"):
        doc.pop(key)
    result = await other.transfer.import_chat("c", doc)
    assert result["tied_upto"] == -1 and result["restored_messages"] == 0
    status = await other.chats.status("c")
    assert status["messages"] == 0 and status["nodes"] == len(doc["nodes"])


@pytest.mark.parametrize("messages, field", [
    ("nope", "messages"),
    ([{"index": 1, "role": "user", "name": "", "text": "x"}], "messages[0]"),
    ([{"index": 0, "role": "narrator", "name": "", "text": "x"}], "messages[0].role"),
    ([{"index": 0, "role": "user", "name": None, "text": "x"}], "messages[0].name"),
])
async def test_broken_messages_in_an_export_are_a_400_and_change_nothing(sidecar, other, messages, field):
    doc = await processed(sidecar, "c", CHAT)
    doc["messages"] = messages
    with pytest.raises(Exception) as exc:
        await other.transfer.import_chat("c", doc)
    assert getattr(exc.value, "status", None) == 400 and exc.value.field == field
    assert await other.chats.list() == []


async def test_the_same_separate_memories_imported_twice_are_not_doubled(sidecar):
    import json
    from pathlib import Path

    graph = json.loads((Path(__file__).parent / "fixtures" / "st_bme_graph_v4.json").read_text(encoding="utf-8"))
    first = await sidecar.transfer.import_chat("old", graph)
    before = await state(sidecar, "old")
    second = await sidecar.transfer.import_chat("old", graph)
    assert first["imported"]["nodes"] > 0 and second["imported"] == {"nodes": 0, "edges": 0}
    assert await state(sidecar, "old") == before


async def test_llm_memories_imported_and_opened_are_not_asked_for_again(tmp_path, embedder, fake):
    """In llm.mode (one extraction over several replies) the imported memories need no LLM call: the chat's
    place in the LLM's reading (llm_upto) comes with them."""
    import random

    from llm_fixtures import llm_settings
    from test_llm_pipeline import snapshot
    from test_sync_rollback import make_chat

    chat = make_chat(random.Random(5), 4)
    source = Services.open(tmp_path / "a", embedder=embedder, cli_settings=llm_settings(fake, **{"extract.every": 3}))
    target = Services.open(tmp_path / "b", embedder=embedder, cli_settings=llm_settings(fake, **{"extract.every": 3}))
    try:
        await full_sync(source, "c", chat)
        await source.processor.process_chat("c")
        doc = await source.transfer.export_chat("c")
        assert doc["llm_upto"] >= 0
        result = await target.transfer.import_chat("c", doc)
        assert result["tied_upto"] == doc["processed_upto"]
        calls = len(fake.calls)
        answer = await full_sync(target, "c", chat)
        await target.processor.process_chat("c")
        assert answer["rolled_back"] == 0 and len(fake.calls) == calls     # nothing asked again
        assert await snapshot(target, "c") == await snapshot(source, "c")
        edited = [dict(m) for m in chat]
        edited[3] = {**edited[3], "text": "Tomas burned the letter before anyone could read it."}
        answer = await full_sync(target, "c", edited)
        assert answer["rolled_back"] > 0
        await target.processor.process_chat("c")
        assert len(fake.calls) > calls                                       # the edited range is read again
        await full_sync(source, "fresh", edited)
        await source.processor.process_chat("fresh")
        assert await snapshot(target, "c") == await snapshot(source, "fresh")   # as a fresh ingest of the edit
    finally:
        await source.close()
        await target.close()
