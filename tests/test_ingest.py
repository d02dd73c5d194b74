"""Bringing SillyTavern chat files in (`stbme ingest`): the file read as the extension sees the chat, stored
through the same sync, so that opening the chat in SillyTavern afterwards redoes nothing, and an edit there
rolls the ingested memories back like any others.

The fixtures under tests/fixtures/st_chats are written in SillyTavern 1.12's format (a single chat with its
header line, a group chat without one; swipes, hidden and narrator messages, a numeric send_date, Chinese).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from conftest import full_sync, settle, sync

from stbme.api import create_app
from stbme.api.bodies import parse_sync_request
from stbme.api.keys import services_key
from stbme.cli import main
from stbme.interop.st_chat import chains_of, chat_files, js_string, parse_chat, read_chat, sync_body
from stbme.services import Services
from stbme.usecases.ingest import follow, push_chat

ROOT = Path(__file__).resolve().parent.parent
CHATS = Path(__file__).parent / "fixtures" / "st_chats"
SINGLE = CHATS / "chats" / "Elena" / "Elena - 2024-05-12@14h30m22s.jsonl"
GROUP = CHATS / "group chats" / "2024-06-01@09h05m10s.jsonl"

# SillyTavern's loading (src/endpoints/chats.js /get and /group/get: `lines.map(tryParse).filter(x => x)`;
# public/script.js getChat: `chat.shift()` drops a single chat's header), then the extension's own functions.
NODE_SCRIPT = """
import { readFileSync } from 'node:fs';
import { chainHash, messageHash, messageParts } from '%(ext)s/lib/hash.js';
import { wireMessage } from '%(ext)s/lib/sync.js';
const [path, kind] = process.argv.slice(1);
const chat = readFileSync(path, 'utf8').split('\\n').map(l => { try { return JSON.parse(l); } catch { return undefined; } })
    .filter(x => x);
