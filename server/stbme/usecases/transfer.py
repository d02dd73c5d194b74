"""Export a chat's memories (with its messages), and import ours or the original ST-BME extension's graph
exports."""

from __future__ import annotations

import time
from typing import Any, Callable

from .. import config
from ..errors import BadRequest, StbmeError
from ..graph.model import edge_from_row, node_from_row
from ..index import ChatIndexes
from ..interop import formats
from ..interop.restore import read_export, write_import
from ..live import LiveHub
from ..store import Store
from .embedding import Embedding

IMPORT_MODES = ("merge", "replace")
EXPORT_FORMATS = ("stbme", "st-bme")


class Transfer:
    def __init__(self, store: Store, settings: config.Settings, indexes: ChatIndexes, embedding: Embedding,
                 live: LiveHub, wake_worker: Callable[[], None]):
        self.store = store
        self.settings = settings
        self.indexes = indexes
        self.embedding = embedding
        self.live = live
        self.wake_worker = wake_worker

    async def export_chat(self, chat_id: str, fmt: str = "stbme") -> dict:
        """The chat's memories in our format, with its messages and what each memory was made from (so an
        import can tie them to the chat again: interop/restore.py), or (fmt "st-bme") as a graph the
        original extension loads."""
        if fmt not in EXPORT_FORMATS:
            raise BadRequest(f"'format' must be one of {', '.join(EXPORT_FORMATS)}", field="format")

        nodes, edges, snapshot = await self.store.read(lambda conn: read_export(conn, chat_id))
        nodes, edges = [node_from_row(r) for r in nodes], [edge_from_row(r) for r in edges]
        if fmt == "st-bme":
            return formats.to_stbme_extension(nodes, edges, snapshot.processed_upto if snapshot else -1)
        return formats.export_document(chat_id, nodes, edges, snapshot)

    async def import_chat(self, chat_id: str, doc: Any, mode: str = "merge",
                          progress: Callable[[int, int], None] | None = None) -> dict:
        if mode not in IMPORT_MODES:
            raise BadRequest("'mode' must be merge or replace", field="mode")
        graph = formats.convert(doc, chat_id)
        extract = self.settings.get("extract.enabled", chat_id)
        result = await self.store.write(lambda conn: write_import(conn, chat_id, graph, mode, extract_enabled=extract))
        if not result.nothing_changed:
            self.indexes.drop(chat_id)
        started = time.monotonic()
        total = result.nodes

        def report(done: int) -> None:
            self.live.progress("import", chat_id, done, total, started)
            if progress:
                progress(done, total)

        try:
            await self.embedding.embed_pending(chat_id, progress=report)
        except StbmeError as exc:
            self.live.notice("warning", f"imported, but embedding failed ({exc.message}); "
                             "memories are found by keywords until it works again", chat_id)
        if result.queued:
            self.wake_worker()
        return {"imported": {"nodes": result.nodes, "edges": result.edges}, "skipped": graph.skipped[:100],
                "tied_upto": result.tied_upto, "restored_messages": result.restored_messages,
                "left_for_processing": result.stale, "unchanged": result.unchanged}
