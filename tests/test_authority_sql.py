"""Authority SQL: the statement shapes ST-BME's graph store sends run; everything else is refused with a
400 naming the problem, and a transaction is all or nothing."""

from __future__ import annotations

import sqlite3

import pytest

from authority_fixtures import AuthorityClient, authority, http  # noqa: F401
from stbme.authority.sql_shapes import CATALOGUE, Refused, parse

META, NODES, EDGES, TOMBS = (f"st_bme_graph_{t}" for t in ("meta", "nodes", "edges", "tombstones"))
# The statements ST-BME's graph store sends (after it turns :name into ?), written from the protocol spec.
UPSERT_META = (f"INSERT INTO {META} (chat_id, meta_key, value_json, updated_at) VALUES (?, ?, ?, ?) "
               "ON CONFLICT(chat_id, meta_key) DO UPDATE SET value_json = excluded.value_json, "
               "updated_at = excluded.updated_at")
UPSERT_NODE = (f"INSERT INTO {NODES} (chat_id, record_id, payload_json, node_type, source_floor, archived, "
               "updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chat_id, record_id) DO UPDATE "
               "SET payload_json = excluded.payload_json, node_type = excluded.node_type, source_floor = "
               "excluded.source_floor, archived = excluded.archived, updated_at = excluded.updated_at, "
               "deleted_at = excluded.deleted_at")
UPSERT_EDGE = (f"INSERT INTO {EDGES} (chat_id, record_id, payload_json, from_id, to_id, relation, source_floor, "
               "updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chat_id, record_id) DO "
               "UPDATE SET payload_json = excluded.payload_json, from_id = excluded.from_id, to_id = "
               "excluded.to_id, relation = excluded.relation, source_floor = excluded.source_floor, updated_at = "
               "excluded.updated_at, deleted_at = excluded.deleted_at")
UPSERT_TOMB = (f"INSERT INTO {TOMBS} (chat_id, record_id, payload_json, tombstone_kind, target_id, deleted_at, "
               "source_device_id) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(chat_id, record_id) DO UPDATE SET "
               "payload_json = excluded.payload_json, tombstone_kind = excluded.tombstone_kind, target_id = "
               "excluded.target_id, deleted_at = excluded.deleted_at, source_device_id = excluded.source_device_id")
CREATES = [
    f"CREATE TABLE IF NOT EXISTS {META} (chat_id TEXT NOT NULL, meta_key TEXT NOT NULL, value_json TEXT, "
    "updated_at INTEGER, PRIMARY KEY(chat_id, meta_key))",
    f"CREATE TABLE IF NOT EXISTS {NODES} (chat_id TEXT NOT NULL, record_id TEXT NOT NULL, payload_json TEXT NOT "
    "NULL, node_type TEXT, source_floor INTEGER, archived INTEGER, updated_at INTEGER, deleted_at INTEGER, "
    "PRIMARY KEY(chat_id, record_id))",
    f"CREATE TABLE IF NOT EXISTS {EDGES} (chat_id TEXT NOT NULL, record_id TEXT NOT NULL, payload_json TEXT NOT "
    "NULL, from_id TEXT, to_id TEXT, relation TEXT, source_floor INTEGER, updated_at INTEGER, deleted_at INTEGER, "
    "PRIMARY KEY(chat_id, record_id))",
    f"CREATE TABLE IF NOT EXISTS {TOMBS} (chat_id TEXT NOT NULL, record_id TEXT NOT NULL, payload_json TEXT NOT "
    "NULL, tombstone_kind TEXT, target_id TEXT, deleted_at INTEGER, source_device_id TEXT, "
    "PRIMARY KEY(chat_id, record_id))",
]
READS = [
    f"SELECT meta_key AS key, value_json AS valueJson FROM {META} WHERE chat_id = ? AND meta_key = ? LIMIT 1",
    f"SELECT meta_key AS key, value_json AS valueJson FROM {META} WHERE chat_id = ?",
    *[f"SELECT payload_json AS payloadJson FROM {t} WHERE chat_id = ?" for t in (NODES, EDGES, TOMBS)],
    *[f"SELECT COUNT(*) AS count FROM {t} WHERE chat_id = ?" for t in (NODES, EDGES, TOMBS)],
    f"SELECT record_id AS id FROM {TOMBS} WHERE chat_id = ? AND deleted_at < ?",
]
DELETES = [*[f"DELETE FROM {t} WHERE chat_id = ? AND record_id = ?" for t in (NODES, EDGES, TOMBS)],
           *[f"DELETE FROM {t} WHERE chat_id = ?" for t in (META, NODES, EDGES, TOMBS)]]
