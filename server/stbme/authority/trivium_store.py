"""Trivium's truth: one SQLite file per (extension, database) with items, their vectors and links.

An item is (namespace, externalId) with a float32 vector of any dimension, a JSON payload and the text the
lexical index reads. Its internal id is SQLite's AUTOINCREMENT rowid: positive, never reused, and kept when
the item is upserted again. `rev` (a per-file counter bumped by every write) lets the caches of this file
(HNSW per dimension, BM25) see what changed. Links are (src, dst, label) between items, removed with them.
These are sync functions of a connection, run on the file's writer thread or a reader.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Iterable

import numpy as np
import orjson

# An item as it is written: (namespace, external_id, vector float32, payload dict, text).
NewItem = tuple[str, str, np.ndarray, dict, str]


def _create(conn: sqlite3.Connection) -> None:
    conn.execute("""CREATE TABLE items (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        external_id TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector BLOB NOT NULL,
        payload TEXT NOT NULL,
        text TEXT NOT NULL,
        rev INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        UNIQUE (namespace, external_id))""")
    conn.execute("""CREATE TABLE links (
        src INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        dst INTEGER NOT NULL REFERENCES items(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        weight REAL NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (src, dst, label)) WITHOUT ROWID""")
    conn.execute("CREATE INDEX links_by_dst ON links (dst)")
    conn.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID")
    conn.execute("INSERT INTO counters VALUES ('rev', 0)")


MIGRATIONS = [("t001_items_links", _create)]


def next_rev(conn: sqlite3.Connection) -> int:
    return conn.execute("UPDATE counters SET value = value + 1 WHERE name = 'rev' RETURNING value").fetchone()[0]


def namespace_dim(conn: sqlite3.Connection, namespace: str) -> int | None:
    row = conn.execute("SELECT dim FROM items WHERE namespace = ? LIMIT 1", (namespace,)).fetchone()
    return row[0] if row else None


def upsert_items(conn: sqlite3.Connection, items: list[NewItem]) -> list[tuple[int, int, int]]:
    """Insert or replace items (same id when it exists). Returns (id, dim, rev) per item."""
    rev, now = next_rev(conn), time.time()
    out = []
    for namespace, external_id, vector, payload, text in items:
        row = conn.execute(
            "INSERT INTO items (namespace, external_id, dim, vector, payload, text, rev, updated_at)"
            " VALUES (?,?,?,?,?,?,?,?) ON CONFLICT(namespace, external_id) DO UPDATE SET dim = excluded.dim,"
            " vector = excluded.vector, payload = excluded.payload, text = excluded.text, rev = excluded.rev,"
            " updated_at = excluded.updated_at RETURNING id",
            (namespace, external_id, len(vector), vector.tobytes(), orjson.dumps(payload).decode(), text, rev,
             now)).fetchone()
        out.append((row[0], len(vector), rev))
    return out


def find_ids(conn: sqlite3.Connection, refs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """Internal ids of the (namespace, external_id) refs that exist."""
    found = {}
    for ref in dict.fromkeys(refs):
        row = conn.execute("SELECT id FROM items WHERE namespace = ? AND external_id = ?", ref).fetchone()
        if row:
            found[ref] = row[0]
    return found


def delete_items(conn: sqlite3.Connection, ids: list[int]) -> None:
    next_rev(conn)
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        conn.execute(f"DELETE FROM items WHERE id IN ({','.join('?' * len(chunk))})", chunk)


def upsert_links(conn: sqlite3.Connection, links: list[tuple[int, int, str, float]]) -> None:
    now = time.time()
    conn.executemany("INSERT INTO links (src, dst, label, weight, updated_at) VALUES (?,?,?,?,?)"
                     " ON CONFLICT(src, dst, label) DO UPDATE SET weight = excluded.weight,"
                     " updated_at = excluded.updated_at", [(s, d, label, w, now) for s, d, label, w in links])


def rows_by_ids(conn: sqlite3.Connection, ids: list[int], columns: str = "id, namespace, external_id, payload"):
    out = []
    for i in range(0, len(ids), 500):
        chunk = ids[i:i + 500]
        out += conn.execute(f"SELECT {columns} FROM items WHERE id IN ({','.join('?' * len(chunk))})",
                            chunk).fetchall()
    return out


def page_of(conn: sqlite3.Connection, namespace: str, after: int, limit: int, *, archived: bool | None,
            external_ids: list[str] | None):
    """Items of a namespace with id > after, in id order: a key cursor that deletes cannot shift."""
    sql = "SELECT id, namespace, external_id, payload FROM items WHERE namespace = ? AND id > ?"
    params: list = [namespace, after]
    if archived is not None:
        sql += " AND coalesce(json_extract(payload, '$.archived'), 0) = ?"
        params.append(1 if archived else 0)
    if external_ids is not None:
        sql += f" AND external_id IN ({','.join('?' * len(external_ids))})"
        params += external_ids
    return conn.execute(sql + " ORDER BY id LIMIT ?", (*params, limit)).fetchall()


def neighbours(conn: sqlite3.Connection, start: int, depth: int, limit: int) -> list[dict]:
    """Items linked to `start` (either direction) within `depth` hops, nearest first."""
    seen, frontier, out = {start}, [start], []
    for hop in range(1, depth + 1):
        marks = ",".join("?" * len(frontier))
        rows = conn.execute(
            f"SELECT dst AS other, label, weight, 'out' AS direction FROM links WHERE src IN ({marks})"
            f" UNION ALL SELECT src, label, weight, 'in' FROM links WHERE dst IN ({marks})",
            frontier + frontier).fetchall()
        found = {}
        for r in rows:
            if r["other"] not in seen and r["other"] not in found:
                found[r["other"]] = r
        frontier = list(found)[:max(0, limit - len(out))]
        seen.update(frontier)
        items = {r["id"]: r for r in rows_by_ids(conn, frontier, "id, namespace, external_id")}
        for item_id in frontier:
            link = found[item_id]
            item = items[item_id]
            out.append({"id": item_id, "externalId": item["external_id"], "namespace": item["namespace"],
                        "label": link["label"], "weight": link["weight"], "direction": link["direction"],
                        "depth": hop})
        if not frontier:
            break
    return out


def stats(conn: sqlite3.Connection, namespace: str | None) -> dict:
    where, params = ("WHERE namespace = ?", (namespace,)) if namespace else ("", ())
    items = conn.execute(f"SELECT count(*), count(DISTINCT namespace) FROM items {where}", params).fetchone()
    dims = [r[0] for r in conn.execute(f"SELECT DISTINCT dim FROM items {where} ORDER BY dim", params)]
    links = conn.execute(
        "SELECT count(*) FROM links" + (" WHERE src IN (SELECT id FROM items WHERE namespace = ?)" if namespace
                                         else ""), params).fetchone()[0]
    return {"itemCount": items[0], "namespaceCount": items[1], "linkCount": links, "dims": dims}


def id_revs(conn: sqlite3.Connection) -> list[tuple[int, int, int]]:
    """(id, dim, rev) of every item: what the caches are reconciled against."""
    return conn.execute("SELECT id, dim, rev FROM items").fetchall()
