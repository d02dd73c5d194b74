"""Export a chat's memories, and import ours or the original ST-BME extension's graph exports."""

from __future__ import annotations

import time
from typing import Any, Callable

from ..errors import BadRequest, StbmeError
from ..graph.changes import ChangeSet, ensure_chat
from ..graph.model import edge_from_row, node_from_row
from ..index import ChatIndexes
from ..interop import formats
from ..live import LiveHub
from ..store import Store
from ..store.events import record_event
from ..store.queries import chat_graph, chat_row, clear_chat_memories, message_count
from .embedding import Embedding

IMPORT_MODES = ("merge", "replace")
EXPORT_FORMATS = ("stbme", "st-bme")


class Transfer:
    def __init__(self, store: Store, indexes: ChatIndexes, embedding: Embedding, live: LiveHub):
        self.store = store
        self.indexes = indexes
        self.embedding = embedding
        self.live = live

    async def export_chat(self, chat_id: str, fmt: str = "stbme") -> dict:
        """The chat's memories in our format, or (fmt "st-bme") as a graph the original extension loads."""
        if fmt not in EXPORT_FORMATS:
            raise BadRequest(f"'format' must be one of {', '.join(EXPORT_FORMATS)}", field="format")

        def read(conn):
            chat = chat_row(conn, chat_id)
            return chat_graph(conn, chat_id), chat["processed_upto"] if chat else -1

        (nodes, edges), upto = await self.store.read(read)
        nodes, edges = [node_from_row(r) for r in nodes], [edge_from_row(r) for r in edges]
        if fmt == "st-bme":
            return formats.to_stbme_extension(nodes, edges, upto)
        return formats.export_document(chat_id, nodes, edges)

    async def import_chat(self, chat_id: str, doc: Any, mode: str = "merge",
                          progress: Callable[[int, int], None] | None = None) -> dict:
        if mode not in IMPORT_MODES:
            raise BadRequest("'mode' must be merge or replace", field="mode")
        graph = formats.convert(doc, chat_id)

        def write(conn):
            ensure_chat(conn, chat_id)
            if mode == "replace":
                length = message_count(conn, chat_id)
                upto = length - 1 if graph.processed_upto is None else min(graph.processed_upto, length - 1)
                clear_chat_memories(conn, chat_id, upto)
            cs = ChangeSet(conn, chat_id, reason="import")
            for node in graph.nodes:
                cs.insert_node(node)
            for edge in graph.edges:
                cs.insert_edge(edge)
            record_event(conn, chat_id, "import", mode=mode, nodes=len(graph.nodes), edges=len(graph.edges))

        await self.store.write(write)
        self.indexes.drop(chat_id)
        started = time.monotonic()
        total = len(graph.nodes)

        def report(done: int) -> None:
            self.live.progress("import", chat_id, done, total, started)
            if progress:
                progress(done, total)

        try:
            await self.embedding.embed_pending(chat_id, progress=report)
        except StbmeError as exc:
            self.live.notice("warning", f"imported, but embedding failed ({exc.message}); "
                             "memories are found by keywords until it works again", chat_id)
        return {"imported": {"nodes": len(graph.nodes), "edges": len(graph.edges)}, "skipped": graph.skipped[:100]}