ALL_24 = CREATES + READS + [UPSERT_META, UPSERT_NODE, UPSERT_EDGE, UPSERT_TOMB] + DELETES


def test_every_statement_st_bme_sends_has_a_shape():
    assert len(ALL_24) == 24
    for statement in ALL_24:
        shape = parse(statement)
        assert shape.placeholders == statement.count("?")
    # the rendered SQL is valid SQLite over the catalogue's own tables
    conn = sqlite3.connect(":memory:")
    for table in CATALOGUE.values():
        conn.execute(table.ddl())
    for statement in ALL_24:
        shape = parse(statement)
        if shape.sql:
            conn.execute(shape.sql, ["x"] * shape.placeholders)


@pytest.mark.parametrize("statement, why", [
    ("ATTACH DATABASE ? AS other", "not allowed"),
    ("PRAGMA table_info(st_bme_graph_meta)", "not allowed"),
    ("SELECT load_extension(?) FROM st_bme_graph_meta", "expected FROM"),
    ("SELECT load_extension FROM st_bme_graph_meta", "not in st_bme_graph_meta"),
    ("SELECT name FROM sqlite_master", "not one of the tables"),
    ("SELECT * FROM st_bme_graph_nodes", "'*'"),
    ("SELECT payload_json FROM st_bme_graph_nodes WHERE chat_id = 'x'", "string literals"),
    ("SELECT payload_json FROM st_bme_graph_nodes WHERE chat_id = :chatId", "named parameters"),
    ("SELECT payload_json FROM st_bme_graph_nodes -- comment", "comments"),
    ("DELETE FROM st_bme_graph_nodes; DROP TABLE st_bme_graph_meta", "one statement"),
    ("DELETE FROM st_bme_graph_nodes", "needs a WHERE"),
    ("DROP TABLE st_bme_graph_nodes", "not allowed"),
    ("UPDATE st_bme_graph_nodes SET archived = ? WHERE chat_id = ?", "not allowed"),
    ("SELECT payload_json FROM st_bme_graph_nodes WHERE chat_id = ? OR 1 = ?", "after the end"),
    ("SELECT payload_json FROM st_bme_graph_nodes WHERE chat_id LIKE ?", "operator"),
    ("SELECT payload_json FROM st_bme_graph_nodes WHERE chat_id = ? LIMIT 99999999", "LIMIT"),
    ("INSERT INTO st_bme_graph_meta (chat_id, meta_key) VALUES (?, ?) ON CONFLICT(chat_id) DO UPDATE SET "
     "meta_key = excluded.meta_key", "ON CONFLICT must name the key"),
    ("INSERT INTO st_bme_graph_meta (chat_id, meta_key, value_json) VALUES (?, ?, ?) ON CONFLICT(chat_id, "
     "meta_key) DO UPDATE SET value_json = excluded.updated_at", "must take excluded.value_json"),
    ("INSERT INTO st_bme_graph_meta (chat_id, meta_key, value_json) VALUES (?, ?, (SELECT 1))", "? parameters"),
    ("INSERT INTO st_bme_graph_meta (meta_key, value_json) VALUES (?, ?)", "key column 'chat_id'"),
    ("CREATE TABLE IF NOT EXISTS st_bme_graph_meta (chat_id TEXT, evil BLOB)", "must define exactly"),
    ("SELECT x'41' FROM st_bme_graph_meta", "string literals"),
])
def test_other_statements_are_refused(statement, why):
    with pytest.raises(Refused) as err:
        parse(statement)
    assert why in err.value.message


