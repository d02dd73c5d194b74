"""Authority SQL: per-extension SQLite databases that run only the allowed statement shapes.

Each database name is its own file, separate from the sidecar's database. Statements are checked and
rendered by sql_shapes before anything runs (a transaction's, off the event loop: 2,000 statements held
it for seconds, issue 20); a transaction's statements all run in one SQLite transaction on the database's
writer thread, in order, or none do.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import BadRequest
from . import wire
from .databases import StoreSet
from .sql_shapes import Refused, Statement, create_catalogue, parse

MIGRATIONS = [("a001_st_bme_graph_tables", create_catalogue)]
MAX_DATABASES = 8
MAX_PARAMS = 256
MAX_STATEMENTS = 2000
INT64 = 2 ** 63


def _params(value: Any, field: str) -> list:
    if value is None:
        return []
    params = wire.array(value, field, max_items=MAX_PARAMS)
    out = []
    for i, v in enumerate(params):
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, int):
            if not -INT64 <= v < INT64:
                raise BadRequest(f"'{field}[{i}]' is outside the 64-bit integer range", field=f"{field}[{i}]")
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise BadRequest(f"'{field}[{i}]' must be a finite number", field=f"{field}[{i}]")
        elif v is not None and not isinstance(v, str):
            raise BadRequest(f"'{field}[{i}]' must be a string, number, boolean or null (objects are sent "
                             "as JSON text)", field=f"{field}[{i}]")
        out.append(v)
    return out


def _statement(entry: Any, where: str = "") -> tuple[Statement, list]:
    """(shape, parameters) of one {statement, params}; a 400 naming the field if it is not allowed.
    `where` is the entry's place in the body ("statements[3]"), "" for a body that is the entry."""
    at = f"{where}." if where else ""
    if not isinstance(entry, dict):
        raise BadRequest(f"'{where}' must be an object {{statement, params}}", field=where)
    text = entry.get("statement", entry.get("sql"))
    if not isinstance(text, str):
        raise BadRequest(f"'{at}statement' must be a string", field=f"{at}statement")
    try:
        shape = parse(text)
    except Refused as exc:
        raise Refused(f"{at}statement is not allowed: {exc.message}", field=f"{at}statement") from None
    params = _params(entry.get("params"), f"{at}params")
    if len(params) != shape.placeholders:
        raise BadRequest(f"the statement has {shape.placeholders} ? placeholders but {len(params)} params",
                         field=f"{at}params")
    return shape, params


def _run(conn: sqlite3.Connection, shape: Statement, params: list, field: str) -> dict:
    if shape.kind == "create":
        return {"changes": 0}  # the catalogue's tables exist from the database's first open
    try:
        cursor = conn.execute(shape.sql, params)
        if shape.kind == "select":
            rows = [dict(r) for r in cursor.fetchall()]
            return {"rows": rows, "rowCount": len(rows)}
    except sqlite3.IntegrityError as exc:  # raised inside the transaction: it is rolled back whole
        raise BadRequest(f"{field}: {exc}", field=field) from None
    return {"changes": cursor.rowcount, "lastInsertRowid": cursor.lastrowid}


class SqlDatabases:
    """One extension's SQL databases."""

    def __init__(self, directory: Path):
        self.stores = StoreSet(directory, MIGRATIONS, limit=MAX_DATABASES, what="SQL")

    async def query(self, body: Any) -> dict:
        body = wire.body_object(body)
        database = wire.name(body.get("database"), "database", "default")
        shape, params = _statement(body)
        if shape.writes:
            raise Refused("sql/query runs SELECT statements; send writes to sql/exec or sql/transaction",
                          field="statement")
        store = await self.stores.get(database)
        result = await store.read(lambda conn: _run(conn, shape, params, "statement"))
        return {"database": database, **result}

    async def exec(self, body: Any) -> dict:
        body = wire.body_object(body)
        database = wire.name(body.get("database"), "database", "default")
        shape, params = _statement(body)
        store = await self.stores.get(database)
        return {"database": database, **await store.write(lambda conn: _run(conn, shape, params, "statement"))}

    async def transaction(self, body: Any) -> dict:
        body = wire.body_object(body)
        database = wire.name(body.get("database"), "database", "default")
        entries = wire.array(body.get("statements"), "statements", max_items=MAX_STATEMENTS)
        # Every statement is checked before the first one runs: a refusal writes nothing.
        checked = await asyncio.to_thread(lambda: [_statement(e, f"statements[{i}]") for i, e in enumerate(entries)])
        store = await self.stores.get(database)

        def run(conn):
            return [_run(conn, shape, params, f"statements[{i}]") for i, (shape, params) in enumerate(checked)]

        results = await store.write(run)
        return {"database": database, "results": results, "statementCount": len(results)}

    def close(self) -> None:
        self.stores.close()
