"""The reads behind what the extension shows in the chat and the memory browser: which messages are
remembered (the per-message marker), the memories behind one message (its popup), the memory types and
their fields (the browser's filter and editor), and a chat's memories by type (docs/api.md)."""

from __future__ import annotations

from urllib.parse import quote

from conftest import SILVER_KEY_CHAT, full_sync, settle

from stbme.api.keys import services_key
from test_api import assert_error, ok_json

CHAT = "Elena - a chat/with odd id"


def url(rest: str, chat_id: str = CHAT) -> str:
    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


async def synced(client, messages=SILVER_KEY_CHAT) -> None:
    await full_sync(client, CHAT, messages)
    await settle(client.server.app[services_key], CHAT)


async def test_every_processed_message_is_marked_with_its_memory_count(client):
    await synced(client)
    data = await ok_json(await client.get(url("/messages/memories"), params={"from": 0, "to": 7}))
    assert data["processed_upto"] == 7 and (data["from"], data["to"]) == (0, 7)
    marked = {m["index"]: m["memories"] for m in data["messages"]}
    assert set(marked) == set(range(8))  # every message is findable by its words: each has its own event
    assert all(n >= 1 for n in marked.values())
    # a window: only the messages asked about
    window = await ok_json(await client.get(url("/messages/memories"), params={"from": 2, "to": 3}))
    assert [m["index"] for m in window["messages"]] == [2, 3]


async def test_a_memory_of_several_messages_marks_each_of_them(client):
    await synced(client)
    sc = client.server.app[services_key]
    before = {m["index"]: m["memories"] for m in (await sc.memories.remembered(CHAT, 0, 7))["messages"]}

    def add_summary(conn):
        conn.execute("INSERT INTO nodes (id, chat_id, type, fields, importance, weight, seq_from, seq_to, archived,"
                     " locked, pinned, created_at, updated_at, source) VALUES ('s1', ?, 'summary',"
                     " '{\"summary\": \"They talked about the key and the rain.\"}', 5, 1, 1, 3, 0, 0, 0, 1, 1, 'llm')",
                     (CHAT,))

    await sc.store.write(add_summary)
    after = {m["index"]: m["memories"] for m in (await sc.memories.remembered(CHAT, 0, 7))["messages"]}
    assert {i: after[i] - before[i] for i in after} == {0: 0, 1: 1, 2: 1, 3: 1, 4: 0, 5: 0, 6: 0, 7: 0}
    popup = await ok_json(await client.get(url("/messages/2/memories")))
    assert popup["memories"][-1]["id"] == "s1"  # the message's own memories first, the wider summary after


async def test_archived_memories_do_not_mark_a_message(client):
    await synced(client)
    own = (await ok_json(await client.get(url("/messages/1/memories"))))["memories"]
    assert own and all(m["seq_range"][0] <= 1 <= m["seq_range"][1] for m in own)
    assert "silver key" in " ".join(m["fields"].get("summary", "") for m in own)
    for memory in own:
        await ok_json(await client.post(url(f"/nodes/{memory['id']}/archive")))
    data = await ok_json(await client.get(url("/messages/memories"), params={"from": 0, "to": 7}))
    assert 1 not in {m["index"] for m in data["messages"]}
    assert (await ok_json(await client.get(url("/messages/1/memories"))))["memories"] == []


async def test_messages_not_processed_yet_and_unknown_chats(client):
    data = await ok_json(await client.get(url("/messages/memories", "never synced")))
    assert data == {"ok": True, "processed_upto": -1, "from": 0, "to": 199, "messages": []}
    assert (await ok_json(await client.get(url("/messages/0/memories", "never synced"))))["memories"] == []


async def test_bad_ranges_and_indexes_name_their_field(client):
    await assert_error(await client.get(url("/messages/memories"), params={"from": 5, "to": 2}), 400, "to")
    await assert_error(await client.get(url("/messages/memories"), params={"from": 0, "to": 5000}), 400, "to")
    await assert_error(await client.get(url("/messages/memories"), params={"from": "x"}), 400, "from")
    await assert_error(await client.get(url("/messages/-1/memories")), 400, "index")
    await assert_error(await client.get(url("/messages/one/memories")), 400, "index")


async def test_memory_types_list_every_type_with_its_fields(client):
    types = {t["name"]: t for t in (await ok_json(await client.get("/v1/memory-types")))["types"]}
    assert {"event", "character", "location", "entity", "summary", "pov_memory", "correction"} <= set(types)
    assert types["event"]["columns"][:2] == ["title", "summary"] and types["event"]["required"] == ["summary"]
    assert types["rule"]["required"] == ["title", "constraint"]


async def test_the_nodes_list_says_what_the_chat_holds_by_type(client):
    await synced(client)
    data = await ok_json(await client.get(url("/nodes"), params={"type": "character", "q": "zzz"}))
    assert data["total"] == 0  # the filters apply to the list...
    assert data["types"]["event"] == len(SILVER_KEY_CHAT) and data["types"]["character"] == 2  # ...not to the counts
    archived = await ok_json(await client.get(url("/nodes"), params={"archived": "true"}))
    assert archived["types"] == {}


async def test_an_edit_is_announced_as_routine_work_not_as_an_alarm(client):
    """The notice the extension shows after an edit, a swipe or a deletion says what happens in words,
    at level info (the progress line), without internal counts."""
    await synced(client)
    sc = client.server.app[services_key]
    queue = sc.live.subscribe()
    edited = [dict(m) for m in SILVER_KEY_CHAT]
    edited[3] = {**edited[3], "text": "Fine, but bring the green umbrella, it will rain."}
    await full_sync(client, CHAT, edited)
    notices = []
    while not queue.empty():
        message = queue.get_nowait()
        if message["type"] == "notice":
            notices.append(message)
    sc.live.unsubscribe(queue)
    assert notices == [{"type": "notice", "level": "info", "chat_id": CHAT,
                        "message": "message 3 changed: updating the memories from there on"}]
