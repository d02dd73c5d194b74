"""Bringing a SillyTavern chat file in (`stbme ingest`) against the extension's way of bringing the same chat
in (opening it in SillyTavern: the tail, then `need_more` chunks), in the same process, each into a fresh
data directory, with the real local model and the job worker doing the processing.

    .venv/bin/python scripts/bench_st_ingest.py --messages 300            # both, and their ratio
    .venv/bin/python scripts/bench_st_ingest.py --messages 2000 --no-baseline

Prints wall time, messages per second and CPU ms per message (this process: the worker, the model and
SQLite all run here) for each, the time the sync requests themselves took, and ingest/baseline ratios.
The chat is generated (scripts/_bench_data.py: roleplay paragraphs, about one sentence in five Chinese)
and written in SillyTavern's own .jsonl format; the machine may be shared, so quote the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))

from _bench_data import ChatGenerator  # noqa: E402

from stbme.api.bodies import parse_sync_request  # noqa: E402
from stbme.interop.st_chat import StChat, anchor_indexes, chains_of, read_chat  # noqa: E402
from stbme.services import Services  # noqa: E402
from stbme.tokens import count_tokens  # noqa: E402
from stbme.usecases.ingest import follow, push_chat  # noqa: E402

EXTENSION_TAIL, EXTENSION_CHUNK = 4, 500   # st_extension/lib/sync.js DEFAULT_TAIL, DEFAULT_MAX_CHUNK


def write_st_chat(path: Path, count: int, seed: int) -> None:
    """A single-character chat file as SillyTavern 1.12 writes it: a header line, then one message a line."""
    gen = ChatGenerator(seed)
    lines = [{"user_name": "Alex", "character_name": "Mira", "create_date": "2024-05-12@14h30m22s",
              "chat_metadata": {"note_prompt": "", "tainted": True}}]
    for i in range(count):
        m = gen.message(i)
        msg = {"name": m.name, "is_user": m.role == "user", "is_system": False,
               "send_date": f"May 12, 2024 {1 + i % 12}:{i % 60:02d}pm", "mes": m.text, "extra": {}}
        if m.role == "assistant":
            msg.update(swipe_id=0, swipes=[m.text])
        lines.append(msg)
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in lines),
                    encoding="utf-8")


async def run(data_dir: Path, chat: StChat, how: str) -> dict:
    svc = Services.open(data_dir)
    limits = dict(max_messages=svc.settings["server.max_sync_messages"],
                  max_chars=svc.settings["server.max_message_chars"])
    sync_s = 0.0

    async def send(chat_id: str, body: dict) -> dict:
        nonlocal sync_s
        started = time.perf_counter()
        answer = await svc.sync.sync(chat_id, parse_sync_request(body, **limits))
        sync_s += time.perf_counter() - started
        return answer

    try:
        await svc.start_worker()
        wall, cpu = time.perf_counter(), time.process_time()
        if how == "ingest":
            await push_chat(send, chat, max_messages=limits["max_messages"], max_bytes=4 * 1024 * 1024)
        else:
            await extension_open(send, chat)
        status = await follow(svc.chats.status, chat.chat_id, lambda s: None, poll_s=0.25)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await svc.close()
    n = len(chat.messages)
    return {"how": how, "wall_s": wall, "cpu_ms_per_msg": cpu * 1000 / n, "msgs_per_s": n / wall,
            "sync_ms": sync_s * 1000, "nodes": status["nodes"], "processed": status["progress"]["messages"]["done"]}


async def extension_open(send, chat: StChat) -> None:
    """lib/sync.js ChatSyncer for a chat this client never synced: the tail with anchors, then what the
    sidecar asks for, in chunks."""
    chains = chains_of(chat.messages)
    n = len(chat.messages)
    start = max(0, n - EXTENSION_TAIL)
    while True:
        end = min(n, start + EXTENSION_CHUNK)
        answer = await send(chat.chat_id, {"length": n, "messages": chat.messages[start:end], "anchors": [
            {"index": i, "chain": chains[i]} for i in anchor_indexes(n, start)]})
        if answer["status"] == "synced" and end >= n:
            return
        start = end if answer["status"] == "synced" else answer["need_from"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300, help="messages in the chat")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-baseline", action="store_true", help="only `stbme ingest`'s path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "Mira - 2024-05-12@14h30m22s.jsonl"
        write_st_chat(path, args.messages, args.seed)
        chat = read_chat(path)
        tokens = [count_tokens(m["text"]) for m in chat.messages]
        print(f"chat: {len(chat.messages)} messages, {sum(tokens) / len(tokens):.0f} tokens a message on average "
              f"(assistant {sum(t for t, m in zip(tokens, chat.messages) if m['role'] == 'assistant') / max(1, sum(m['role'] == 'assistant' for m in chat.messages)):.0f}), "
              f"{path.stat().st_size / 1e6:.1f} MB")
        results = [asyncio.run(run(Path(tmp) / "ingest", chat, "ingest"))]
        if not args.no_baseline:
            results.append(asyncio.run(run(Path(tmp) / "extension", chat, "extension")))
    for r in results:
        print(f"{r['how']:>9}: {r['wall_s']:.1f} s, {r['msgs_per_s']:.1f} messages/s, {r['cpu_ms_per_msg']:.0f} ms CPU "
              f"a message, sync requests {r['sync_ms']:.0f} ms; {r['processed']} processed, {r['nodes']} memories")
    if len(results) == 2:
        a, b = results
        print(f"ingest / extension: wall {a['wall_s'] / b['wall_s']:.2f}, CPU {a['cpu_ms_per_msg'] / b['cpu_ms_per_msg']:.2f}, "
              f"sync requests {a['sync_ms'] / max(b['sync_ms'], 1e-9):.2f}; memories equal: {a['nodes'] == b['nodes']}")


if __name__ == "__main__":
    main()
