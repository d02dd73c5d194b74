"""Trivium: an extension's vector collections with payloads and links, searched by HNSW + BM25.

Items live in namespaces (ST-BME uses one per chat, `st-bme::<chatId>`) inside a database (default
`st_bme_vectors`); vectors come from the client, of whatever dimension its embedding model gives, learned
per namespace. Search has no namespace in ST-BME's protocol, so it covers the whole database and skips
vectors of another dimension. SQLite is the truth (trivium_store); the indexes are caches (trivium_index).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from ..errors import BadRequest, NotFound
from . import wire
from . import trivium_store as ts
from .databases import StoreSet
from .trivium_index import TriviumCaches

DEFAULT_DATABASE = "st_bme_vectors"
MAX_DATABASES = 8
MAX_ITEMS = 2000          # ST-BME sends at most 2000 per bulk call (authorityVectorSyncChunkSize)
MAX_LINKS = 10000
MAX_DIM = 8192
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_TOP_K = 1000
MAX_PAGE = 1000
MAX_DEPTH = 3
MAX_NEIGHBOURS = 500
MAX_QUERY_CHARS = 200_000  # a query text, like the sidecar's own recall (server.max_message_chars' default)
RRF_K = 60                # reciprocal-rank fusion, as the sidecar's own recall
DEFAULT_ALPHA = 0.5       # weight of the vector ranking against the text ranking
TEXT_FIELDS = ("text", "title", "name", "summaryPreview")
_NUMBER_TYPES = frozenset({int, float})


def _ref(value: Any, field: str, default_namespace: str | None = None) -> tuple[str, str]:
    if not isinstance(value, dict):
        raise BadRequest(f"'{field}' must be an object {{externalId, namespace}}", field=field)
    external_id = wire.text(value.get("externalId", value.get("id")), f"{field}.externalId")
    namespace = wire.text(value.get("namespace") or default_namespace, f"{field}.namespace")
    return namespace, external_id


def _vector(value: Any, field: str, dim: int | None = None) -> np.ndarray:
    if not isinstance(value, list) or not value:
        raise BadRequest(f"'{field}' must be a non-empty array of numbers", field=field)
    if len(value) > MAX_DIM:
        raise BadRequest(f"'{field}' has {len(value)} dimensions; at most {MAX_DIM}", field=field)
    # numpy would read "1" and true as numbers; JSON numbers arrive as int or float (bool is an int subclass,
    # so the check is by exact type). map/set run in C: a 2000-item upsert stays cheap.
    if not set(map(type, value)) <= _NUMBER_TYPES:
        raise BadRequest(f"'{field}' must contain numbers only (not strings, booleans or null)", field=field)
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(f"'{field}' must contain numbers only", field=field) from None
    if vector.ndim != 1 or not np.isfinite(vector).all():
        raise BadRequest(f"'{field}' must contain finite numbers only", field=field)
    if not np.any(vector):
        raise BadRequest(f"'{field}' is all zeros (it has no direction to compare)", field=field)
    if dim is not None and len(vector) != dim:
        raise BadRequest(f"'{field}' has {len(vector)} dimensions but 'dim' is {dim}", field=field)
    return vector


def _query_text(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"'{field}' must be a string", field=field)
    if len(value) > MAX_QUERY_CHARS:
        raise BadRequest(f"'{field}' has {len(value)} characters; at most {MAX_QUERY_CHARS}", field=field)
    return value


def _text_of(payload: dict) -> str:
    parts = [payload.get(k) for k in TEXT_FIELDS]
    return "\n".join(dict.fromkeys(p.strip() for p in parts if isinstance(p, str) and p.strip()))[:20000]


def _hit(row, **scores) -> dict:
    return {"id": row["id"], "externalId": row["external_id"], "nodeId": row["external_id"],
            "namespace": row["namespace"], **scores, "payload": orjson.loads(row["payload"])}


def _rows_with_payloads(conn, ids: list[int]) -> dict[int, dict]:
    """Items by id as hits without scores, their payloads decoded (on the reader thread: up to a thousand
    payloads of 64 KiB)."""
    return {r["id"]: _hit(r) for r in ts.rows_by_ids(conn, ids)}


def _scored(hit: dict, **scores) -> dict:
    """A hit from _rows_with_payloads with its scores, in the answer's key order."""
    payload = hit["payload"]
    return {**{k: v for k, v in hit.items() if k != "payload"}, **scores, "payload": payload}


