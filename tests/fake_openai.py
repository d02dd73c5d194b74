"""A scripted OpenAI-compatible server for tests and the benchmark (real HTTP on loopback).

`/v1/chat/completions` routes by the task marker every sidecar prompt starts with (`[stbme:extract]`)
and answers deterministically from the prompt's content, so a fresh ingest and a replay after a
rollback get identical answers. Switches make it misbehave: garbage JSON, HTTP errors (500, 429),
a hang, and rejecting JSON mode. `/v1/embeddings` returns deterministic vectors.
"""

from __future__ import annotations

import asyncio
import hashlib
import re

import jsonschema
import numpy as np
import orjson
from aiohttp import web

NAMES = ("Elena", "Marcus", "Rhea", "Tomas", "Oswin")
PLACES = ("Greywater", "Ashford", "lighthouse", "vault")
_LINE = re.compile(r"^#(\d+) \[(\w+)(?: ([^\]]*))?\]: (.*)$")
_MEM = re.compile(r"^\[(M\d+)\] (\w+): (.*)$")


def _section(text: str, title: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line.startswith("## " + title)
            continue
        if inside and line.strip():
            lines.append(line)
    return lines


def answer_extract(user: str, system: str = "") -> dict:
    new = [m for m in (_LINE.match(line) for line in _section(user, "NEW messages")) if m]
    existing = {}
    for line in _section(user, "Existing memories"):
        m = _MEM.match(line)
        if m:
            name = re.match(r"name: ([^|(]+)", m.group(3))
            if name:
                existing[(m.group(2), name.group(1).strip().lower())] = m.group(1)
    ops, seen = [], set()
    text = " ".join(m.group(4) for m in new)
    refs = []
    for name in NAMES:
        if name not in text or name in seen:
            continue
        seen.add(name)
        sentence = next((s for s in re.split(r"(?<=[.!?])\s+", text) if name in s), text)[:90]
        key = existing.get(("character", name.lower())) or existing.get(("entity", name.lower()))
        if key:
            ops.append({"op": "update", "id": key, "fields": {"state": sentence}})
        else:
            ref = f"N{len(ops) + 1}"
            refs.append(ref)
            ops.append({"op": "create", "ref": ref, "type": "character", "fields": {"name": name, "state": sentence},
                        "importance": 6})
    for place in PLACES:
        if place in text and ("location", place.lower()) not in existing:
            ops.append({"op": "create", "ref": f"N{len(ops) + 1}", "type": "location", "fields": {"name": place},
                        "importance": 5})
    for reply in (m for m in new if m.group(2) == "assistant"):  # one event per reply, as the prompt asks
        said = reply.group(4)
        event = {"op": "create", "ref": f"N{len(ops) + 1}", "type": "event",
                 "fields": {"title": " ".join(said.split()[:3]), "summary": said[:120]},
                 "importance": 8 if "!" in said else 5,
                 "links": [{"target": r, "relation": "involved_in"} for r in refs]}
        if "fake" in said:  # a contradiction of an older event about the map
            old = next((k for (t, _), k in existing.items() if t == "event"), None)
            for line in _section(user, "Existing memories"):
                m = _MEM.match(line)
                if m and m.group(2) == "event" and "map" in m.group(3):
                    old = m.group(1)
                    break
            if old:
                event["links"].append({"target": old, "relation": "contradicts"})
        ops.append(event)
    if "rule:" in text.lower():
        ops.append({"op": "create", "type": "rule", "fields": {"title": "House rule",
                                                                "constraint": text.lower().split("rule:")[1][:80]}})
    if "Evolution:" in system:  # evolve.mode = with_extraction: the A-MEM decision rides on each create
        memories = [line for line in _section(user, "Existing memories") if _MEM.match(line)]
        for op in ops:
            if op["op"] == "create":
                op["evolve"] = evolution_decision(orjson.dumps(op["fields"]).decode(), memories)
    return {"thought": "scripted", "operations": ops}


def evolution_decision(new_text: str, neighbours: list[str]) -> dict:
    """The seed's decision for one new memory: evolve the (first two) neighbours that share a name with it, and
    try an invented key, which must change nothing. Both, not the nearest only: which of two equally near
    neighbours comes first depends on the test embedder's hashing of their words."""
    names = [n for n in NAMES if n in new_text]
    related = [re.match(r"\[(M\d+)\]", n).group(1) for n in neighbours if any(x in n for x in names)]
    if not related:
        return {"should_evolve": False}
    return {"should_evolve": True, "reason": f"shares {names[0]}",
            "suggested_connections": related[:2] + ["M999", "n_not_a_key"],
            "neighbor_updates": [*({"nodeId": key, "newContext": f"Seen again: {new_text[-60:]}",
                                    "newTags": [names[0].lower()]} for key in related[:2]),
                                 {"nodeId": "M999", "newContext": "invented key"}]}


def _blocks(user: str, marker: str) -> list[tuple[str, list[str]]]:
    blocks, current = [], None
    for line in user.splitlines():
        if line.startswith(marker):
            current = (line, [])
            blocks.append(current)
        elif current is not None and line.startswith("[M"):
            current[1].append(line)
    return blocks


def answer_dedupe(user: str) -> dict:
    decisions = []
    for head, neighbours in _blocks(user, "## New memory "):
        new = re.match(r"## New memory (N\d+)", head).group(1)
        sims = [float(re.search(r"similarity ([\d.]+)$", n).group(1)) for n in neighbours]
        first = re.match(r"\[(M\d+)\]", neighbours[0]).group(1) if neighbours else None
        if sims and sims[0] >= 0.97:
            decisions.append({"new": new, "action": "skip"})
        elif first:
            summary = head.split(": ", 1)[1][:100]
            decisions.append({"new": new, "action": "merge", "target": first, "fields": {"summary": summary}})
    return {"decisions": decisions}


def answer_evolve(user: str) -> dict:
    results = []
    for head, neighbours in _blocks(user, "## New memory "):
        new = re.search(r"\[(N\d+)\]", head).group(1)
        results.append({"new": new, **evolution_decision(head, neighbours)})
    return {"results": results}


def answer_text(task: str, user: str) -> dict:
    lines = [line for line in user.splitlines() if line.strip() and not line.startswith("##")]
    digest = hashlib.sha1(user.encode()).hexdigest()[:6]
    return {"summary": f"{task} {digest}: {lines[-1][:100] if lines else ''}"}


def answer_reflect(user: str) -> dict:
    names = [n for n in NAMES if n in user]
    return {"insight": f"Trust around {names[0] if names else 'the group'} keeps eroding",
            "trigger": "repeated secrets", "suggestion": "let a confrontation happen", "importance": 7}


def answer_compress(user: str) -> dict:
    groups = []
    for line in user.splitlines():
        m = re.match(r"## (G\d+)", line)
        if m:
            groups.append({"key": m.group(1), "fields": {"title": f"Compressed {m.group(1)}", "summary": ""}})
        elif groups and line.startswith("- "):
            groups[-1]["fields"]["summary"] += line[2:40] + "; "
    return {"groups": groups}


def answer_rerank(user: str) -> dict:
    query = " ".join(_section(user, "Query")).lower()
    words = {w for w in re.findall(r"\w+", query) if len(w) > 3}
    keys = [re.match(r"\[(R\d+)\]", line).group(1) for line in _section(user, "Candidates")
            if re.match(r"\[(R\d+)\]", line) and words & set(re.findall(r"\w+", line.lower()))]
    return {"selected": keys[::-1]}


def answer(task: str, user: str, system: str = "") -> dict:
    if task == "extract":
        return answer_extract(user, system)
    if task == "dedupe":
        return answer_dedupe(user)
    if task == "evolve":
        return answer_evolve(user)
    if task in ("summary", "rollup", "synopsis"):
        return answer_text(task, user)
    if task == "reflect":
        return answer_reflect(user)
    if task == "compress":
        return answer_compress(user)
    if task == "rerank":
        return answer_rerank(user)
    return {}


def closed_objects(schema):
    """The schema with every object that lists properties closed to others, as llama.cpp reads it."""
    if isinstance(schema, list):
        return [closed_objects(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed_objects(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


class FakeOpenAI:
    """State and switches of the fake server. Tests flip the switches between calls."""

    def __init__(self):
        self.calls: list[dict] = []          # {"task", "body"} per completion request that reached the handler
        self.statuses: list[int] = []        # answer these HTTP statuses first, one per request
        self.garbage = 0                     # next N answers are not JSON
        self.truncate = 0                    # next N answers are cut in half, finish_reason "length"
        self.truncate_quietly = 0            # next N answers are cut in half, finish_reason "stop" (as a relay sees it)
        self.hang = False                    # never answer
        self.hangs = 0                       # the next N requests never get an answer
        self.reject_json_mode = False        # 400 when response_format is sent
        self.reject_json_schema = False      # 500 when response_format is a json_schema (JSON mode is fine)
        self.schema_violations: list[str] = []  # scripted answers a model held to the sent schema could not write
        self.fenced = False                  # wrap answers in ```json fences with chatter and a trailing comma
        self.overrides: dict[str, dict] = {}  # task -> fixed answer
        self.garbage_tasks: set[str] = set()  # these tasks always get garbage
        self.before_answer = None            # async fn(task) awaited before answering (to race a sync)
        self.huge_bytes = 0                  # answer with a body this long (an answer that ignores max_tokens)
        self.huge_chunked = False            # ... sent chunked, without a Content-Length
        self.huge_sent = 0                   # bytes of huge bodies written (until the client hung up)
        self.context_tokens = 0              # a model with this context: 400 context_length_exceeded past it
        self.context_refusals = 0            # how many requests it refused so

    @staticmethod
    def prompt_tokens(body: dict) -> int:
        """The prompt in this model's tokens: its own tokenizer (a token per 3 characters), not the sidecar's."""
        return sum(len(str(m.get("content") or "")) // 3 + 5 for m in body["messages"])

    def tasks(self) -> list[str]:
        return [c["task"] for c in self.calls]

    async def completions(self, request: web.Request) -> web.Response:
        body = await request.json()
        system = body["messages"][0]["content"]
        match = re.match(r"\[stbme:(\w+)\]", system)
        task = match.group(1) if match else "unknown"
        self.calls.append({"task": task, "body": body})
        if self.before_answer is not None:
            await self.before_answer(task)
        if self.hang or self.hangs > 0:
            self.hangs -= not self.hang
            await asyncio.sleep(3600)
        if self.huge_bytes:
            return await self._huge(request, body)
        if self.context_tokens:  # as OpenAI, vLLM and llama-cpp-python's server word it
            prompt, completion = self.prompt_tokens(body), int(body.get("max_tokens") or 0)
            if prompt + completion > self.context_tokens:
                self.context_refusals += 1
                return web.json_response({"error": {
                    "message": f"This model's maximum context length is {self.context_tokens} tokens. However, you "
                               f"requested {prompt + completion} tokens ({prompt} in the messages, {completion} in "
                               "the completion). Please reduce the length of the messages or completion.",
                    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}},
                    status=400)
        if self.statuses:
            status = self.statuses.pop(0)
            return web.json_response({"error": {"message": f"scripted {status}"}}, status=status,
                                     headers={"Retry-After": "0"} if status == 429 else None)
        if self.reject_json_mode and "response_format" in body:
            return web.json_response({"error": {"message": "response_format json_object is not supported"}},
                                     status=400)
        answer_format = body.get("response_format") or {}
        if self.reject_json_schema and answer_format.get("type") == "json_schema":  # llama-cpp-python 0.3's words
            return web.json_response({"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': "
                                                           "('body', 'response_format', 'type'), 'msg': \"Input should "
                                                           "be 'text' or 'json_object'\"}", "type": "internal_server_error"}},
                                     status=500)
        schema = (answer_format.get("json_schema") or {}).get("schema") or answer_format.get("schema")
        user = body["messages"][1]["content"] if len(body["messages"]) > 1 else ""
        if self.garbage > 0 or task in self.garbage_tasks:
            self.garbage -= task not in self.garbage_tasks
            content = "Sure! Here are the memories: {operations: [oops]}"
        else:
            value = self.overrides.get(task)  # a test's fixed answer: as a server that ignores the schema
            if value is None:
                value = answer(task, user, system)
                if schema:
                    value = {k: v for k, v in value.items() if k != "thought"}  # a held model writes no chatter
                    self.check_schema(task, value, schema)
            content = orjson.dumps(value).decode()
            if self.fenced:
                content = "Here you go:\n```json\n" + content[:-1] + ",}\n```\nHope it helps."
        finish_reason = "stop"
        if self.truncate > 0 or self.truncate_quietly > 0:
            finish_reason = "length" if self.truncate > 0 else "stop"
            self.truncate, self.truncate_quietly = (self.truncate - 1, self.truncate_quietly) if self.truncate > 0 \
                else (self.truncate, self.truncate_quietly - 1)
            content = content[:max(2, len(content) // 2)]
        return web.json_response({
            "id": "chatcmpl-fake", "object": "chat.completion", "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})

    def check_schema(self, task: str, value: object, schema: dict) -> None:
        """Record it when the scripted answer breaks the schema as llama.cpp's grammar reads it (an object
        with `properties` takes no other key unless `additionalProperties` says so): such an answer is one
        a model under that grammar could never give, so the schema would lose what the stage reads."""
        for error in jsonschema.Draft202012Validator(closed_objects(schema)).iter_errors(value):
            self.schema_violations.append(f"{task}: {error.message} at {list(error.absolute_path)}")

    async def _huge(self, request: web.Request, body: dict) -> web.StreamResponse:
        """A well-formed completion whose content alone is `huge_bytes` long, written a MiB at a time."""
        head = orjson.dumps({"id": "chatcmpl-huge", "object": "chat.completion", "model": body.get("model", "fake"),
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}}]})
        head, tail = head.split(b'"content":""', 1)
        head += b'"content":"'
        tail = b'"' + tail
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if not self.huge_chunked:
            resp.content_length = len(head) + self.huge_bytes + len(tail)
        await resp.prepare(request)
        chunk = b"x" * (1 << 20)
        try:
            await resp.write(head)
            left = self.huge_bytes
            while left > 0:
                await resp.write(chunk[:left])
                self.huge_sent += min(left, len(chunk))
                left -= len(chunk)
            await resp.write(tail)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client stopped reading: what a sidecar that caps answers does
        return resp

    async def embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = []
        for i, text in enumerate(texts):
            seed = int.from_bytes(hashlib.sha1(text.encode()).digest()[:4], "little")
            vec = np.random.default_rng(seed).standard_normal(64)
            data.append({"index": i, "embedding": (vec / np.linalg.norm(vec)).tolist()})
        return web.json_response({"data": data, "model": body.get("model")})

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_post("/v1/embeddings", self.embeddings)
        return app