if (kind === 'single') chat.shift();
let prev = '';
console.log(JSON.stringify(chat.map((m, i) => {
    const parts = messageParts(m);
    prev = chainHash(prev, messageHash(parts.role, parts.name, parts.text));
    return { ...wireMessage(m, i, parts), chain: prev };
})));
"""


def extension_view(path: Path, kind: str) -> list[dict]:
    """The chat as the extension, running in SillyTavern, would sync it (node runs the extension's code)."""
    script = NODE_SCRIPT % {"ext": (ROOT / "st_extension").as_posix()}
    out = subprocess.run(["node", "--input-type=module", "-e", script, str(path), kind], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def ours(chat) -> list[dict]:
    return [{**m, "chain": c} for m, c in zip(chat.messages, chains_of(chat.messages))]


# -- the file as the extension sees it ---------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the extension's own code")
@pytest.mark.parametrize("path, kind", [(SINGLE, "single"), (GROUP, "group")])
def test_messages_and_chains_are_the_extensions(path, kind):
    chat = read_chat(path)
    assert chat.group == (kind == "group")
    assert ours(chat) == extension_view(path, kind)


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the extension's own code")
def test_odd_values_read_as_javascript_reads_them(tmp_path):
    lines = [
        '{"user_name":"Alex","character_name":"Elena","create_date":"2024-01-01@00h00m00s","chat_metadata":{}}',
        '{"name":"Elena","is_user":false,"mes":"hi\\r","send_date":1715525160000,"swipe_id":2.0}',
        "not json at all", "", "0", "null", "false", '""',
        '{"name":7,"is_user":"yes","mes":5,"send_date":1.5e-7,"swipe_id":true}',
        '{"is_system":[],"mes":["a",null,3],"send_date":null,"swipe_id":"1"}',
        '{"is_user":0,"is_system":{},"mes":{"x":1},"name":"N","send_date":[1,2]}',
        '[1, 2]', '"a string line"', '12.5',
        '{"name":"Alex","is_user":true,"mes":"（中文）\\u2028 line","send_date":"May 1, 2024 1:00pm"}\r',
    ]
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    chat = read_chat(path)
    assert not chat.group and chat.skipped_lines == 5 and len(chat.messages) == 8  # a blank line is no loss
    assert ours(chat) == extension_view(path, "single")


def test_roles_names_and_swipes_as_the_extension_maps_them():
    single = read_chat(SINGLE)
    assert single.chat_id == "Elena - 2024-05-12@14h30m22s" and len(single.messages) == 12
    by_index = single.messages
    assert by_index[0]["role"] == "assistant" and by_index[0]["name"] == "Elena"   # the greeting, header dropped
    assert by_index[2]["swipe_id"] == 1 and "silver key under the old oak" in by_index[2]["text"]  # the chosen swipe
    assert by_index[3]["role"] == "user"          # a hidden user message keeps is_user (ST sets is_system)
    assert by_index[8]["role"] == "system"        # a hidden reply
    assert by_index[6]["role"] == "assistant" and by_index[6]["name"] == "Narrator"  # /sys narrator
    assert by_index[9]["send_date"] == "1715525160000"
    group = read_chat(GROUP)
    assert group.chat_id == "2024-06-01@09h05m10s" and group.group and len(group.messages) == 8
    assert group.messages[0]["role"] == "system" and group.messages[0]["name"] == "SillyTavern System"
    assert {m["name"] for m in group.messages} == {"SillyTavern System", "Elena", "Mira", "Alex"}


def test_chat_files_of_a_folder_and_js_strings():
    assert chat_files(CHATS) == sorted([SINGLE, GROUP])
    assert chat_files(SINGLE) == [SINGLE]
    assert [js_string(v) for v in (None, True, 3, 3.0, 1e21, 1.5e-7, [1, None, "a"], {"a": 1})] == \
        ["null", "true", "3", "3", "1e+21", "1.5e-7", "1,,a", "[object Object]"]


def test_sync_bodies_are_chunked_with_anchors():
    chat = parse_chat("\n".join(json.dumps({"name": "A", "is_user": i % 2 == 0, "mes": f"message {i} " + "x" * 50})
                                for i in range(10)).encode(), "c")
    assert chat.group and len(chat.messages) == 10
    chains = chains_of(chat.messages)
    body, end = sync_body(chat.messages, chains, 0, max_messages=4, max_bytes=10**6)
    assert end == 4 and body["anchors"] == [] and body["length"] == 10
    body, end = sync_body(chat.messages, chains, 4, max_messages=4, max_bytes=10**6)
    assert end == 8 and {"index": 3, "chain": chains[3]} in body["anchors"]
    body, end = sync_body(chat.messages, chains, 8, max_messages=4, max_bytes=200)
    assert end == 9  # the byte budget cuts the slice, but one message always goes


# -- ingest, then the extension opens the chat ---------------------------------------------------------------
def url(chat_id: str, rest: str = "") -> str:
    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


async def ingest_over_http(client, chat) -> dict:
    """What `stbme ingest` does with a running server: sync requests over HTTP, then follow the status."""
    async def send(chat_id, body):
        resp = await client.post(url(chat_id, "/sync"), json=body)
        assert resp.status == 200, await resp.text()
        return await resp.json()

    async def status(chat_id):
        return await (await client.get(url(chat_id, "/status"))).json()

    answer = await push_chat(send, chat, max_messages=5, max_bytes=10**6)
    assert answer["status"] == "synced" and answer["requests"] >= 2  # in chunks, as a long chat would go
    seen = []
    final = await follow(status, chat.chat_id, seen.append, poll_s=0.05)
    assert seen and all("progress" in s for s in seen)
    return final


def as_sent(chat) -> list[dict]:
    """The chat as conftest's sync helpers take it (the extension's wire fields)."""
    return [{k: m[k] for k in ("role", "name", "text", "swipe_id", "send_date")} for m in chat.messages]


async def memories(client, chat_id: str) -> list:
    data = await (await client.get(url(chat_id, "/export"))).json()
    return sorted(repr((n["type"], sorted(n["fields"].items()), n["seq_range"], n["source"])) for n in data["nodes"])


async def events(client, chat_id: str, kind: str) -> list:
    data = await (await client.get("/v1/dna/events", params={"chat_id": chat_id, "kind": kind})).json()
    return data["events"]


@pytest.mark.parametrize("path", [SINGLE, GROUP], ids=["single", "group"])
async def test_ingest_then_the_extension_syncs_the_same_chat(client, path):
    chat = read_chat(path)
    final = await ingest_over_http(client, chat)
    assert final["messages"] == len(chat.messages) and final["progress"]["messages"]["done"] == len(chat.messages)
    assert final["progress"]["embedding"]["percent"] == 100.0 and final["unembedded"] == 0
    before = await memories(client, chat.chat_id)
    assert before

    # SillyTavern opens the chat: a new extension client sends the tail and chain anchors.
    answer = await full_sync(client, chat.chat_id, as_sent(chat))
    assert answer["status"] == "synced" and answer["rolled_back"] == 0 and answer["diverged_at"] is None
    assert answer["queued"] is False
    assert await memories(client, chat.chat_id) == before        # no duplicate, nothing redone
    assert await events(client, chat.chat_id, "rollback") == []


@pytest.mark.parametrize("path, edited", [(SINGLE, 2), (GROUP, 4)], ids=["single", "group"])
async def test_an_edit_after_an_ingest_rolls_back_the_ingested_memory(client, path, edited):
    chat = read_chat(path)
    await ingest_over_http(client, chat)
    old_text = chat.messages[edited]["text"]
    messages = as_sent(chat)
    messages[edited] = {**messages[edited], "text": "The tide took the boathouse and every boat in it."}
    answer = await full_sync(client, chat.chat_id, messages)
    assert answer["diverged_at"] == edited and answer["rolled_back"] > 0
    await settle(client.server.app[services_key], chat.chat_id)
    texts = " ".join(await memories(client, chat.chat_id))
    assert "tide took the boathouse" in texts and old_text[:40] not in texts
    # the same as the edited chat brought in fresh
    fresh = {**{f.name: getattr(chat, f.name) for f in chat.__dataclass_fields__.values()},
             "chat_id": "fresh", "messages": [{"index": i, **m} for i, m in enumerate(messages)]}
    await ingest_over_http(client, type(chat)(**fresh))
    assert await memories(client, chat.chat_id) == await memories(client, "fresh")


async def test_ingest_into_a_chat_the_sidecar_holds_keeps_what_is_equal(sidecar):
    chat = read_chat(SINGLE)
    limits = dict(max_messages=sidecar.settings["server.max_sync_messages"],
                  max_chars=sidecar.settings["server.max_message_chars"])

    async def send(chat_id, body):
        return await sidecar.sync.sync(chat_id, parse_sync_request(body, **limits))

    await full_sync(sidecar, chat.chat_id, as_sent(chat)[:6])   # the extension synced the chat's start
    await settle(sidecar, chat.chat_id)
    first = await push_chat(send, chat, max_messages=4, max_bytes=10**6)
    assert first["rolled_back"] == 0
    await settle(sidecar, chat.chat_id)
    again = await push_chat(send, chat, max_messages=4, max_bytes=10**6)
    assert again["rolled_back"] == 0 and again["queued"] is False


async def test_an_empty_chat_file_is_an_empty_chat(sidecar, tmp_path):
    path = tmp_path / "Nobody - 2024-01-01@00h00m00s.jsonl"
    path.write_text('{"user_name":"A","character_name":"B","create_date":"x","chat_metadata":{}}', encoding="utf-8")
    chat = read_chat(path)
    assert chat.messages == [] and not chat.group
    answer = await push_chat(lambda c, b: sync(sidecar, c, b), chat, max_messages=10, max_bytes=10**6)
    assert answer["status"] == "synced" and answer["stored_length"] == 0


# -- the command, with the real model ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """The fixture folder brought in by `stbme ingest` (real local model), no server running."""
    data = tmp_path_factory.mktemp("ingested") / "data"
    result = CliRunner().invoke(main, ["ingest", str(CHATS), "--data-dir", str(data), "--create"],
                                prog_name="stbme")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    assert "(1/2)" in result.stderr and "(2/2)" in result.stderr
    assert "Elena - 2024-05-12@14h30m22s: 12 messages (chat); 12 processed (100%)" in result.stderr
    assert "2024-06-01@09h05m10s: 8 messages (group chat); 8 processed (100%)" in result.stderr
    return data


def test_ingest_needs_an_existing_data_dir_or_create(tmp_path):
    result = CliRunner().invoke(main, ["ingest", str(SINGLE), "--data-dir", str(tmp_path / "typo")],
                                prog_name="stbme")
    assert result.exit_code == 1 and "no sidecar data in" in result.stderr and "--create" in result.stderr
    assert not (tmp_path / "typo").exists()


def test_ingest_refuses_chat_id_for_a_folder_and_a_folder_without_chats(tmp_path):
    result = CliRunner().invoke(main, ["ingest", str(CHATS), "--chat-id", "x", "--data-dir", str(tmp_path)],
                                prog_name="stbme")
    assert result.exit_code == 1 and "--chat-id" in result.stderr
    result = CliRunner().invoke(main, ["ingest", str(tmp_path), "--data-dir", str(tmp_path)], prog_name="stbme")
    assert result.exit_code == 1 and "no .jsonl chat files" in result.stderr


@pytest.mark.e2e
async def test_ingested_chats_open_in_sillytavern_without_redoing_anything(ingested, aiohttp_client):
    client = await aiohttp_client(create_app(ingested))   # the real model, as `stbme serve` runs it
    for path in (SINGLE, GROUP):
        chat = read_chat(path)
        status = await (await client.get(url(chat.chat_id, "/status"))).json()
        assert status["progress"]["messages"]["done"] == len(chat.messages) and status["unembedded"] == 0
        before = await memories(client, chat.chat_id)
        answer = await full_sync(client, chat.chat_id, as_sent(chat))
        assert answer["rolled_back"] == 0 and answer["queued"] is False and answer["diverged_at"] is None
        assert await memories(client, chat.chat_id) == before
    recall = await (await client.post(url(read_chat(SINGLE).chat_id, "/recall"),
                                      json={"query": "where did Elena bury the silver key?"})).json()
    assert "oak tree" in recall["text"]


def test_no_wait_stores_and_leaves_the_processing(tmp_path):
    data = tmp_path / "data"
    result = CliRunner().invoke(main, ["ingest", str(GROUP), "--chat-id", "g", "--no-wait", "--data-dir", str(data),
                                       "--create"], prog_name="stbme")
    assert result.exit_code == 0, result.stderr
    assert "g: 8 messages stored (group chat)" in result.stderr

    async def pending():
        svc = Services.open(data)
        try:
            return await svc.chats.status("g")
        finally:
            await svc.close()

    status = asyncio.run(pending())
    assert status["messages"] == 8 and status["jobs"]["pending"] == 1 and status["processed_upto"] == -1