def _matches(payload: dict, wanted: dict) -> bool:
    """A payload filter: every key equal (a list of values means any of them)."""
    for key, value in wanted.items():
        have = payload.get(key)
        if isinstance(value, list) and not isinstance(have, list):
            if have not in value:
                return False
        elif have != value:
            return False
    return True


class TriviumDatabase:
    def __init__(self, store, index_base: Path):
        self.store = store
        self.caches = TriviumCaches(store, index_base)
        self.write_lock = asyncio.Lock()  # SQLite write + cache update, in commit order

    async def upsert(self, body: dict) -> dict:
        # Checking 2000 items of long vectors and payloads takes a while: off the event loop.
        items = await asyncio.to_thread(self._parse_items, body)

        def write(conn):
            dims: dict[str, int] = {}
            for i, (namespace, _, vector, _, _) in enumerate(items):
                if namespace not in dims:
                    dims[namespace] = ts.namespace_dim(conn, namespace) or len(vector)
                if len(vector) != dims[namespace]:
                    raise BadRequest(f"namespace {namespace!r} holds {dims[namespace]}-d vectors but an item has "
                                     f"{len(vector)} (purge the namespace to change the embedding model)",
                                     field="items.vector")
            return ts.upsert_items(conn, items)

        async with self.write_lock:
            written = await self.store.write(write)
            await self.caches.upserted(written, [it[2] for it in items], [it[4] for it in items])
        return {"successCount": len(written), "upserted": len(written), "failedCount": 0,
                "items": [{"id": item_id, "externalId": it[1], "namespace": it[0]}
                          for (item_id, _, _), it in zip(written, items)]}

    @staticmethod
    def _parse_items(body: dict) -> list[ts.NewItem]:
        """The items of a bulk-upsert, checked (a 400 naming the first bad field); a repeated id: the last."""
        dim = wire.integer(body["dim"], "dim", lo=1, hi=MAX_DIM) if body.get("dim") is not None else None
        raw = wire.array(body.get("items"), "items", max_items=MAX_ITEMS)
        latest: dict[tuple[str, str], ts.NewItem] = {}
        for i, item in enumerate(raw):  # a repeated id: the last one wins
            if not isinstance(item, dict):
                raise BadRequest(f"'items[{i}]' must be an object", field=f"items[{i}]")
            namespace, external_id = _ref(item, f"items[{i}]", body.get("namespace"))
            vector = _vector(item.get("vector"), f"items[{i}].vector", dim)
            payload = wire.optional_object(item.get("payload"), f"items[{i}].payload")
            if len(orjson.dumps(payload)) > MAX_PAYLOAD_BYTES:
                raise BadRequest(f"'items[{i}].payload' is larger than {MAX_PAYLOAD_BYTES} bytes",
                                 field=f"items[{i}].payload")
            latest.pop((namespace, external_id), None)
            latest[(namespace, external_id)] = (namespace, external_id, vector, payload, _text_of(payload))
        return list(latest.values())

    async def delete(self, body: dict) -> dict:
        raw = wire.array(body.get("items"), "items", max_items=MAX_ITEMS * 2)
        refs = [_ref(item, f"items[{i}]", body.get("namespace")) for i, item in enumerate(raw)]

        def write(conn):
            found = ts.find_ids(conn, refs)
            ts.delete_items(conn, list(found.values()))
            return found

        async with self.write_lock:
            found = await self.store.write(write)
            await self.caches.deleted(list(found.values()))
        # ST-BME lists every id twice: deletes are idempotent and counted once.
        return {"successCount": len(found), "deleted": len(found), "missing": len(set(refs)) - len(found)}

    async def link(self, body: dict) -> dict:
        raw = wire.array(body.get("items", body.get("links")), "items", max_items=MAX_LINKS)
        wanted = {}
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                raise BadRequest(f"'items[{i}]' must be an object {{src, dst, label, weight}}", field=f"items[{i}]")
            src = _ref(item.get("src"), f"items[{i}].src", body.get("namespace"))
            dst = _ref(item.get("dst"), f"items[{i}].dst", body.get("namespace"))
            label = wire.text(item.get("label"), f"items[{i}].label", max_chars=128, default="related")
            wanted[(src, dst, label)] = wire.number(item.get("weight"), f"items[{i}].weight", default=1.0)

        def write(conn):
            ids = ts.find_ids(conn, [r for src, dst, _ in wanted for r in (src, dst)])
            links = [(ids[s], ids[d], label, w) for (s, d, label), w in wanted.items() if s in ids and d in ids]
            ts.upsert_links(conn, links)
            missing = [{"externalId": r[1], "namespace": r[0]}
                       for (s, d, _) in wanted for r in (s, d) if r not in ids]
            return len(links), missing

        linked, missing = await self.store.write(write)
        # Links need both ends stored; an edge to a node without a vector (archived) is skipped and said so.
        return {"linked": linked, "successCount": linked, "skipped": len(wanted) - linked, "missing": missing[:50]}

    async def search(self, body: dict, hybrid: bool) -> dict:
        vector = _vector(body.get("vector", body.get("queryVector")), "vector")
        top_k = wire.integer(body.get("topK"), "topK", lo=1, hi=MAX_TOP_K, default=10)
        text = _query_text(body.get("queryText", body.get("text")), "queryText") if hybrid else None
        alpha = wire.number(body.get("hybridAlpha"), "hybridAlpha", default=DEFAULT_ALPHA)
        if not 0 <= alpha <= 1:
            raise BadRequest("'hybridAlpha' must be from 0 to 1", field="hybridAlpha")
        min_score = wire.number(body.get("minScore"), "minScore", default=float("-inf"))
        wanted = wire.optional_object(body.get("payloadFilter"), "payloadFilter")
        namespace = body.get("namespace")
        await self.caches.ready()
        # Filters are applied after ranking: look deeper when there are any.
        pool = min(MAX_TOP_K * 4, top_k * (4 if not (wanted or namespace) else 16) + 20)
        vec_hits = self.caches.vector_hits(vector, pool)
        text_hits = await self.caches.text_hits(text, pool) if text else []
        sims, bm25 = dict(vec_hits), dict(text_hits)
        if text_hits:
            fused: dict[int, float] = {}
            for weight, hits in ((alpha, vec_hits), (1 - alpha, text_hits)):
                for rank, (item_id, _) in enumerate(hits):
                    fused[item_id] = fused.get(item_id, 0.0) + weight / (RRF_K + rank + 1)
            best = 1 / (RRF_K + 1)
            ranked = sorted(((s / best, i) for i, s in fused.items()), key=lambda t: (-t[0], t[1]))
        else:
            ranked = [(s, i) for i, s in vec_hits]
        ranked = [(s, i) for s, i in ranked if s >= min_score]
        rows = await self.store.read(lambda conn: _rows_with_payloads(conn, [i for _, i in ranked[:pool]]))
        results = []
        for score, item_id in ranked:
            row = rows.get(item_id)
            if row is None or (namespace and row["namespace"] != namespace):
                continue  # deleted since the search, or another namespace
            hit = _scored(row, score=round(score, 6), similarity=round(sims.get(item_id, 0.0), 6),
                       **({"textScore": round(bm25.get(item_id, 0.0), 6)} if hybrid else {}))
            if wanted and not _matches(hit["payload"], wanted):
                continue
            results.append(hit)
            if len(results) == top_k:
                break
        return {"results": results, "count": len(results)}

    async def list_mappings(self, body: dict) -> dict:
        namespace = wire.text(body.get("namespace"), "namespace")
        page = wire.optional_object(body.get("page"), "page")
        limit = wire.integer(page.get("limit"), "page.limit", lo=1, hi=MAX_PAGE, default=100)
        filters = wire.optional_object(body.get("filters", body.get("where")), "filters")
        archived = filters.get("archived") if isinstance(filters.get("archived"), bool) else None
        ids = body.get("candidateIds")
        ids = [wire.text(v, "candidateIds") for v in wire.array(ids, "candidateIds", max_items=MAX_PAGE)] \
            if ids is not None else None
        query = body.get("query", body.get("searchText"))
        query = _query_text(query, "query") if isinstance(query, str) else None
        cursor = page.get("cursor")
        if isinstance(query, str) and query.strip() and not cursor:
            return await self._mappings_by_text(namespace, query, limit, archived, ids)
        after = 0
        if cursor not in (None, ""):
            if not isinstance(cursor, str) or not cursor.isdigit():
                raise BadRequest("'page.cursor' is not a cursor from list-mappings", field="page.cursor")
            after = int(cursor)
        rows = await self.store.read(lambda conn: [_hit(r) for r in ts.page_of(
            conn, namespace, after, limit + 1, archived=archived, external_ids=ids)])
        more = len(rows) > limit
        rows = rows[:limit]
        # The cursor is the last internal id: deleting listed items (a purge) cannot make a page skip.
        next_cursor = str(rows[-1]["id"]) if more else ""
        return {"mappings": rows, "page": {"hasMore": more, "nextCursor": next_cursor,
                                                              "limit": limit}}

    async def _mappings_by_text(self, namespace, query, limit, archived, ids) -> dict:
        """The candidate filter with a query: the namespace's best BM25 matches rather than arbitrary ids."""
        await self.caches.ready()
        hits = await self.caches.text_hits(query, MAX_TOP_K * 4)
        rows = await self.store.read(lambda conn: _rows_with_payloads(conn, [i for i, _ in hits]))
        wanted_ids = set(ids) if ids is not None else None
        out = []
        for item_id, score in hits:
            row = rows.get(item_id)
            if row is None or row["namespace"] != namespace:
                continue
            mapping = _scored(row, score=round(score, 6))
            if archived is not None and bool(mapping["payload"].get("archived", False)) != archived:
                continue
            if wanted_ids is not None and row["externalId"] not in wanted_ids:
                continue
            out.append(mapping)
            if len(out) == limit:
                break
        return {"mappings": out, "page": {"hasMore": False, "nextCursor": "", "limit": limit}, "rankedBy": "bm25"}

    async def resolve(self, body: dict) -> dict:
        raw = wire.array(body.get("items"), "items", max_items=MAX_ITEMS * 3)
        refs = list(dict.fromkeys(_ref(item, f"items[{i}]", body.get("namespace")) for i, item in enumerate(raw)))
        found = await self.store.read(lambda conn: ts.find_ids(conn, refs))
        # ST-BME lists each seed three times: each is answered once.
        return {"items": [{"id": found[r], "externalId": r[1], "namespace": r[0]} for r in refs if r in found],
                "missing": [{"externalId": r[1], "namespace": r[0]} for r in refs if r not in found]}

    async def neighbours(self, body: dict) -> dict:
        depth = wire.integer(body.get("depth"), "depth", lo=1, hi=MAX_DEPTH, default=1)
        limit = wire.integer(body.get("limit"), "limit", lo=1, hi=MAX_NEIGHBOURS, default=100)
        if body.get("id") is not None:
            start = wire.integer(body.get("id"), "id", lo=1, hi=2 ** 62)
        else:
            ref = _ref(body, "body", body.get("namespace"))
            start = (await self.store.read(lambda conn: ts.find_ids(conn, [ref]))).get(ref)
            if start is None:
                return {"nodes": [], "count": 0}
        nodes = await self.store.read(lambda conn: ts.neighbours(conn, start, depth, limit))
        return {"nodes": nodes, "count": len(nodes)}

    async def stat(self, body: dict, database: str) -> dict:
        namespace = body.get("namespace")
        namespace = wire.text(namespace, "namespace") if namespace is not None else None
        counts = await self.store.read(lambda conn: ts.stats(conn, namespace))
        # No revision: items carry no graph revision the bridge could vouch for, and ST-BME's audit reports
        # drift only for the fields a server gives. The namespace is named only when the client scoped it.
        out = {"database": database, **counts, "vectorCount": counts["itemCount"]}
        if namespace:
            out["namespace"] = namespace
        if body.get("includeMappingIntegrity"):
            await self.caches.ready()
            stored = {r[0] for r in await self.store.read(ts.id_revs)}
            indexed = self.caches.indexed_ids()
            out["mappingIntegrity"] = {"ok": stored == indexed, "stored": len(stored), "indexed": len(indexed),
                                       "missingFromIndex": len(stored - indexed),
                                       "staleInIndex": len(indexed - stored)}
        return out


