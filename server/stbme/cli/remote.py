"""The use cases the CLI calls, answered by the server that owns the data directory (over its HTTP API,
with the token from STBME_TOKEN), under the same names and with the same results as `Services`, so a
command runs the same code whether it opened the directory itself or goes through the server."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any, AsyncIterator, Callable
from urllib.parse import quote

import aiohttp
import orjson

from .. import config
from ..dna import plan_files
from ..errors import BadRequest, StbmeError
from ..pipeline.sync import SyncRequest
from ..usecases.memories import NewMemory
from ..usecases.recall import RecallRequest
from .owner import ServerLock

TIMEOUT_S = 600.0   # an import embeds before it answers
WAIT_POLL_S = 0.5


def _chat(chat_id: str, rest: str = "") -> str:
    return f"/v1/chats/{quote(chat_id, safe='')}{rest}"


class Api:
    """JSON over HTTP to the owning server; its errors become StbmeErrors with the server's message."""

    def __init__(self, lock: ServerLock, token: str | None):
        self.lock = lock
        self.token = token
        self.session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.session = aiohttp.ClientSession(self.lock.url, headers=headers,
                                             timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()

    async def call(self, method: str, path: str, body: Any = None, *, params: dict | None = None,
                   raw: bool = False) -> Any:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            async with self.session.request(method, path, data=data, params=params, headers=headers) as resp:
                payload = await resp.read()
                if resp.status >= 400:
                    raise self._error(resp.status, payload)
        except aiohttp.ClientError as exc:
            raise StbmeError(f"{self.lock.describe()} did not answer {method} {path}: {exc}") from None
        return payload if raw else orjson.loads(payload)

    def _error(self, status: int, payload: bytes) -> StbmeError:
        try:
            body = orjson.loads(payload)
            message, field = body.get("error") or f"HTTP {status}", body.get("field")
        except (orjson.JSONDecodeError, AttributeError):
            message, field = f"HTTP {status}: {payload[:200].decode(errors='replace')}", None
        if status == 401:
            message = (f"{self.lock.describe()} owns this data directory and requires its API token: set "
                       f"STBME_TOKEN to the token it was started with ({message})")
        return StbmeError(message, status=status, field=field)


class _Part:
    def __init__(self, api: Api):
        self.api = api


class _Health(_Part):
    async def report(self) -> dict:
        return await self.api.call("GET", "/health")


class _Chats(_Part):
    async def list(self) -> list[dict]:
        return (await self.api.call("GET", "/v1/chats"))["chats"]

    async def status(self, chat_id: str) -> dict:
        return await self.api.call("GET", _chat(chat_id, "/status"))

    async def process_now(self, chat_id: str) -> dict:
        return await self.api.call("POST", _chat(chat_id, "/process"), {})


class _Sync(_Part):
    async def sync(self, chat_id: str, req: SyncRequest) -> dict:
        body = {"length": req.length, "messages": [dataclasses.asdict(m) for m in req.messages],
                "anchors": [{"index": i, "chain": c} for i, c in req.anchors.items()]}
        return await self.api.call("POST", _chat(chat_id, "/sync"), body)


class _Recall(_Part):
    async def recall(self, chat_id: str, req: RecallRequest) -> dict:
        body = {"query": req.query, "recent": req.recent}
        if req.budget_tokens is not None:
            body["budget_tokens"] = req.budget_tokens
        if req.max_memories is not None:
            body["max_memories"] = req.max_memories
        return await self.api.call("POST", _chat(chat_id, "/recall"), body)


class _Transfer(_Part):
    async def export_chat(self, chat_id: str, fmt: str = "stbme") -> dict:
        return await self.api.call("GET", _chat(chat_id, "/export"), params={"format": fmt})

    async def import_chat(self, chat_id: str, doc: Any, mode: str = "merge",
                          progress: Callable[[int, int], None] | None = None) -> dict:
        return await self.api.call("POST", _chat(chat_id, "/import"), doc, params={"mode": mode})


class _Embedding(_Part):
    async def reindex(self, chat_id: str, progress: Callable[[int, int], None] | None = None) -> dict:
        """Queue the rebuild on the server and wait for its jobs to finish."""
        await self.api.call("POST", _chat(chat_id, "/reindex"), {})
        while True:
            status = await self.api.call("GET", _chat(chat_id, "/status"))
            if not status["jobs"]["pending"]:
                break
            await asyncio.sleep(WAIT_POLL_S)
        if status["jobs"]["failed"]:
            raise StbmeError(f"the server's rebuild failed: {status['jobs']['last_error']}")
        count = status["index"]["count"]
        if progress and count is not None:
            progress(count, count)
        return {"indexed": count if count is not None else status["nodes"], "embedder": status["index"]["embedder"]}


class _Memories(_Part):
    async def create(self, chat_id: str, memory: NewMemory) -> dict:
        body = dataclasses.asdict(memory)
        return (await self.api.call("POST", _chat(chat_id, "/nodes"), body))["node"]

    async def list(self, chat_id: str, *, offset: int = 0, limit: int = 50, type_: str | None = None,
                   contains: str | None = None, archived: bool | None = False) -> dict:
        params = {"offset": offset, "limit": limit,
                  "archived": "all" if archived is None else str(archived).lower()}
        if type_:
            params["type"] = type_
        if contains:
            params["q"] = contains
        return await self.api.call("GET", _chat(chat_id, "/nodes"), params=params)

    async def act(self, chat_id: str, node_id: str, action: str) -> dict:
        return (await self.api.call("POST", _chat(chat_id, f"/nodes/{quote(node_id, safe='')}/{action}"), {}))["node"]

    async def link(self, chat_id: str, from_id: str, to_id: str, relation: str = "related",
                   strength: float = 0.5) -> dict:
        body = {"from_id": from_id, "to_id": to_id, "relation": relation, "strength": strength}
        return (await self.api.call("POST", _chat(chat_id, "/edges"), body))["edge"]


class _Dna(_Part):
    async def reflect(self, chat_id: str) -> dict:
        return (await self.api.call("POST", _chat(chat_id, "/dna/reflect"), {}))["reflect"]

    async def decay(self, chat_id: str) -> dict:
        return (await self.api.call("POST", _chat(chat_id, "/dna/decay"), {}))["decay"]

    async def chat_stats(self, chat_id: str) -> dict:
        return (await self.api.call("GET", _chat(chat_id, "/dna")))["stats"]

    async def global_stats(self) -> dict:
        return (await self.api.call("GET", "/v1/dna/stats"))["stats"]

    async def list_loops(self, chat_id: str | None, status: str | None = "open") -> list[dict]:
        params = {"status": status or "all"}
        if chat_id is not None:
            params["chat_id"] = chat_id
        return (await self.api.call("GET", "/v1/dna/repair-loops", params=params))["repair_loops"]


def _event_params(chat_id, kind, since) -> dict:
    return {k: v for k, v in (("chat_id", chat_id), ("kind", kind), ("since", since)) if v is not None}


class _DnaAssets(_Part):
    async def list_genes(self) -> list[dict]:
        return (await self.api.call("GET", "/v1/dna/genes"))["genes"]

    async def list_capsules(self) -> list[dict]:
        return (await self.api.call("GET", "/v1/dna/capsules"))["capsules"]

    async def create_gene(self, body: Any) -> dict:
        return (await self.api.call("POST", "/v1/dna/genes", body))["gene"]

    async def edit_gene(self, gene_id: str, body: Any) -> dict:
        return (await self.api.call("PATCH", f"/v1/dna/genes/{quote(gene_id, safe='')}", body))["gene"]

    async def events(self, *, chat_id: str | None = None, kind: str | None = None, since: float | None = None,
                     limit: int = 100, oldest_first: bool = False) -> list[dict]:
        params = _event_params(chat_id, kind, since) | {"limit": min(limit, 10000)}
        rows = (await self.api.call("GET", "/v1/dna/events", params=params))["events"]
        return list(reversed(rows)) if oldest_first else rows

    async def event_lines(self, *, plan: bool = False, chat_id: str | None = None, kind: str | None = None,
                          since: float | None = None) -> AsyncIterator[bytes]:
        """The events as JSON lines, oldest first (ours, or the plan's with `plan`)."""
        params = _event_params(chat_id, kind, since) | {"format": "plan" if plan else "stbme"}
        yield await self.api.call("GET", "/v1/dna/events.jsonl", params=params, raw=True)

    async def export_plan_dir(self, directory: Path, *, chat_id: str | None = None) -> dict:
        """The server's genes, capsules and events, written here in the plan's files."""
        directory = Path(directory)
        data = await self.api.call("GET", "/v1/dna/assets")
        events = b"".join([page async for page in self.event_lines(plan=True, chat_id=chat_id)])
        try:
            directory.mkdir(parents=True, exist_ok=True)
            plan_files.write_json(directory / plan_files.GENES_FILE, data["genes"])
            plan_files.write_json(directory / plan_files.CAPSULES_FILE, data["capsules"])
            with plan_files.AtomicFile(directory / plan_files.EVENTS_FILE) as f:
                f.write(events)
        except OSError as exc:
            raise BadRequest(f"cannot write to {directory}: {exc.strerror or exc}", field="dir") from None
        return {"genes": len(data["genes"]), "capsules": len(data["capsules"]), "events": events.count(b"\n"),
                "dir": str(directory)}

    async def import_plan_dir(self, directory: Path, *, replace: bool = False) -> dict:
        """The plan's files read and checked here (the same errors as without a server), sent to the server."""
        directory = Path(directory)
        plan_files.read_dir(directory)
        body: dict[str, Any] = {"replace": replace}
        for key, name in (("genes", plan_files.GENES_FILE), ("capsules", plan_files.CAPSULES_FILE)):
            if (directory / name).is_file():
                body[key] = orjson.loads((directory / name).read_bytes())
        events = directory / plan_files.EVENTS_FILE
        if events.is_file():
            body["events"] = [orjson.loads(line) for line in events.read_bytes().splitlines() if line.strip()]
        return (await self.api.call("POST", "/v1/dna/assets", body))["imported"]


class _SettingsService(_Part):
    async def update_global(self, updates: dict[str, Any]) -> dict[str, Any]:
        return (await self.api.call("PUT", "/v1/settings", {"settings": updates}))["settings"]

    async def update_chat(self, chat_id: str, updates: dict[str, Any]) -> dict[str, Any]:
        return (await self.api.call("PUT", _chat(chat_id, "/settings"), {"settings": updates}))["settings"]


class RemoteServices:
    """The part of `Services` the CLI uses, over HTTP. `settings` holds the server's global values (secrets
    masked) as of opening."""

    remote = True

    def __init__(self, lock: ServerLock, token: str | None):
        self.lock = lock
        self.api = Api(lock, token)
        self.health = _Health(self.api)
        self.chats = _Chats(self.api)
        self.sync = _Sync(self.api)
        self.recall = _Recall(self.api)
        self.transfer = _Transfer(self.api)
        self.embedding = _Embedding(self.api)
        self.memories = _Memories(self.api)
        self.dna = _Dna(self.api)
        self.dna_assets = _DnaAssets(self.api)
        self.settings_service = _SettingsService(self.api)
        self.settings = config.Settings()

    async def open(self) -> None:
        await self.api.open()
        try:
            values = (await self.api.call("GET", "/v1/settings"))["settings"]
            self.settings = config.Settings({k: v for k, v in values.items() if k in config.BY_NAME})
        except BaseException:
            await self.api.close()
            raise

    async def chat_settings(self, chat_id: str | None) -> dict[str, Any]:
        if chat_id is None:
            return self.settings.all()
        return (await self.api.call("GET", _chat(chat_id, "/settings")))["settings"]

    async def start_worker(self) -> None:
        """The server's own worker processes what the CLI syncs."""

    async def close(self) -> None:
        await self.api.close()
