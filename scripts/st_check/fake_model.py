#!/usr/bin/env python
"""A stand-in OpenAI-compatible model server for the real-SillyTavern check (scripts/st_check/run.sh).

It answers what the check needs from a model, deterministically and without a network:
  - POST /v1/embeddings: a hashed bag of words (64-d, unit length), so texts sharing words are close;
  - POST /v1/chat/completions: for the original ST-BME's extraction prompt (it asks for JSON with
    "operations" and "cognitionUpdates"), one event memory made from the newest chat line it quotes;
    for other JSON tasks, an empty result; for a roleplay turn, a short reply that echoes the user;
  - GET /v1/models.
Every request is appended to a JSON-lines log (the check reads the prompts from it). CORS is open because
ST-BME calls the embedding API from the browser.

    python scripts/st_check/fake_model.py --port 8011 --log /tmp/fake_model.log
"""

from __future__ import annotations

import hashlib
import json
import re
import time

import click
import numpy as np
from aiohttp import web

DIM = 64
CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "*",
        "Access-Control-Allow-Methods": "GET, POST, OPTIONS"}


def embed(text: str) -> list[float]:
    vec = np.zeros(DIM, np.float32)
    for word in re.findall(r"\w+", text.lower()) or [text]:
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        vec[int.from_bytes(digest[:4], "little") % DIM] += 1.0
        vec[int.from_bytes(digest[4:], "little") % DIM] += 0.5
    vec += 0.01
    return (vec / np.linalg.norm(vec)).tolist()


def _text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def answer(messages: list[dict]) -> tuple[str, str]:
    """(kind, reply) for a chat completion request."""
    prompt = "\n".join(_text(m) for m in messages)
    if '"operations"' in prompt and "cognitionUpdates" in prompt:
        quoted = [line.strip() for line in prompt.splitlines() if re.match(r"^#\d+ \[", line.strip())]
        summary = (quoted[-1] if quoted else "A quiet conversation")[:160]
        title = "Key under the oak" if "oak" in summary.lower() else "A conversation"
        op = {"action": "create", "type": "event", "ref": "evt1", "importance": 7, "scope": {"layer": "objective"},
              "fields": {"title": title, "summary": summary, "participants": "User, Seraphina", "status": "ongoing"}}
        return "extract", json.dumps({"thought": "one event", "operations": [op], "cognitionUpdates": [],
                                      "regionUpdates": {}})
    if "json" in prompt.lower():
        return "json-task", json.dumps({"thought": "nothing to add", "operations": [], "cognitionUpdates": [],
                                        "regionUpdates": {}})
    user = next((_text(m) for m in reversed(messages) if m.get("role") == "user"), "")
    return "chat", f"*Seraphina nods.* I remember what you said. ({user[:60]})"


def make_app(log_path: str) -> web.Application:
    log = open(log_path, "a", encoding="utf-8")

    def record(entry: dict) -> None:
        log.write(json.dumps({"t": time.time(), **entry}, ensure_ascii=False) + "\n")
        log.flush()

    @web.middleware
    async def cors(request, handler):
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=CORS)
        response = await handler(request)
        response.headers.update(CORS)
        return response

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"},
                                                             {"id": "fake-embed", "object": "model"}]})

    async def embeddings(request):
        body = await request.json()
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        record({"kind": "embed", "count": len(texts)})
        return web.json_response({"object": "list", "model": body.get("model"), "data": [
            {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)]})

    async def chat(request):
        body = await request.json()
        messages = body.get("messages", [])
        kind, reply = answer(messages)
        record({"kind": kind, "prompt": "\n".join(_text(m) for m in messages), "reply": reply})
        message = {"role": "assistant", "content": reply}
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for delta, finish in ((message, None), ({}, "stop")):
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": "fake-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await response.write(b"data: [DONE]\n\n")
            return response
        return web.json_response({"id": "x", "object": "chat.completion", "created": int(time.time()),
                                  "model": "fake-model", "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                                   "total_tokens": 2},
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    app = web.Application(middlewares=[cors])
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/chat/completions", chat)
    return app


@click.command()
@click.option("--port", default=8011, show_default=True, help="Port on 127.0.0.1.")
@click.option("--log", "log_path", required=True, help="JSON-lines file every request is appended to.")
def main(port: int, log_path: str) -> None:
    """Serve the stand-in model on 127.0.0.1."""
    web.run_app(make_app(log_path), host="127.0.0.1", port=port, print=None)


if __name__ == "__main__":
    main()
