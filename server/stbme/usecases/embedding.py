"""Vectors for memories: embed what lacks one (then index it), rebuild a chat's indexes, and switch to
another embedder in the background without a gap in recall."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Awaitable, Callable

import orjson

from .. import config
from ..embed import Embedder, EmbeddingService
from ..embed.factory import make_embedder
from ..errors import StbmeError
from ..graph.changes import ChangeSet
from ..graph.model import node_text
from ..hashing import text_hash
from ..index import ChatIndexes, VectorCache
from ..live import LiveHub
from ..store import Store
from ..store.queries import (active_node_fields, chats_with_unembedded, list_chats, node_rev, require_chat,
                             unembedded_nodes)

log = logging.getLogger("stbme")
EMBED_BATCH = 64
EMBED_ROUND = 256   # memories embedded between two looks for new messages, when embedding is deferred
Progress = Callable[[int, int], None]


class Embedding:
    def __init__(self, store: Store, settings: config.Settings, embeddings: EmbeddingService, indexes: ChatIndexes,
                 live: LiveHub):
        self.store = store
        self.settings = settings
        self.embeddings = embeddings
        self.indexes = indexes
        self.live = live
        self._lock = asyncio.Lock()    # one embedding pass at a time; the switch holds it while swapping
        self._reembed: dict | None = None
        self._deferred: set[str] = set()   # chats whose embedding waits until their extraction is done
        self.on_embedded: list[Callable[[str, int], Awaitable[None]]] = []   # (chat, vectors stored): progress

    # -- after writes ---------------------------------------------------------------------------
    async def index_changes(self, chat_id: str, node_ids) -> None:
        """After a write: update both indexes, embed what lacks a vector (and index it), unless the chat's
        embedding is deferred (its processing embeds once everything pending is extracted)."""
        await self.indexes.apply(chat_id, node_ids)
        if chat_id not in self._deferred:
            await self.embed_pending(chat_id)

    @contextlib.contextmanager
    def deferred(self, chat_id: str, defer: bool = True):
        """While inside, writes to the chat only index keywords; the caller embeds afterwards."""
        if not defer:
            yield
            return
        self._deferred.add(chat_id)
        try:
            yield
        finally:
            self._deferred.discard(chat_id)

    async def embed_pending(self, chat_id: str, progress: Callable[[int], None] | None = None,
                            limit: int | None = None) -> int:
        """Embed the chat's nodes that lack a vector from the current embedder (newest messages first; about
        `limit` at most), then index them. Returns how many were embedded."""
        async with self._lock:
            return await self._embed_chat(chat_id, self.embeddings.embedder, progress=progress, index=True,
                                          limit=limit)

    async def embed_quietly(self, chat_id: str) -> None:
        """Embed now if the embedder answers; a failure is a notice, and the node is embedded later."""
        try:
            await self.embed_pending(chat_id)
        except StbmeError as exc:
            self.live.notice("warning", f"embedding failed, will retry: {exc.message}", chat_id)

    async def _embed_chat(self, chat_id: str, embedder: Embedder, *, progress=None, index: bool,
                          limit: int | None = None) -> int:
        done = 0
        while limit is None or done < limit:
            rows = await self.store.read(lambda conn: unembedded_nodes(conn, chat_id, embedder.id, EMBED_BATCH))
            if not rows:
                return done
            nodes = [(r["id"], r["rev"], node_text(orjson.loads(r["fields"]))) for r in rows]
            vectors = await self.embeddings.embed_texts([t or " " for _, _, t in nodes], embedder)

            def save(conn):
                changed = []
                cs = ChangeSet(conn, chat_id, reason="embed")
                for (node_id, rev, text), vec in zip(nodes, vectors):
                    # Skip a node edited meanwhile: its new text gets embedded on the next pass.
                    if node_rev(conn, node_id) != rev:
                        continue
                    cs.set_embedding(node_id, vec, embedder.id, text_hash(text))
                    changed.append(node_id)
                return changed

            changed = await self.store.write(save)
            if index:
                await self.indexes.apply(chat_id, changed)
            for listener in self.on_embedded:
                await listener(chat_id, len(changed))
            done += len(changed)
            if progress:
                progress(done)
        return done

    async def backfill(self) -> None:
        """Retry embeddings that failed earlier (housekeeping)."""
        chats = await self.store.read(lambda conn: chats_with_unembedded(conn, self.embeddings.id))
        for chat_id in chats:
            if self.reembedding():
                return  # the switch embeds everything anyway
            if chat_id in self._deferred:
                continue  # its processing embeds it right after extracting
            try:
                await self.embed_pending(chat_id)
            except StbmeError as exc:
                log.warning("embedding retry for chat %r failed: %s", chat_id, exc.message)
                return

    # -- reindex --------------------------------------------------------------------------------
    async def reindex(self, chat_id: str, progress: Progress | None = None) -> dict:
        """Embed what lacks a vector, then rebuild the chat's HNSW and lexical indexes from the store."""
        await self.store.read(lambda conn: require_chat(conn, chat_id))
        started = time.monotonic()
        await self.embed_pending(chat_id)
        self.indexes.lexical.drop(chat_id)
        index = await self.indexes.vectors.rebuild(chat_id, progress=progress or (
            lambda done, total: self.live.progress("reindex", chat_id, done, total, started)))
        await self.indexes.lexical.get(chat_id)
        await self.indexes.save_dirty()
        return {"indexed": len(index), "embedder": self.embeddings.id}

    # -- embedder switch ------------------------------------------------------------------------
    async def on_settings(self, saved: dict[str, Any], previous: dict[str, Any]) -> None:
        """Settings listener. A new model (another vector space) is re-embedded in the background; a change
        that keeps the model (timeouts, retries, batch size) just replaces the client."""
        if not any(k.startswith("embed.") and saved[k] != previous[k] for k in saved):
            return
        try:
            candidate = make_embedder(self.settings.__getitem__, self.store.path.parent)
        except StbmeError as exc:
            self.live.notice("error", f"new embedding settings not usable: {exc.message}")
            return
        if candidate.id != self.embeddings.id:
            await candidate.close()
            self.start_reembed()
            return
        async with self._lock:
            old = self.embeddings.embedder
            candidate.dim = candidate.dim or old.dim
            self.embeddings.embedder = candidate
        await old.close()

    def reembedding(self) -> bool:
        return bool(self._reembed and not self._reembed["task"].done())

    def start_reembed(self) -> None:
        if self.reembedding():
            self._reembed["task"].cancel()
        try:
            embedder = make_embedder(self.settings.__getitem__, self.store.path.parent)
        except StbmeError as exc:
            self.live.notice("error", f"new embedding settings not usable: {exc.message}")
            return
        self._reembed = {"done": 0, "total": 0, "embedder": embedder.id, "error": None}
        self._reembed["task"] = asyncio.create_task(self._reembed_all(embedder), name="stbme-reembed")

    async def _reembed_all(self, embedder: Embedder) -> None:
        """Switch to another embedder without a gap: (1) embed every memory text with it into the cache,
        (2) under the embed lock, store the new vectors and build new indexes for the loaded chats,
        (3) swap. Recall keeps using the old embedder and its indexes until the swap."""
        state = self._reembed
        started = time.monotonic()
        try:
            dim = int((await embedder.embed_query("probe")).shape[0])
            texts = [node_text(orjson.loads(f)) or " " for f in await self.store.read(active_node_fields)]
            state["total"] = len(texts)
            for i in range(0, len(texts), EMBED_BATCH):
                await self.embeddings.embed_texts(texts[i:i + EMBED_BATCH], embedder)
                state["done"] = min(i + EMBED_BATCH, len(texts))
                self.live.progress("reembed", None, state["done"], state["total"], started)
            async with self._lock:
                for chat in await self.store.read(list_chats):  # cache hits: no model calls
                    await self._embed_chat(chat["chat_id"], embedder, index=False)
                current = self.indexes.vectors
                new_vectors = VectorCache(self.store, current.directory, embedder.id, dim, **current.params)
                for chat_id in current.loaded_chats():
                    await new_vectors.rebuild(chat_id)
                old = self.embeddings.embedder
                self.embeddings.embedder = embedder
                current.switch_embedder(embedder.id, dim, new_vectors)
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

    def status(self) -> dict:
        reembed = None
        if self.reembedding():
            reembed = {k: self._reembed[k] for k in ("done", "total", "embedder")}
        return {"id": self.embeddings.id, "dim": self.indexes.vectors.dim, "ready": self.embeddings.embedder.loaded,
                "reembedding": reembed,
                "last_error": (self._reembed or {}).get("error")}

    async def close(self) -> None:
        if self.reembedding():
            self._reembed["task"].cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reembed["task"]
        await self.embeddings.embedder.close()
