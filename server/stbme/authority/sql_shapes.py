"""The SQL a browser may run: the statement shapes ST-BME's graph store sends, over its four tables.

ST-BME keeps its graph as SQL through Authority's pass-through endpoints. Running a browser's SQL as it is
would let any page that reaches the sidecar do anything SQLite can (ATTACH a file, read other tables).
So a statement is tokenised and parsed into one of four shapes, over a fixed catalogue of tables and
columns, and the SQL that runs is rendered here from the parsed identifiers; the client's text never
reaches SQLite. Values travel only as positional parameters.

Shapes: CREATE TABLE IF NOT EXISTS (only the catalogue's own definitions), SELECT columns or COUNT(*)
with AND-ed `column op ?` conditions and an optional LIMIT, INSERT of parameters with an optional
ON CONFLICT(primary key) DO UPDATE SET col = excluded.col, and DELETE with a WHERE clause.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from ..errors import BadRequest


@dataclasses.dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]   # (name, SQLite type and constraint)
    key: tuple[str, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    def ddl(self) -> str:
        cols = ", ".join(f"{c} {t}" for c, t in self.columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} ({cols}, PRIMARY KEY({', '.join(self.key)}))"


_RECORD_KEY = (("chat_id", "TEXT NOT NULL"), ("record_id", "TEXT NOT NULL"), ("payload_json", "TEXT NOT NULL"))
CATALOGUE: dict[str, Table] = {t.name: t for t in (
    Table("st_bme_graph_meta", (("chat_id", "TEXT NOT NULL"), ("meta_key", "TEXT NOT NULL"),
                                ("value_json", "TEXT"), ("updated_at", "INTEGER")), ("chat_id", "meta_key")),
    Table("st_bme_graph_nodes", _RECORD_KEY + (
        ("node_type", "TEXT"), ("source_floor", "INTEGER"), ("archived", "INTEGER"), ("updated_at", "INTEGER"),
        ("deleted_at", "INTEGER")), ("chat_id", "record_id")),
    Table("st_bme_graph_edges", _RECORD_KEY + (
        ("from_id", "TEXT"), ("to_id", "TEXT"), ("relation", "TEXT"), ("source_floor", "INTEGER"),
        ("updated_at", "INTEGER"), ("deleted_at", "INTEGER")), ("chat_id", "record_id")),
    Table("st_bme_graph_tombstones", _RECORD_KEY + (
        ("tombstone_kind", "TEXT"), ("target_id", "TEXT"), ("deleted_at", "INTEGER"),
        ("source_device_id", "TEXT")), ("chat_id", "record_id")),
)}

MAX_STATEMENT_CHARS = 8192
MAX_LIMIT = 1_000_000
_OPERATORS = ("=", "<", "<=", ">", ">=")
_TOKEN = re.compile(r"\s*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>\d+)|(?P<sym><=|>=|[(),.*=<>?;])|(?P<bad>\S))")
_ALIAS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class Refused(BadRequest):
    """A statement outside the allowed shapes."""


@dataclasses.dataclass(frozen=True)
class Statement:
    kind: str            # create | select | insert | delete
    table: str
    sql: str             # rendered here; "" for a CREATE of a table that always exists
    placeholders: int

    @property
    def writes(self) -> bool:
        return self.kind in ("insert", "delete")


def tokenize(statement: str) -> list[str]:
    tokens = []
    for match in _TOKEN.finditer(statement):
        if match.group("bad"):
            ch = match.group("bad")
            why = {"'": "string literals are not allowed; pass values as ? parameters",
                   '"': "quoted identifiers are not allowed",
                   "-": "comments and arithmetic are not allowed", "/": "comments are not allowed",
                   ":": "named parameters are not allowed; use positional ? parameters",
                   "$": "named parameters are not allowed; use positional ? parameters",
                   "@": "named parameters are not allowed; use positional ? parameters"}.get(ch)
            raise Refused(why or f"the character {ch!r} is not allowed in a statement")
        tokens.append(match.group(0).strip())
    if tokens and tokens[-1] == ";":
        tokens.pop()
    if ";" in tokens:
        raise Refused("one statement per entry: ';' may only end it")
    return tokens


class _Parser:
    def __init__(self, tokens: list[str]):
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str:
        return self.tokens[self.pos].upper() if self.pos < len(self.tokens) else ""

    def take(self) -> str:
        if self.pos >= len(self.tokens):
            raise Refused("the statement ends too early")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def accept(self, *words: str) -> bool:
        if self.peek() == words[0] and all(
                self.pos + i < len(self.tokens) and self.tokens[self.pos + i].upper() == w
                for i, w in enumerate(words)):
            self.pos += len(words)
            return True
        return False

    def expect(self, *words: str) -> None:
        if not self.accept(*words):
            got = self.tokens[self.pos] if self.pos < len(self.tokens) else "the end"
            raise Refused(f"expected {' '.join(words)} but found {got!r}")

    def table(self) -> Table:
        word = self.take()
        table = CATALOGUE.get(word.lower())
        if table is None:
            raise Refused(f"table {word!r} is not one of the tables this bridge serves "
                          f"({', '.join(CATALOGUE)})")
        return table

    def column(self, table: Table) -> str:
        word = self.take().lower()
        if word not in table.column_names:
            raise Refused(f"column {word!r} is not in {table.name}")
        return word

    def end(self) -> None:
        if self.pos != len(self.tokens):
            raise Refused(f"unexpected {self.tokens[self.pos]!r} after the end of the statement")


def _q(identifier: str) -> str:
    return f'"{identifier}"'


@functools.lru_cache(maxsize=512)
def parse(statement: str) -> Statement:
    """The shape of a statement, rendered as the SQL to run; Refused (400) if it fits none. Remembered:
    ST-BME sends the same few statements over and over (a Statement is immutable; refusals are not kept)."""
    if len(statement) > MAX_STATEMENT_CHARS:
        raise Refused(f"the statement is longer than {MAX_STATEMENT_CHARS} characters")
    tokens = tokenize(statement)
    if not tokens:
        raise Refused("the statement is empty")
    p = _Parser(tokens)
    verb = p.peek()
    if verb == "SELECT":
        return _select(p)
    if verb == "INSERT":
        return _insert(p)
    if verb == "DELETE":
        return _delete(p)
    if verb == "CREATE":
        return _create(p, tokens)
    raise Refused(f"{tokens[0]!r} statements are not allowed: only SELECT, INSERT, DELETE and the "
                  "graph store's CREATE TABLE IF NOT EXISTS")


def _create(p: _Parser, tokens: list[str]) -> Statement:
    p.expect("CREATE", "TABLE", "IF", "NOT", "EXISTS")
    table = p.table()
    if [t.lower() for t in tokens] != [t.lower() for t in tokenize(table.ddl())]:
        raise Refused(f"CREATE TABLE {table.name} must define exactly: {table.ddl()}")
    return Statement("create", table.name, "", 0)


def _where(p: _Parser, table: Table) -> tuple[str, int]:
    parts = []
    while True:
        col = p.column(table)
        op = p.take()
        if op not in _OPERATORS:
            raise Refused(f"the operator {op!r} is not allowed; use one of {' '.join(_OPERATORS)}")
        if p.take() != "?":
            raise Refused("a condition compares a column with a ? parameter")
        parts.append(f"{_q(col)} {op} ?")
        if not p.accept("AND"):
            return " WHERE " + " AND ".join(parts), len(parts)


def _select(p: _Parser) -> Statement:
    p.expect("SELECT")
    items: list[tuple[str | None, str]] = []   # (column or None for COUNT(*), alias)
    while True:
        if p.accept("COUNT", "(", "*", ")"):
            source, alias = None, "count"
        else:
            source = alias = p.take().lower()
        if p.accept("AS"):
            alias = p.take()
        if not _ALIAS.match(alias):
            raise Refused(f"the column alias {alias!r} is not a plain name")
        items.append((source, alias))
        if not p.accept(","):
            break
    p.expect("FROM")
    table = p.table()
    for source, _ in items:
        if source is not None and source not in table.column_names:
            raise Refused(f"column {source!r} is not in {table.name}")
    where, n = ("", 0)
    if p.accept("WHERE"):
        where, n = _where(p, table)
    limit = ""
    if p.accept("LIMIT"):
        value = p.take()
        if value == "?":
            limit, n = " LIMIT ?", n + 1
        elif value.isdigit() and int(value) <= MAX_LIMIT:
            limit = f" LIMIT {int(value)}"
        else:
            raise Refused(f"LIMIT takes a whole number up to {MAX_LIMIT} or a ? parameter")
    p.end()
    columns = ", ".join(f"count(*) AS {_q(alias)}" if source is None else f"{_q(source)} AS {_q(alias)}"
                        for source, alias in items)
    return Statement("select", table.name, f"SELECT {columns} FROM {_q(table.name)}{where}{limit}", n)


def _names(p: _Parser, table: Table) -> list[str]:
    p.expect("(")
    names = [p.column(table)]
    while p.accept(","):
        names.append(p.column(table))
    p.expect(")")
    if len(set(names)) != len(names):
        raise Refused("a column is named twice")
    return names


def _insert(p: _Parser) -> Statement:
    p.expect("INSERT", "INTO")
    table = p.table()
    columns = _names(p, table)
    p.expect("VALUES", "(")
    values = 0
    while True:
        if p.take() != "?":
            raise Refused("VALUES takes ? parameters only")
        values += 1
        if not p.accept(","):
            break
    p.expect(")")
    if values != len(columns):
        raise Refused(f"{len(columns)} columns but {values} values")
    missing = [c for c in table.key if c not in columns]
    if missing:
        raise Refused(f"an INSERT into {table.name} must set its key column {missing[0]!r}")
    sql = (f"INSERT INTO {_q(table.name)} ({', '.join(map(_q, columns))}) "
           f"VALUES ({', '.join('?' * values)})")
    if p.accept("ON", "CONFLICT"):
        if set(_names(p, table)) != set(table.key):
            raise Refused(f"ON CONFLICT must name the key of {table.name}: ({', '.join(table.key)})")
        p.expect("DO", "UPDATE", "SET")
        updates = []
        while True:
            col = p.column(table)
            p.expect("=", "EXCLUDED", ".")
            if p.take().lower() != col:
                raise Refused(f"SET {col} must take excluded.{col}")
            if col in table.key or col not in columns:
                raise Refused(f"SET {col}: only inserted columns outside the key can be updated")
            updates.append(f"{_q(col)} = excluded.{_q(col)}")
            if not p.accept(","):
                break
        sql += f" ON CONFLICT ({', '.join(map(_q, table.key))}) DO UPDATE SET {', '.join(updates)}"
    p.end()
    return Statement("insert", table.name, sql, values)


def _delete(p: _Parser) -> Statement:
    p.expect("DELETE", "FROM")
    table = p.table()
    if not p.accept("WHERE"):
        raise Refused("DELETE needs a WHERE clause")
    where, n = _where(p, table)
    p.end()
    return Statement("delete", table.name, f"DELETE FROM {_q(table.name)}{where}", n)


def create_catalogue(conn) -> None:
    """The catalogue's tables, created when a database is first opened."""
    for table in CATALOGUE.values():
        conn.execute(table.ddl())
