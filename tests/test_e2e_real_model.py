"""End to end with the real local model: `stbme serve` as a subprocess, real HTTP, real embeddings."""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
import pytest

from conftest import serve_process, sync_body, wait_for

pytestmark = pytest.mark.e2e

ENGLISH = [
    ("user", "Alex", "Evening, Elena. The inn is loud tonight."),
    ("assistant", "Elena", "*Elena slides onto the bench across from you.* Loud enough that nobody will hear us plan."),
    ("user", "Alex", "Good. Listen closely: the vault under the old chapel opens with the code 7-3-9-1."),
    ("assistant", "Elena", "*She repeats it silently.* Seven, three, nine, one. I won't write it down."),
    ("user", "Alex", "We also need horses. Any ideas?"),
    ("assistant", "Elena", "The stable boy owes me a favour. Two mares by dawn."),
    ("user", "Alex", "What about the guards on the north road?"),
    ("assistant", "Elena", "They change shifts at midnight. We slip through then."),
    ("user", "Alex", "And food for the trip?"),
    ("assistant", "Elena", "Bread, cheese and dried apples from the kitchen."),
    ("user", "Alex", "Let's get some sleep first."),
    ("assistant", "Elena", "*She yawns and stretches.* Wake me before the bells."),
]
CHINESE = [
    ("user", "小明", "艾琳，今晚我们去哪里？"),
    ("assistant", "艾琳", "我们先去港口，船长在那里等我们。"),
    ("user", "小明", "记住，密室的钥匙藏在灯塔顶层的红色箱子里。"),
    ("assistant", "艾琳", "好的，我会牢牢记住的。"),
    ("user", "小明", "路上要小心巡逻的士兵。"),
    ("assistant", "艾琳", "我知道一条小路，可以绕开他们。"),
    ("user", "小明", "我们需要准备多少干粮？"),
    ("assistant", "艾琳", "三天的量就够了，面包和咸鱼。"),
    ("user", "小明", "好的，明天一早出发。"),
    ("assistant", "艾琳", "我去准备马车。"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_process(tmp_path_factory.mktemp("e2e-data")) as url:
        yield url


def as_messages(chat):
    return [{"role": r, "name": n, "text": t} for r, n, t in chat]


async def sync_all(session, url, chat_id, messages):
    body = sync_body(messages, tail=3)
    for _ in range(5):
        async with session.post(f"{url}/v1/chats/{quote(chat_id, safe='')}/sync", json=body) as resp:
            data = await resp.json()
            assert resp.status == 200, data
        if data["status"] == "synced":
            return data
        body = sync_body(messages, start=data["need_from"])
    raise AssertionError(data)


async def wait_processed(session, url, chat_id, timeout=180):
    async def processed():
        async with session.get(f"{url}/v1/chats/{quote(chat_id, safe='')}/status") as resp:
            status = await resp.json()
        return status if status["jobs"]["pending"] == 0 and status["unembedded"] == 0 else None

    return await wait_for(processed, f"chat {chat_id!r} to be processed", timeout, interval=0.2)


async def recall(session, url, chat_id, query):
    async with session.post(f"{url}/v1/chats/{quote(chat_id, safe='')}/recall",
                            json={"query": query, "budget_tokens": 300}) as resp:
        data = await resp.json()
        assert resp.status == 200, data
        return data


@pytest.mark.parametrize("chat,chat_id,query,fact,edit", [
    (ENGLISH, "Elena - 2026-11-29@23h40m12s", "Elena, what was the code for the chapel vault again?", "7-3-9-1",
     "Listen closely: I forgot where we were going."),
    (CHINESE, "艾琳 - 聊天 1", "钥匙藏在哪里？", "红色箱子", "我忘了我们要去哪里。"),
])
async def test_planted_fact_is_recalled_and_forgotten_after_edit(server, chat, chat_id, query, fact, edit):
    messages = as_messages(chat)
    async with aiohttp.ClientSession() as session:
        await sync_all(session, server, chat_id, messages)
        status = await wait_processed(session, server, chat_id)
        assert status["nodes"] >= len(messages)
        found = await recall(session, server, chat_id, query)
        assert fact in found["text"], found
        assert found["tokens"] <= 300
        assert found["language"] == ("zh" if chat is CHINESE else "en")
        # The user edits the message that held the fact: its memory goes, nothing else is lost.
        messages[2] = {**messages[2], "text": edit}
        result = await sync_all(session, server, chat_id, messages)
        assert result["diverged_at"] == 2 and result["rolled_back"] > 0
        await wait_processed(session, server, chat_id)
        gone = await recall(session, server, chat_id, query)
        assert fact not in gone["text"]
        async with session.get(f"{server}/v1/chats/{quote(chat_id, safe='')}/nodes?limit=500") as resp:
            nodes = (await resp.json())["nodes"]
        assert not any(fact in str(n["fields"]) for n in nodes)
        assert any(edit in str(n["fields"]) for n in nodes)
