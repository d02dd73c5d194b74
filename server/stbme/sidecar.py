"""The Sidecar: the service behind the HTTP API and the CLI. It owns the store, settings, embeddings,
indexes, the job worker and the live hub, and offers one method per use case."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import orjson

from . import __version__, config
from .embed import Embedder, EmbeddingService
from .embed.local import LocalEmbedder
from .embed.openai import OpenAIEmbedder
from .errors import BadRequest, Conflict, NotFound, StbmeError
from .graph.changes import ChangeSet, ensure_chat
from .graph.model import Node, edge_from_row, edge_to_row, new_id, node_from_row, node_text
from .graph.schema import NODE_TYPES
from .hashing import text_hash
from .index import IndexManager
from .interop import formats
from .dna.service import DnaService
from .live import LiveHub
from .llm import make_llm
from .llm.relay import RelayChannel
from .llm.usage import UsageMeter
from .pipeline.batch import run_next_batch
from .pipeline.stages import default_stages
from .pipeline.lexical import LexicalIndexes
from .pipeline.recall import RecallQuery, recall
from .pipeline.rerank import rerank
from .pipeline.sync import apply_sync, parse_sync_request, undo_memories_from
from .store import Store
from .store.events import record_event
from .store.jobs import claim_next_job, enqueue_job, finish_job, prune_done_jobs, queue_depth, requeue_interrupted
from .store.migrations import schema_version
from .store.queries import message_count

log = logging.getLogger("stbme")
MAX_CHAT_ID = 512
MAX_JOB_ATTEMPTS = 3
EMBED_BATCH = 64


def check_chat_id(chat_id: Any) -> str:
    if not isinstance(chat_id, str) or not chat_id.strip():
        raise BadRequest("chat id is empty", field="chat_id")
    if len(chat_id) > MAX_CHAT_ID:
        raise BadRequest(f"chat id is longer than {MAX_CHAT_ID} characters", field="chat_id")
    if "\x00" in chat_id:
        raise BadRequest("chat id contains a NUL character", field="chat_id")
    return chat_id


def make_embedder(settings: config.Settings) -> Embedder:
    if settings["embed.provider"] == "openai":
        return OpenAIEmbedder(settings["embed.openai_url"], settings["embed.openai_model"],
                              settings["embed.openai_key"], batch_size=settings["embed.batch_size"],
                              timeout_s=settings["embed.timeout_s"], retries=settings["embed.retries"])
    return LocalEmbedder(batch_size=settings["embed.batch_size"])


def _load_settings(conn) -> tuple[dict, dict]:
    glob, chats = {}, {}
    for row in conn.execute("SELECT scope, name, value FROM settings"):
        if row["name"] not in config.BY_NAME:
            continue  # a setting removed in a newer version: ignore, keep the row
        target = glob if row["scope"] == "" else chats.setdefault(row["scope"], {})
        target[row["name"]] = orjson.loads(row["value"])
    return glob, chats


class Sidecar:
    def __init__(self, data_dir: Path, store: Store, settings: config.Settings, embedder: Embedder):
        self.data_dir = Path(data_dir)
        self.store = store
        self.settings = settings
        self.embeddings = EmbeddingService(store, embedder)
        # An HTTP embedder learns its dimension from its first answer (0 until then).
        self.indexes = IndexManager(store, self.data_dir / "indexes", embedder.id, embedder.dim,
                                    m=settings["index.m"], ef_construction=settings["index.ef_construction"],
                                    ef_search=settings["index.ef_search"])
        self.lexical = LexicalIndexes(store, self.data_dir / "indexes")
        self.live = LiveHub()
        self.started_at = time.time()
        self._wake = asyncio.Event()
        self._retry_at: dict[str, float] = {}
        self._known_chats: set[str] = set()
        self.llm_retry_at = 0.0  # monotonic time before which batches do not call a failing LLM
        self._tasks: list[asyncio.Task] = []
        self._busy: set[str] = set()
        self._reembed: dict | None = None
        self._embed_lock = asyncio.Lock()
        self._closed = False
        self.llm_usage = UsageMeter()
        self.relay = RelayChannel()
        self.relay.on_connect.append(self._resume_parked)
        try:
            self.llm = make_llm(self.settings.__getitem__, self.relay, self.llm_usage)
        except StbmeError as exc:  # stored settings that cannot work: say so, run heuristic-only
            log.warning("LLM disabled: %s", exc.message)
            self.settings.apply_global({"llm.mode": "none"})
            self.llm = make_llm(self.settings.__getitem__, self.relay, self.llm_usage)
        self.stages = default_stages(self)
        self.dna = DnaService(self)  # DNA layer: scheduler, genes/capsules, events, hub

    @classmethod
    def open(cls, data_dir: Path | str, *, embedder: Embedder | None = None,
             cli_settings: dict[str, Any] | None = None) -> "Sidecar":
        """Open the data directory (creating it), load settings, apply `--setting` values."""
        data_dir = Path(data_dir).expanduser()
        data_dir.mkdir(parents=True, exist_ok=True)
        store = Store.open(data_dir / "stbme.sqlite3")
        try:
            clean = config.validate_updates(cli_settings or {})
            if clean:
                store.write_sync(lambda conn: conn.executemany(
                    "INSERT OR REPLACE INTO settings (scope, name, value) VALUES ('', ?, ?)",
                    [(k, orjson.dumps(v).decode()) for k, v in clean.items()]))
            glob, chats = store.read_sync(_load_settings)
            settings = config.Settings(glob, chats)
            embedder = embedder or make_embedder(settings)
        except BaseException:
            store.close()
            raise
        return cls(data_dir, store, settings, embedder)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Resume interrupted jobs and start the worker and the index saver."""
        resumed = await self.store.write(requeue_interrupted)
        if resumed:
            log.info("resuming %d interrupted jobs", resumed)
        self._tasks = [asyncio.create_task(self._worker(), name="stbme-worker"),
                       asyncio.create_task(self._saver(), name="stbme-index-saver"),
                       asyncio.create_task(self._warm_up(), name="stbme-warm-up")]
        self._tasks += await self.dna.start()
        self._wake.set()

    async def _warm_up(self, chats: int = 3) -> None:
        """Load the indexes of the most recently used chats now, so the first recall after a restart
        does not wait for them (a 100k-memory chat takes seconds)."""
        recent = await self.store.read(lambda conn: [r[0] for r in conn.execute(
            "SELECT chat_id FROM chats ORDER BY updated_at DESC LIMIT ?", (chats,))])
        for chat_id in recent:
            try:
                await self.indexes.get(chat_id)
                await self.lexical.get(chat_id)
            except StbmeError as exc:
                log.warning("warming up chat %r failed: %s", chat_id, exc.message)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await self.indexes.save_dirty()
        with contextlib.suppress(Exception):
            await self.lexical.save_dirty()
        with contextlib.suppress(Exception):
            await self.dna.close()
        await self.embeddings.embedder.close()
        with contextlib.suppress(Exception):
            await self.llm.close()
        self.store.close()

    def chat_setting(self, chat_id: str | None):
        return lambda name: self.settings.get(name, chat_id)

    # -- settings -------------------------------------------------------------------------------
    async def update_settings(self, updates: Any) -> dict:
        clean = config.validate_updates(updates)
        if any(k.startswith("llm.") for k in clean):  # refuse LLM settings that cannot work, before saving
            try:
                candidate = make_llm(lambda n: clean.get(n, self.settings[n]), self.relay, UsageMeter())
            except StbmeError as exc:
                raise BadRequest(exc.message, field=exc.field) from None
            await candidate.close()
        embed_changed = any(k.startswith("embed.") and clean[k] != self.settings[k] for k in clean)
        new_settings = config.Settings(self.settings.all(reveal=True) | clean)
        await self.store.write(lambda conn: conn.executemany(
            "INSERT OR REPLACE INTO settings (scope, name, value) VALUES ('', ?, ?)",
            [(k, orjson.dumps(v).decode()) for k, v in clean.items()]))
        self.settings.apply_global(clean)
        if embed_changed:
            await self._apply_embed_settings(new_settings)
        if any(k.startswith("llm.") for k in clean):
            await self.reconfigure_llm()
        return self.settings.all()

    async def update_chat_settings(self, chat_id: str, updates: Any) -> dict:
        clean = config.validate_updates(updates, per_chat=True)

        def write(conn):
            for name, value in clean.items():
                if value is None:
                    conn.execute("DELETE FROM settings WHERE scope = ? AND name = ?", (chat_id, name))
                else:
                    conn.execute("INSERT OR REPLACE INTO settings (scope, name, value) VALUES (?,?,?)",
                                 (chat_id, name, orjson.dumps(value).decode()))

        await self.store.write(write)
        self.settings.apply_chat(chat_id, clean)
        return self.settings.all(chat_id)

    async def reconfigure_llm(self) -> None:
        """Swap the LLM client and the stage list after llm.* settings changed (the next batch uses them)."""
        old = self.llm
        self.llm = make_llm(self.settings.__getitem__, self.relay, self.llm_usage)
        self.stages = default_stages(self)
        if old is not self.llm:
            with contextlib.suppress(Exception):
                await old.close()
        self._resume_parked()

    def _resume_parked(self) -> None:
        """Jobs parked by a dead LLM (failed) run again: on a new LLM configuration, or when the extension
        (the relay) connects."""
        if self._closed:
            return
        self.llm_retry_at = 0.0  # a new configuration or a connected extension: try the LLM again now

        def requeue(conn):
            conn.execute("UPDATE jobs SET state = 'pending', attempts = 0, updated_at = ? WHERE state = 'failed'"
                         " AND kind = 'process'", (time.time(),))
            _queue_degraded_chats(conn)  # batches made without the LLM get redone

        self.store.write_nowait(requeue)
        self._wake.set()

    # -- write path -----------------------------------------------------------------------------
    async def sync(self, chat_id: str, body: Any) -> dict:
        check_chat_id(chat_id)
        req = parse_sync_request(body, max_messages=self.settings["server.max_sync_messages"],
                                 max_chars=self.settings["server.max_message_chars"])
        extract = self.settings.get("extract.enabled", chat_id)
        result = await self.store.write(lambda conn: apply_sync(conn, chat_id, req, extract_enabled=extract))
        if result.touched_nodes:
            await self._apply_index(chat_id, result.touched_nodes)
            self.live.notice("info", f"chat changed at message {result.diverged_at}: "
                             f"{result.rolled_back} memory changes undone, rebuilding", chat_id)
        if result.queued:
            self._wake.set()
        return result.to_json()

    async def _apply_index(self, chat_id: str, node_ids) -> None:
        await self.lexical.apply(chat_id, node_ids)
        await self.indexes.apply(chat_id, node_ids)

    async def _worker(self) -> None:
        while True:
            now = time.monotonic()
            waiting = {c for c, at in self._retry_at.items() if at > now}  # backing off after a failure
            try:
                job = await self.store.write(lambda conn: claim_next_job(conn, self._busy | waiting))
            except StbmeError:
                return
            if job is None:
                self._wake.clear()
                pause = min([5.0] + [at - now for c, at in self._retry_at.items() if at > now])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(pause, 0.01)):
                        await self._wake.wait()
                continue
            self._retry_at.pop(job["chat_id"], None)
            self._busy.add(job["chat_id"])
            try:
                await self._run_job(job)
                await self.store.write(lambda conn: finish_job(conn, job["id"], "done"))
                self.live.publish({"type": "job", "chat_id": job["chat_id"], "state": "done", "error": None})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # parked with its error; the chat and stored memories stay intact
                log.exception("job %s for chat %r failed", job["id"], job["chat_id"])
                message = exc.message if isinstance(exc, StbmeError) else f"{type(exc).__name__}: {exc}"
                state = "failed" if job["attempts"] >= MAX_JOB_ATTEMPTS else "pending"
                with contextlib.suppress(StbmeError):
                    await self.store.write(lambda conn: finish_job(conn, job["id"], state, message))
                self.live.publish({"type": "job", "chat_id": job["chat_id"], "state": state, "error": message})
                if state == "failed":
                    self.live.notice("error", f"memory processing failed: {message}. It will be retried on the "
                                     "next message; check the sidecar log.", job["chat_id"])
                # Back off this chat only; other chats keep being processed meanwhile.
                self._retry_at[job["chat_id"]] = time.monotonic() + min(30, 2 ** job["attempts"])
            finally:
                self._busy.discard(job["chat_id"])

    async def _run_job(self, job: dict) -> None:
        chat_id = job["chat_id"]
        if job["kind"] == "process":
            await self.process_chat(chat_id)
        elif job["kind"] == "reindex":
            await self.reindex(chat_id)
        else:
            raise StbmeError(f"unknown job kind {job['kind']!r}")

    async def process_chat(self, chat_id: str) -> int:
        """Turn every pending message of the chat into memories, batch by batch. Returns batches run."""
        batches = 0
        started = time.monotonic()
        redo_tried = False
        while True:
            ctx = await run_next_batch(self, chat_id, self.stages)
            if ctx is None:
                if not redo_tried and await self._redo_degraded(chat_id):
                    redo_tried = True  # once per run: if the LLM fails again, the retry time moves on
                    continue
                # Also finishes embeddings a failed earlier attempt left behind (raises if still failing,
                # so the job is retried with backoff, then parked with its error).
                await self.embed_pending(chat_id)
                return batches
            batches += 1
            self.live.progress("extract", chat_id, ctx.end + 1, ctx.total_messages, started)

    def llm_down(self) -> bool:
        """The LLM failed lately: batches skip it until `llm_retry_at` instead of failing again."""
        return time.monotonic() < self.llm_retry_at

    def mark_llm_down(self) -> None:
        self.llm_retry_at = time.monotonic() + self.settings["llm.redo_degraded_after_s"]

    async def _redo_degraded(self, chat_id: str) -> bool:
        """Batches made while the LLM was down are undone (exactly, from the journal) and processed
        again, now that it may answer. True if there was something to redo."""
        if self.settings.get("llm.mode", chat_id) == "none" or self.llm_down():
            return False

        def undo(conn):
            row = conn.execute("SELECT degraded_from FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
            if row is None or row["degraded_from"] is None:
                return None
            result, _ = undo_memories_from(conn, chat_id, row["degraded_from"], reason="redo without LLM")
            return row["degraded_from"], result.touched_nodes

        undone = await self.store.write(undo)
        if undone is None:
            return False
        start, touched = undone
        await self._apply_index(chat_id, touched)
        self.live.notice("info", f"the memory LLM answers again: redoing memories from message {start}", chat_id)
        return True

    async def _wake_degraded(self) -> None:
        """When the LLM's retry time has come, queue the chats with batches made without it."""
        if self.llm_down() or self.settings["llm.mode"] == "none":
            return

        if await self.store.write(_queue_degraded_chats):
            self._wake.set()

    async def index_changes(self, chat_id: str, node_ids) -> None:
        """After a write: update the lexical index, embed what lacks a vector, update the HNSW index."""
        await self._apply_index(chat_id, node_ids)
        await self.embed_pending(chat_id)

    async def embed_pending(self, chat_id: str, progress=None) -> int:
        """Embed the chat's nodes that lack a vector from the current embedder, then index them."""
        async with self._embed_lock:
            return await self._embed_chat(chat_id, self.embeddings.embedder, progress=progress, index=True)

    async def _embed_chat(self, chat_id: str, embedder: Embedder, *, progress=None, index: bool) -> int:
        done = 0
        while True:
            rows = await self.store.read(lambda conn: conn.execute(
                "SELECT id, fields, rev FROM nodes WHERE chat_id = ? AND archived = 0 AND"
                " (embedding IS NULL OR embedder IS NOT ?) LIMIT ?",
                (chat_id, embedder.id, EMBED_BATCH)).fetchall())
            if not rows:
                return done
            nodes = [(r["id"], r["rev"], node_text(orjson.loads(r["fields"]))) for r in rows]
            vectors = await self.embeddings.embed_texts([t or " " for _, _, t in nodes], embedder)

            def save(conn):
                changed = []
                cs = ChangeSet(conn, chat_id, reason="embed")
                for (node_id, rev, text), vec in zip(nodes, vectors):
                    # Skip a node edited meanwhile: its new text gets embedded on the next pass.
                    cur = conn.execute("SELECT rev FROM nodes WHERE id = ?", (node_id,)).fetchone()
                    if cur is None or cur[0] != rev:
                        continue
                    cs.set_embedding(node_id, vec, embedder.id, text_hash(text))
                    changed.append(node_id)
                return changed

            changed = await self.store.write(save)
            if index:
                await self.indexes.apply(chat_id, changed)
            done += len(changed)
            if progress:
                progress(done)

    async def _saver(self) -> None:
        """Housekeeping: save changed indexes, prune old jobs, retry embeddings that failed."""
        ticks = 0
        while True:
            await asyncio.sleep(5)
            ticks += 1
            try:
                await self.indexes.save_dirty(older_than_s=self.settings["index.save_every_s"])
                if ticks % max(1, int(self.settings["index.save_every_s"] // 5)) == 0:
                    await self.lexical.save_dirty()
                await self._wake_degraded()
                if ticks % 12 == 1:
                    await self.store.write(prune_done_jobs)
                    await self._backfill_embeddings()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("saving indexes failed")

    async def _backfill_embeddings(self) -> None:
        chats = await self.store.read(lambda conn: [r[0] for r in conn.execute(
            "SELECT DISTINCT chat_id FROM nodes WHERE archived = 0 AND (embedding IS NULL OR embedder IS NOT ?)",
            (self.embeddings.id,))])
        for chat_id in chats:
            if self._reembed and not self._reembed["task"].done():
                return  # the switch embeds everything anyway
            try:
                await self.embed_pending(chat_id)
            except StbmeError as exc:
                log.warning("embedding retry for chat %r failed: %s", chat_id, exc.message)
                return

    # -- read path ------------------------------------------------------------------------------
    async def recall(self, chat_id: str, body: Any) -> dict:
        check_chat_id(chat_id)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object with 'query'")
        query = body.get("query", "")
        if not isinstance(query, str):
            raise BadRequest("'query' must be a string", field="query")
        recent = body.get("recent") or []
        if not isinstance(recent, list) or not all(isinstance(m, dict) for m in recent):
            raise BadRequest("'recent' must be a list of {role, name, text}", field="recent")
        setting = self.chat_setting(chat_id)
        budget = body.get("budget_tokens", setting("recall.budget_tokens"))
        budget = config.setting("recall.budget_tokens").validate(budget) if "budget_tokens" in body else budget
        limit = body.get("max_memories", setting("recall.max_memories"))
        limit = config.setting("recall.max_memories").validate(limit) if "max_memories" in body else limit
        if len(query) > self.settings["server.max_message_chars"]:
            raise BadRequest("'query' is too long", field="query")
        if chat_id not in self._known_chats and await self.store.read(lambda conn: conn.execute(
                "SELECT 1 FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()):
            self._known_chats.add(chat_id)  # skips a reader round trip on every later recall
        if chat_id not in self._known_chats or not setting("recall.enabled"):
            return {"text": "", "tokens": 0, "memories": [], "took_ms": 0.0, "language": None}
        reranker = None
        if setting("recall.rerank") and self.settings["llm.mode"] != "none":
            async def llm_rerank(result, text, recent_texts):
                return await rerank(self.llm, result, query=text, recent=recent_texts, max_memories=limit,
                                    setting=setting)
            reranker = llm_rerank
        return await recall(store=self.store, embeddings=self.embeddings, indexes=self.indexes,
                            lexical=self.lexical, chat_id=chat_id,
                            q=RecallQuery(query, recent, budget, limit), settings=setting, reranker=reranker)

    # -- chats ----------------------------------------------------------------------------------
    async def list_chats(self) -> list[dict]:
        def read(conn):
            return [dict(r) for r in conn.execute(
                "SELECT c.chat_id, c.processed_upto, c.updated_at,"
                " (SELECT coalesce(max(idx) + 1, 0) FROM messages m WHERE m.chat_id = c.chat_id) AS messages,"
                " (SELECT count(*) FROM nodes n WHERE n.chat_id = c.chat_id AND n.archived = 0) AS nodes"
                " FROM chats c ORDER BY c.updated_at DESC")]
        return await self.store.read(read)

    async def chat_status(self, chat_id: str) -> dict:
        check_chat_id(chat_id)

        def read(conn):
            chat = conn.execute("SELECT * FROM chats WHERE chat_id = ?", (chat_id,)).fetchone()
            if chat is None:
                raise NotFound(f"no chat {chat_id!r} in the sidecar yet (sync it first)", field="chat_id")
            jobs = dict(conn.execute("SELECT state, count(*) FROM jobs WHERE chat_id = ? AND state IN"
                                     " ('pending','running','failed') GROUP BY state", (chat_id,)).fetchall())
            last_error = conn.execute("SELECT error FROM jobs WHERE chat_id = ? AND error IS NOT NULL"
                                      " ORDER BY id DESC LIMIT 1", (chat_id,)).fetchone()
            return {
                "chat_id": chat_id,
                "messages": message_count(conn, chat_id),
                "nodes": conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0",
                                      (chat_id,)).fetchone()[0],
                "unembedded": conn.execute("SELECT count(*) FROM nodes WHERE chat_id = ? AND archived = 0 AND"
                                           " (embedding IS NULL OR embedder IS NOT ?)",
                                           (chat_id, self.embeddings.id)).fetchone()[0],
                "processed_upto": chat["processed_upto"],
                "degraded_from": chat["degraded_from"],
                "jobs": {"pending": jobs.get("pending", 0) + jobs.get("running", 0),
                         "failed": jobs.get("failed", 0), "last_error": last_error[0] if last_error else None},
            }

        status = await self.store.read(read)
        index = self.indexes.loaded(chat_id)
        status["index"] = {"count": len(index) if index else None, "embedder": self.embeddings.id,
                           "loaded": index is not None}
        return status

    async def delete_chat(self, chat_id: str) -> dict:
        check_chat_id(chat_id)

        def delete(conn):
            counts = {}
            for table in ("messages", "nodes", "edges", "journal", "jobs", "mentions", "settings", "events",
                          "repair_loops", "dna_state"):
                column = "scope" if table == "settings" else "chat_id"
                counts[table] = conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (chat_id,)).rowcount
            counts["chats"] = conn.execute("DELETE FROM chats WHERE chat_id = ?", (chat_id,)).rowcount
            return counts

        counts = await self.store.write(delete)
        if not counts["chats"]:
            raise NotFound(f"no chat {chat_id!r}", field="chat_id")
        self._known_chats.discard(chat_id)
        self.indexes.drop(chat_id)
        self.lexical.drop(chat_id)
        self.settings.forget_chat(chat_id)
        return {"deleted": {"messages": counts["messages"], "nodes": counts["nodes"], "edges": counts["edges"]}}

    # -- memories -------------------------------------------------------------------------------
    async def list_nodes(self, chat_id: str, *, offset: int = 0, limit: int = 50, type_: str | None = None,
                         q: str | None = None, archived: bool | None = False) -> dict:
        check_chat_id(chat_id)
        where, args = ["chat_id = ?"], [chat_id]
        if type_:
            where.append("type = ?")
            args.append(type_)
        if archived is not None:
            where.append("archived = ?")
            args.append(int(archived))
        if q:
            where.append("fields LIKE ? ESCAPE '\\'")
            args.append("%" + q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        sql_where = " AND ".join(where)

        def read(conn):
            total = conn.execute(f"SELECT count(*) FROM nodes WHERE {sql_where}", args).fetchone()[0]
            rows = conn.execute(f"SELECT * FROM nodes WHERE {sql_where} ORDER BY pinned DESC,"
                                f" coalesce(seq_to, -1) DESC, created_at DESC LIMIT ? OFFSET ?",
                                [*args, limit, offset]).fetchall()
            return total, [node_from_row(r).to_json() for r in rows]

        total, nodes = await self.store.read(read)
        return {"nodes": nodes, "total": total, "offset": offset, "limit": limit}

    async def get_node(self, chat_id: str, node_id: str) -> dict:
        row = await self.store.read(lambda conn: conn.execute(
            "SELECT * FROM nodes WHERE id = ? AND chat_id = ?", (node_id, chat_id)).fetchone())
        if row is None:
            raise NotFound(f"no memory {node_id!r} in chat {chat_id!r}", field="id")
        return node_from_row(row).to_json()

    async def create_node(self, chat_id: str, body: Any) -> dict:
        """A manual "remember": journaled as manual, so chat rollbacks never undo it."""
        check_chat_id(chat_id)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object with 'type' and 'fields' (or 'text')")
        if "fields" not in body and isinstance(body.get("text"), str):
            body = {**body, "type": body.get("type", "event"), "fields": {"summary": body["text"]}}
        type_ = body.get("type")
        if type_ not in NODE_TYPES:
            raise BadRequest(f"'type' must be one of {', '.join(NODE_TYPES)}", field="type")
        fields = _check_fields(body.get("fields"), type_, self.settings["server.max_message_chars"])
        importance = _importance(body.get("importance", 6.0))
        node = Node(id=new_id("n"), chat_id=chat_id, type=type_, fields=fields, importance=importance,
                    pinned=bool(body.get("pinned")), locked=bool(body.get("locked")), source="manual",
                    tags=_tags(body.get("tags")))

        def write(conn):
            cs = ChangeSet(conn, chat_id, reason="manual")
            cs.insert_node(node)
            record_event(conn, chat_id, "remember", node_id=node.id, type=type_)
            return cs.touched_nodes

        touched = await self.store.write(write)
        await self.lexical.apply(chat_id, touched)
        await self._embed_quietly(chat_id)
        return await self.get_node(chat_id, node.id)

    async def _embed_quietly(self, chat_id: str) -> None:
        # An unreachable embedding API must not fail a manual edit: the node is kept and embedded later.
        try:
            await self.embed_pending(chat_id)
        except StbmeError as exc:
            self.live.notice("warning", f"embedding failed, will retry: {exc.message}", chat_id)

    async def edit_node(self, chat_id: str, node_id: str, body: Any) -> dict:
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        current = await self.get_node(chat_id, node_id)
        if current["locked"] and not body.get("unlock"):
            raise Conflict("this memory is locked; unlock it first (or send \"unlock\": true)", field="locked")
        changes: dict[str, Any] = {}
        if "fields" in body:
            changes["fields"] = _check_fields(body["fields"], current["type"],
                                              self.settings["server.max_message_chars"], partial=current["fields"])
            changes["embedding"] = None
        if "importance" in body:
            changes["importance"] = _importance(body["importance"])
        if "tags" in body:
            changes["tags"] = _tags(body["tags"])
        if body.get("unlock"):
            changes["locked"] = False
        unknown = set(body) - {"fields", "importance", "tags", "unlock"}
        if unknown:
            raise BadRequest(f"unknown key {sorted(unknown)[0]!r}", field=sorted(unknown)[0])
        return await self._change_node(chat_id, node_id, "edit", changes)

    async def node_action(self, chat_id: str, node_id: str, action: str) -> dict:
        flags = {"pin": {"pinned": True}, "unpin": {"pinned": False}, "lock": {"locked": True},
                 "unlock": {"locked": False}, "archive": {"archived": True}, "restore": {"archived": False}}
        if action not in flags:
            raise NotFound(f"unknown action {action!r}; use one of {', '.join(flags)}", field="action")
        await self.get_node(chat_id, node_id)
        return await self._change_node(chat_id, node_id, action, flags[action])

    async def _change_node(self, chat_id: str, node_id: str, reason: str, changes: dict) -> dict:
        def write(conn):
            cs = ChangeSet(conn, chat_id, reason=reason)
            cs.update_node(node_id, **changes)
            record_event(conn, chat_id, reason, node_id=node_id)
            return cs.touched_nodes

        touched = await self.store.write(write)
        await self._apply_index(chat_id, touched)
        if "embedding" in changes or changes.get("archived") is False:
            await self._embed_quietly(chat_id)
        return await self.get_node(chat_id, node_id)

    async def list_edges(self, chat_id: str, node_id: str | None = None) -> list[dict]:
        rows = await self.store.read(lambda conn: conn.execute(
            "SELECT * FROM edges WHERE chat_id = ? AND (? IS NULL OR from_id = ? OR to_id = ?)"
            " ORDER BY created_at LIMIT 5000", (chat_id, node_id, node_id, node_id)).fetchall())
        return [edge_from_row(r).to_json() for r in rows]

    # -- export / import ------------------------------------------------------------------------
    async def export_chat(self, chat_id: str) -> dict:
        check_chat_id(chat_id)

        def read(conn):
            nodes = [node_from_row(r) for r in conn.execute(
                "SELECT * FROM nodes WHERE chat_id = ? ORDER BY rowid", (chat_id,))]
            edges = [edge_from_row(r) for r in conn.execute(
                "SELECT * FROM edges WHERE chat_id = ? ORDER BY rowid", (chat_id,))]
            return nodes, edges

        nodes, edges = await self.store.read(read)
        return formats.export_document(chat_id, nodes, edges)

    async def import_chat(self, chat_id: str, doc: Any, mode: str = "merge", progress=None) -> dict:
        check_chat_id(chat_id)
        if mode not in ("merge", "replace"):
            raise BadRequest("'mode' must be merge or replace", field="mode")
        graph = formats.convert(doc, chat_id)

        def write(conn):
            ensure_chat(conn, chat_id)
            if mode == "replace":
                for table in ("nodes", "edges", "journal", "mentions", "repair_loops"):
                    conn.execute(f"DELETE FROM {table} WHERE chat_id = ?", (chat_id,))
                length = message_count(conn, chat_id)
                upto = length - 1 if graph.processed_upto is None else min(graph.processed_upto, length - 1)
                conn.execute("UPDATE chats SET processed_upto = ? WHERE chat_id = ?", (upto, chat_id))
            cs = ChangeSet(conn, chat_id, reason="import")
            for node in graph.nodes:
                cs.insert_node(node)
            for edge in graph.edges:
                row = edge_to_row(edge)
                conn.execute(f"INSERT INTO edges ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             list(row.values()))
            record_event(conn, chat_id, "import", mode=mode, nodes=len(graph.nodes), edges=len(graph.edges))

        await self.store.write(write)
        self.indexes.drop(chat_id)
        self.lexical.drop(chat_id)
        started = time.monotonic()
        total = len(graph.nodes)
        try:
            await self.embed_pending(chat_id, progress=lambda done: (
                self.live.progress("import", chat_id, done, total, started), progress and progress(done, total)))
        except StbmeError as exc:
            self.live.notice("warning", f"imported, but embedding failed ({exc.message}); "
                             "memories are found by keywords until it works again", chat_id)
        return {"imported": {"nodes": len(graph.nodes), "edges": len(graph.edges)}, "skipped": graph.skipped[:100]}

    # -- index ----------------------------------------------------------------------------------
    async def reindex(self, chat_id: str, progress=None) -> dict:
        """Embed what lacks a vector, then rebuild the chat's HNSW and lexical indexes from the store."""
        check_chat_id(chat_id)
        started = time.monotonic()
        await self.embed_pending(chat_id)
        self.lexical.drop(chat_id)
        index = await self.indexes.build(chat_id, progress=progress or (
            lambda done, total: self.live.progress("reindex", chat_id, done, total, started)))
        await self.lexical.get(chat_id)
        await self.indexes.save_dirty()
        return {"indexed": len(index), "embedder": self.embeddings.id}

    # -- embedder switch ------------------------------------------------------------------------
    async def _apply_embed_settings(self, settings: config.Settings) -> None:
        """A new model (another vector space) is re-embedded in the background; a change that keeps the
        model (timeouts, retries, batch size) just replaces the client."""
        try:
            candidate = make_embedder(settings)
        except StbmeError as exc:
            self.live.notice("error", f"new embedding settings not usable: {exc.message}")
            return
        if candidate.id != self.embeddings.id:
            await candidate.close()
            self.start_reembed()
            return
        async with self._embed_lock:
            old = self.embeddings.embedder
            candidate.dim = candidate.dim or old.dim
            self.embeddings.embedder = candidate
        await old.close()

    def wake_worker(self) -> None:
        """Run queued jobs now instead of at the worker's next poll."""
        self._wake.set()

    def start_reembed(self) -> None:
        if self._reembed and not self._reembed["task"].done():
            self._reembed["task"].cancel()
        try:
            embedder = make_embedder(self.settings)
        except StbmeError as exc:
            self.live.notice("error", f"new embedding settings not usable: {exc.message}")
            return
        self._reembed = {"done": 0, "total": 0, "embedder": embedder.id, "error": None}
        self._reembed["task"] = asyncio.create_task(self._reembed_all(embedder), name="stbme-reembed")
        self._tasks.append(self._reembed["task"])

    async def _reembed_all(self, embedder: Embedder) -> None:
        """Switch to another embedder without a gap: (1) embed every memory text with it into the cache,
        (2) under the embed lock, store the new vectors and build new indexes for the loaded chats,
        (3) swap. Recall keeps using the old embedder and its indexes until the swap."""
        state = self._reembed
        started = time.monotonic()
        try:
            dim = int((await embedder.embed_query("probe")).shape[0])
            texts = await self.store.read(lambda conn: [
                node_text(orjson.loads(r["fields"])) or " "
                for r in conn.execute("SELECT fields FROM nodes WHERE archived = 0")])
            state["total"] = len(texts)
            for i in range(0, len(texts), EMBED_BATCH):
                await self.embeddings.embed_texts(texts[i:i + EMBED_BATCH], embedder)
                state["done"] = min(i + EMBED_BATCH, len(texts))
                self.live.progress("reembed", None, state["done"], state["total"], started)
            async with self._embed_lock:
                chats = [c["chat_id"] for c in await self.list_chats()]
                for chat_id in chats:  # cache hits: no model calls
                    await self._embed_chat(chat_id, embedder, index=False)
                new_indexes = IndexManager(self.store, self.indexes.directory, embedder.id, dim,
                                           **self.indexes.params)
                for chat_id in list(self.indexes.loaded_chats()):
                    await new_indexes.build(chat_id)
                old = self.embeddings.embedder
                self.embeddings.embedder = embedder
                self.indexes.switch_embedder(embedder.id, dim, new_indexes)
            await old.close()
            self.live.notice("info", f"re-embedding finished: now using {embedder.id}")
        except asyncio.CancelledError:
            await embedder.close()
            raise
        except Exception as exc:
            state["error"] = exc.message if isinstance(exc, StbmeError) else str(exc)
            log.warning("re-embedding failed: %s", state["error"])
            await embedder.close()
            self.live.notice("error", f"re-embedding with the new model failed: {state['error']}. "
                             "Still using the previous embedder; fix the embedding settings and save again.")

    # -- health ---------------------------------------------------------------------------------
    async def health(self) -> dict:
        def read(conn):
            return {
                "chats": conn.execute("SELECT count(*) FROM chats").fetchone()[0],
                "nodes": conn.execute("SELECT count(*) FROM nodes WHERE archived = 0").fetchone()[0],
                "schema_version": schema_version(conn),
                "queue": queue_depth(conn),
            }

        info = await self.store.read(read)
        reembed = None
        if self._reembed and not self._reembed["task"].done():
            reembed = {k: self._reembed[k] for k in ("done", "total", "embedder")}
        return {
            "version": __version__,
            "embedder": {"id": self.embeddings.id, "dim": self.indexes.dim, "ready": True, "reembedding": reembed,
                         "last_error": (self._reembed or {}).get("error")},
            "store": {"path": str(self.store.path), "chats": info["chats"], "nodes": info["nodes"],
                      "schema_version": info["schema_version"]},
            "queue": info["queue"],
            "live_clients": self.live.clients,
            "llm": {"mode": self.settings["llm.mode"], "client": self.llm.id, "relay_clients": self.relay.connected,
                    "usage": self.llm_usage.snapshot()},
            "uptime_s": round(time.time() - self.started_at, 1),
        }


def _queue_degraded_chats(conn) -> list[str]:
    """Queue processing for chats with batches made while the LLM was down (unless already queued)."""
    chats = [r[0] for r in conn.execute(
        "SELECT chat_id FROM chats WHERE degraded_from IS NOT NULL AND chat_id NOT IN"
        " (SELECT chat_id FROM jobs WHERE state = 'pending' AND kind = 'process')")]
    for chat in chats:
        enqueue_job(conn, chat, "process")
    return chats


def _check_fields(fields: Any, type_: str, max_chars: int, partial: dict | None = None) -> dict:
    if not isinstance(fields, dict) or not fields:
        raise BadRequest("'fields' must be a non-empty object", field="fields")
    merged = dict(partial or {})
    for key, value in fields.items():
        if not isinstance(key, str) or not key or len(key) > 64:
            raise BadRequest("field names must be 1-64 characters", field="fields")
        if value is None:
            merged.pop(key, None)
            continue
        if not isinstance(value, (str, int, float, list)):
            raise BadRequest(f"field {key!r} must be text, a number or a list", field=f"fields.{key}")
        if len(str(value)) > max_chars:
            raise BadRequest(f"field {key!r} is too long", field=f"fields.{key}")
        merged[key] = value
    spec = NODE_TYPES[type_]
    missing = [r for r in spec.required if not str(merged.get(r) or "").strip()]
    if missing:
        raise BadRequest(f"a {type_} memory needs the field {missing[0]!r}", field=f"fields.{missing[0]}")
    return merged


def _importance(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 10:
        raise BadRequest("'importance' must be a number from 0 to 10", field="importance")
    return float(value)


def _tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise BadRequest("'tags' must be a list of strings", field="tags")
    return [t[:64] for t in value][:32]