async def test_graph_round_trip_over_http(authority):
    chat = "Elena @ the lighthouse 灯塔"
    await authority.call("/sql/transaction", {"database": "default", "statements": [
        {"statement": s, "params": []} for s in CREATES]})
    statements = [
        {"statement": UPSERT_NODE, "params": [chat, "n1", '{"id":"n1"}', "event", 3, 0, 1700, None]},
        {"statement": UPSERT_NODE, "params": [chat, "n2", '{"id":"n2"}', "event", None, 1, 1700, None]},
        {"statement": UPSERT_EDGE, "params": [chat, "e1", '{"id":"e1"}', "n1", "n2", "related", None, 1700, None]},
        {"statement": UPSERT_META, "params": [chat, "revision", "3", 1700]},
        {"statement": UPSERT_NODE, "params": [chat, "n1", '{"id":"n1","v":2}', "event", 3, 0, 1800, None]},
    ]
    result = await authority.call("/sql/transaction", {"database": "default", "statements": statements})
    assert result["statementCount"] == 5 and result["results"][0]["changes"] == 1
    rows = await authority.call("/sql/query", {"database": "default", "statement": READS[2], "params": [chat]})
    assert sorted(r["payloadJson"] for r in rows["rows"]) == ['{"id":"n1","v":2}', '{"id":"n2"}']
    count = await authority.call("/sql/query", {"statement": READS[5], "params": [chat]})
    assert count["rows"] == [{"count": 2}]
    meta = await authority.call("/sql/query", {"statement": READS[0], "params": [chat, "revision"]})
    assert meta["rows"] == [{"key": "revision", "valueJson": "3"}]
    await authority.call("/sql/exec", {"statement": DELETES[0], "params": [chat, "n2"]})
    count = await authority.call("/sql/query", {"statement": READS[5], "params": [chat]})
    assert count["rows"] == [{"count": 1}]
    other = await authority.call("/sql/query", {"database": "other_db", "statement": READS[5], "params": [chat]})
    assert other["rows"] == [{"count": 0}]  # another database is another file


async def test_a_transaction_is_all_or_nothing(authority):
    good = {"statement": UPSERT_META, "params": ["c", "k", "1", 1]}
    # refused before anything runs: names the entry
    data = await authority.call("/sql/transaction", {"statements": [good, {"statement": "DROP TABLE x"}]},
                                expect=400)
    assert data["field"] == "statements[1].statement"
    # fails inside SQLite (NOT NULL): rolled back whole
    data = await authority.call("/sql/transaction", {"statements": [
        good, {"statement": UPSERT_NODE, "params": ["c", "n", None, "t", None, 0, 1, None]}]}, expect=400)
    assert data["field"] == "statements[1]" and "NOT NULL" in data["error"]
    rows = await authority.call("/sql/query", {"statement": READS[1], "params": ["c"]})
    assert rows["rows"] == []


async def test_parameters_are_checked(authority):
    data = await authority.call("/sql/query", {"statement": READS[0], "params": ["only one"]}, expect=400)
    assert data["field"] == "params" and "2 ? placeholders but 1" in data["error"]
    data = await authority.call("/sql/exec", {"statement": UPSERT_META, "params": ["c", "k", {"a": 1}, 1]},
                                expect=400)
    assert data["field"] == "params[2]"
    data = await authority.call("/sql/exec", {"statement": UPSERT_META, "params": ["c", "k", "v", [1]]},
                                expect=400)
    assert data["field"] == "params[3]"
    ok = await authority.call("/sql/exec", {"statement": UPSERT_META, "params": ["c", "k", True, 1.5]})
    assert ok["changes"] == 1
    data = await authority.call("/sql/query", {"statement": UPSERT_META, "params": ["c", "k", "v", 1]}, expect=400)
    assert "sql/exec" in data["error"]
    data = await authority.call("/sql/query", {"database": "../../etc", "statement": READS[1], "params": ["c"]},
                                expect=400)
    assert data["field"] == "database"
    data = await authority.call("/sql/query", {"statement": "SELECT meta_key FROM sqlite_master"}, expect=400)
    assert data["field"] == "statement"


async def test_sql_needs_a_session_that_declared_it(http):
    resp = await http.post("/v1/authority/sql/query", json={"statement": READS[1], "params": ["c"]})
    assert resp.status == 401 and "session/init" in (await resp.json())["error"]
    no_sql = AuthorityClient(http, permissions={"fs": {"private": True}})
    data = await no_sql.call("/sql/query", {"statement": READS[1], "params": ["c"]}, expect=403)
    assert "sql.private" in data["error"]


async def test_extensions_do_not_share_databases(http):
    one, two = AuthorityClient(http, "ext-one"), AuthorityClient(http, "ext-two")
    await one.call("/sql/exec", {"statement": UPSERT_META, "params": ["c", "k", "1", 1]})
    assert (await two.call("/sql/query", {"statement": READS[1], "params": ["c"]}))["rows"] == []
    assert len((await one.call("/sql/query", {"statement": READS[1], "params": ["c"]}))["rows"]) == 1
