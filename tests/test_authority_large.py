"""Large valid Authority requests (issue 20): a query text is bounded like the main recall's, and the heavy
parts of big requests (checking items, BM25 indexing and search, checking a transaction's statements) run
off the event loop, so /health and every other chat keep answering meanwhile. The latency figures come from
scripts/bench_authority_load.py."""

from __future__ import annotations

import threading

import pytest

from authority_fixtures import NS, authority, http, item, upsert, vec  # noqa: F401
from test_authority_sql import UPSERT_NODE

from stbme.authority.trivium import MAX_QUERY_CHARS


@pytest.fixture
def on_loop(monkeypatch):
    """Wrap functions so each call records whether it ran on the event loop's (main) thread."""
    calls: list[tuple[str, bool]] = []

    def record(owner, name):
        fn = getattr(owner, name)

        def wrapper(*args, **kwargs):
            calls.append((name, threading.current_thread() is threading.main_thread()))
            return fn(*args, **kwargs)
        monkeypatch.setattr(owner, name, wrapper)

    record.calls = calls
    return record


async def test_a_query_text_is_bounded_like_the_main_recall(authority):
    await upsert(authority, [item(i) for i in range(5)])
    long = "lighthouse " * (MAX_QUERY_CHARS // 11)
    ok = await authority.call("/trivium/search-hybrid", {"vector": vec(1), "topK": 3, "queryText": long})
    assert ok["results"]
    too_long = long + "x" * (MAX_QUERY_CHARS - len(long) + 1)
    data = await authority.call("/trivium/search-hybrid", {"vector": vec(1), "queryText": too_long}, expect=400)
    assert data["field"] == "queryText" and str(MAX_QUERY_CHARS) in data["error"]
    data = await authority.call("/trivium/list-mappings", {"namespace": NS, "query": too_long}, expect=400)
    assert data["field"] == "query"


async def test_bm25_indexing_and_search_and_item_checks_run_off_the_event_loop(authority, on_loop):
    import stbme.authority.trivium as trivium
    from stbme.index.lexical import LexicalIndex

    await upsert(authority, [item(0)])
    await authority.call("/trivium/search", {"vector": vec(0), "topK": 1})  # the caches are loaded
    for owner, name in ((LexicalIndex, "upsert"), (LexicalIndex, "search"), (trivium, "_vector")):
        on_loop(owner, name)
    long_texts = [item(i) for i in range(1, 40)]
    for it in long_texts:
        it["payload"]["text"] += " harbour" * 2000
    await upsert(authority, long_texts)
    assert {name for name, _ in on_loop.calls} == {"upsert", "_vector"}
    assert [c for c in on_loop.calls if c[1]] == []
    on_loop.calls.clear()
    await authority.call("/trivium/search-hybrid", {"vector": vec(3), "topK": 3, "queryText": "harbour key"})
    await authority.call("/trivium/list-mappings", {"namespace": NS, "query": "harbour"})
    assert [c for c in on_loop.calls if c[0] == "search"] == [("search", False)] * 2


async def test_a_transaction_is_checked_off_the_event_loop(authority, on_loop):
    import stbme.authority.sql as sql

    on_loop(sql, "parse")
    statements = [{"statement": UPSERT_NODE, "params": ["c", f"n{i}", "{}", "event", i, 0, 0, None]}
                  for i in range(300)]
    result = await authority.call("/sql/transaction", {"database": "default", "statements": statements})
    assert result["statementCount"] == 300
    assert len(on_loop.calls) == 300 and not any(main for _, main in on_loop.calls)