OPERATIONS = {"bulk-upsert": "upsert", "bulk-delete": "delete", "bulk-link": "link", "search": "search",
              "search-hybrid": "search", "list-mappings": "list_mappings", "resolve-many": "resolve",
              "neighbors": "neighbours", "stat": "stat"}
EMPTY = {"bulk-delete": {"successCount": 0, "deleted": 0, "missing": 0},
         "search": {"results": [], "count": 0}, "search-hybrid": {"results": [], "count": 0},
         "list-mappings": {"mappings": [], "page": {"hasMore": False, "nextCursor": ""}},
         "resolve-many": {"items": [], "missing": []}, "neighbors": {"nodes": [], "count": 0},
         "stat": {"itemCount": 0, "namespaceCount": 0, "linkCount": 0, "dims": [], "vectorCount": 0}}


class TriviumDatabases:
    """One extension's Trivium databases."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.stores = StoreSet(self.directory, ts.MIGRATIONS, limit=MAX_DATABASES, what="Trivium")
        self._open: dict[str, TriviumDatabase] = {}

    async def get(self, body: dict) -> tuple[str, TriviumDatabase]:
        name = wire.name(body.get("database"), "database", DEFAULT_DATABASE)
        db = self._open.get(name)
        if db is None:
            store = await self.stores.get(name)
            db = self._open.setdefault(name, TriviumDatabase(
                store, self.directory / "indexes" / self.stores.path(name).stem))
        return name, db

    def exists(self, body: dict) -> bool:
        return self.stores.exists(wire.name(body.get("database"), "database", DEFAULT_DATABASE))

    async def call(self, op: str, body: Any) -> dict:
        """Run one Trivium endpoint (`bulk-upsert`, `search-hybrid`, ...) on the database the body names.
        Reads of a database never written answer empty without creating it."""
        body = wire.body_object(body)
        if op not in OPERATIONS:
            raise NotFound(f"no such Trivium endpoint: trivium/{op}")
        if op in EMPTY and not self.exists(body):
            wire.name(body.get("database"), "database", DEFAULT_DATABASE)
            return dict(EMPTY[op])
        name, db = await self.get(body)
        if op == "stat":
            return await db.stat(body, name)
        if op in ("search", "search-hybrid"):
            return await db.search(body, hybrid=op == "search-hybrid")
        return await getattr(db, OPERATIONS[op])(body)

    def opened(self) -> list[TriviumDatabase]:
        return list(self._open.values())

    async def save(self) -> int:
        return sum([await db.caches.save() for db in self.opened()])

    def close(self) -> None:
        self.stores.close()
        self._open.clear()
