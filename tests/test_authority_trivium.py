"""Authority Trivium: client vectors with payloads and links, key-cursor paging that deletes cannot shift,
HNSW + BM25 search over a whole database, and caches that survive restarts and reconcile with SQLite."""

from __future__ import annotations

import pytest

from authority_fixtures import NS, WORDS, AuthorityClient, authority, http, item, upsert, vec  # noqa: F401
from stbme.api.app import create_app, services_key

async def test_upsert_search_and_duplicate_ids(authority):
    items = [item(i) for i in range(20)]
    replaced = dict(item(3), payload={"nodeId": "node-003", "text": "rewritten", "archived": False})
    result = await upsert(authority, items + [replaced])  # node-003 twice: the last one wins
    assert result["successCount"] == 20 and result["upserted"] == 20
    ids = {r["externalId"]: r["id"] for r in result["items"]}
    again = await upsert(authority, [item(5)])
    assert again["items"][0]["id"] == ids["node-005"]  # an upsert keeps the internal id
    hits = await authority.call("/trivium/search-hybrid", {"vector": vec(7), "topK": 5, "queryText": "mountain"})
    top = hits["results"][0]
    assert top["externalId"] == "node-007" and top["nodeId"] == "node-007" and top["namespace"] == NS
    assert 0 < top["score"] <= 1 and top["similarity"] == pytest.approx(1.0, abs=1e-4)
    assert top["payload"]["text"].startswith("harbour") is False
    plain = await authority.call("/trivium/search", {"vector": vec(11), "topK": 3})
    assert plain["results"][0]["externalId"] == "node-011" and len(plain["results"]) == 3
    stored = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 100}})
    assert {m["externalId"]: m["payload"]["text"] for m in stored["mappings"]}["node-003"] == "rewritten"


async def test_text_ranking_pulls_in_keyword_matches(authority):
    await upsert(authority, [item(i) for i in range(40)])
    # a query vector close to nothing in particular; the words decide
    hits = await authority.call("/trivium/search-hybrid", {"vector": vec(999), "topK": 8, "queryText": "vault"})
    ids = [h["externalId"] for h in hits["results"]]
    vault = {f"node-{i:03d}" for i in range(40) if WORDS[i % len(WORDS)] == "vault"}
    assert vault <= set(ids)
    assert all(h["textScore"] > 0 for h in hits["results"] if h["externalId"] in vault)


async def test_dimensions_are_learned_per_namespace(authority):
    await upsert(authority, [item(1, dim=16)])
    data = await authority.call("/trivium/bulk-upsert", {"items": [item(2, dim=8)]}, expect=400)
    assert "16-d" in data["error"] and data["field"] == "items.vector"
    await upsert(authority, [item(2, namespace="other-chat", dim=8)])
    hits = await authority.call("/trivium/search-hybrid", {"vector": vec(2, 8), "topK": 5, "queryText": "x"})
    assert [h["namespace"] for h in hits["results"]] == ["other-chat"]  # the 16-d namespace is skipped
    data = await authority.call("/trivium/bulk-upsert", {"dim": 4, "items": [item(3)]}, expect=400)
    assert data["field"] == "items[0].vector"


@pytest.mark.parametrize("bad, field", [
    ({"externalId": "a", "namespace": NS}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": []}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [1, "x"]}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [0, 0]}, "items[1].vector"),
    # numpy reads "1" and true as numbers: refused before they get there (issue 20)
    ({"externalId": "a", "namespace": NS, "vector": ["1", True]}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [1.5, True]}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [1.5, "2"]}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [1.5, None]}, "items[1].vector"),
    ({"externalId": "a", "namespace": NS, "vector": [1.5, [2]]}, "items[1].vector"),
    ({"externalId": "", "namespace": NS, "vector": [1, 2]}, "items[1].externalId"),
    ({"externalId": "a", "vector": [1, 2]}, "items[1].namespace"),
    ({"externalId": "a", "namespace": NS, "vector": [1, 2], "payload": [1]}, "items[1].payload"),
])
async def test_bad_items_are_refused_and_nothing_is_written(authority, bad, field):
    data = await authority.call("/trivium/bulk-upsert", {"items": [item(1), bad]}, expect=400)
    assert data["field"] == field
    stat = await authority.call("/trivium/stat", {})
    assert stat["itemCount"] == 0


@pytest.mark.parametrize("vector", [["1", True], [0.5, False], [0.5, "0.5"]])
async def test_a_search_vector_of_strings_or_booleans_is_refused(authority, vector):
    await upsert(authority, [item(1, dim=2)])
    for op in ("search", "search-hybrid"):
        data = await authority.call(f"/trivium/{op}", {"vector": vector, "topK": 3, "queryText": "key"}, expect=400)
        assert data["field"] == "vector" and "numbers" in data["error"]


async def test_purge_by_key_cursor_deletes_everything(authority):
    """ST-BME's purge: list a page, delete it, follow the cursor. Deleting listed items must not make
    the next page skip any (an offset cursor would skip a page's worth)."""
    await upsert(authority, [item(i) for i in range(95)])
    await upsert(authority, [item(i, namespace="keep-me") for i in range(5)])
    cursor, pages, deleted = "", 0, 0
    while True:
        page = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {
            **({"cursor": cursor} if cursor else {}), "limit": 10}})
        pages += 1
        refs = [{"externalId": m["externalId"], "namespace": m["namespace"]} for m in page["mappings"]]
        if refs:  # each id twice, as ST-BME sends them
            result = await authority.call("/trivium/bulk-delete", {"items": refs + refs})
            assert result["successCount"] == len(refs)
            deleted += result["successCount"]
        if not page["page"]["hasMore"]:
            break
        cursor = page["page"]["nextCursor"]
    assert deleted == 95 and pages == 10
    stat = await authority.call("/trivium/stat", {"includeMappingIntegrity": True})
    assert stat["itemCount"] == 5 and stat["mappingIntegrity"]["ok"]
    again = await authority.call("/trivium/bulk-delete", {"items": [{"externalId": "node-001", "namespace": NS}]})
    assert again == {"ok": True, "successCount": 0, "deleted": 0, "missing": 1}


async def test_paging_is_stable_when_other_items_go(authority):
    await upsert(authority, [item(i) for i in range(30)])
    first = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 10}})
    seen = [m["externalId"] for m in first["mappings"]]
    # items on the next page and on this one vanish meanwhile
    gone = [f"node-{i:03d}" for i in (0, 1, 12, 13)]
    await authority.call("/trivium/bulk-delete", {"items": [{"externalId": g, "namespace": NS} for g in gone]})
    cursor = first["page"]["nextCursor"]
    while cursor:
        page = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"cursor": cursor,
                                                                                          "limit": 10}})
        seen += [m["externalId"] for m in page["mappings"]]
        cursor = page["page"]["nextCursor"]
    expected = [f"node-{i:03d}" for i in range(30) if f"node-{i:03d}" not in gone[2:]]
    assert seen == expected  # nothing skipped, nothing twice
    data = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"cursor": "abc"}}, expect=400)
    assert data["field"] == "page.cursor"


async def test_candidate_filter_archived_ids_and_query(authority):
    await upsert(authority, [item(i, archived=i % 2 == 1) for i in range(20)])
    live = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 100},
                                                           "filters": {"archived": False}})
    assert len(live["mappings"]) == 10 and not any(m["payload"]["archived"] for m in live["mappings"])
    picked = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 100},
                                                             "candidateIds": ["node-002", "node-004", "nope"]})
    assert [m["externalId"] for m in picked["mappings"]] == ["node-002", "node-004"]
    ranked = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 5},
                                                             "filters": {"archived": False}, "query": "lighthouse"})
    assert ranked["rankedBy"] == "bm25"
    assert {m["externalId"] for m in ranked["mappings"]} == {"node-000", "node-010"}
    archived_only = await authority.call("/trivium/list-mappings", {"namespace": NS, "page": {"limit": 5},
                                                                    "filters": {"archived": False}, "query": "oak"})
    assert archived_only["mappings"] == []  # node-003 and node-013 match but are archived


async def test_links_resolve_and_neighbours(authority):
    await upsert(authority, [item(i) for i in range(6)])
    ref = lambda i: {"externalId": f"node-{i:03d}", "namespace": NS}  # noqa: E731
    links = [{"src": ref(0), "dst": ref(1), "label": "related", "weight": 0.7},
             {"src": ref(1), "dst": ref(2), "label": "involved_in"},
             {"src": ref(3), "dst": ref(0), "label": "related"},
             {"src": ref(0), "dst": ref(1), "label": "related", "weight": 0.9},  # the same link again
             {"src": ref(0), "dst": {"externalId": "archived-node", "namespace": NS}, "label": "related"}]
    result = await authority.call("/trivium/bulk-link", {"items": links})
    assert result["linked"] == 3 and result["skipped"] == 1
    assert result["missing"] == [{"externalId": "archived-node", "namespace": NS}]
    resolved = await authority.call("/trivium/resolve-many", {"items": [ref(0), ref(0), ref(0), ref(9)]})
    assert len(resolved["items"]) == 1 and resolved["items"][0]["externalId"] == "node-000"
    assert resolved["missing"] == [ref(9)]
    start = resolved["items"][0]["id"]
    near = await authority.call("/trivium/neighbors", {"id": start, "depth": 1})
    assert {n["externalId"] for n in near["nodes"]} == {"node-001", "node-003"}
    assert {n["externalId"]: n["weight"] for n in near["nodes"]}["node-001"] == pytest.approx(0.9)
    far = await authority.call("/trivium/neighbors", {"id": start, "depth": 2})
    assert {n["externalId"]: n["depth"] for n in far["nodes"]} == {"node-001": 1, "node-003": 1, "node-002": 2}
    stat = await authority.call("/trivium/stat", {"namespace": NS})
    assert stat["linkCount"] == 3 and stat["namespace"] == NS and "revision" not in stat
    await authority.call("/trivium/bulk-delete", {"items": [ref(1)]})  # links go with their items
    near = await authority.call("/trivium/neighbors", {"id": start, "depth": 2})
    assert {n["externalId"] for n in near["nodes"]} == {"node-003"}
    assert (await authority.call("/trivium/neighbors", {"id": 10 ** 9}))["nodes"] == []


async def test_reads_of_an_unknown_database_create_nothing(authority, tmp_path):
    for op, body in [("search-hybrid", {"vector": [1, 2], "queryText": "x"}), ("stat", {}),
                     ("list-mappings", {"namespace": NS}), ("resolve-many", {"items": []}),
                     ("bulk-delete", {"items": []}), ("neighbors", {"id": 1})]:
        data = await authority.call(f"/trivium/{op}", {"database": "never_written", **body})
        assert data["ok"] is True
    assert not list((tmp_path / "data" / "authority").rglob("*.sqlite3"))
    await authority.call("/trivium/nope", {}, expect=404)


async def test_indexes_survive_a_restart_and_catch_up(aiohttp_client, tmp_path, embedder):
    """The caches are saved, then changed without a save (as after kill -9): on the next start they are
    reconciled with SQLite, so every stored item is found and nothing deleted is."""
    app = create_app(tmp_path / "data", embedder=embedder)
    client = AuthorityClient(await aiohttp_client(app))
    await upsert(client, [item(i) for i in range(30)])
    await client.call("/trivium/search", {"vector": vec(0), "topK": 1})  # load the caches
    await app[services_key].authority.save()
    await upsert(client, [item(i) for i in range(30, 40)])
    await client.call("/trivium/bulk-delete", {"items": [{"externalId": "node-005", "namespace": NS}]})
    # what a crash leaves: files from the save, SQLite ahead of them
    files = {p: p.read_bytes() for p in (tmp_path / "data" / "authority").rglob("indexes/*") if p.is_file()}
    await client.http.close()
    for path, data in files.items():
        path.write_bytes(data)
    app2 = create_app(tmp_path / "data", embedder=embedder)
    client2 = AuthorityClient(await aiohttp_client(app2))
    for i in (35, 39, 12):
        hits = await client2.call("/trivium/search-hybrid", {"vector": vec(i), "topK": 3, "queryText": str(i)})
        assert hits["results"][0]["externalId"] == f"node-{i:03d}" and hits["results"][0]["textScore"] > 0
    hits = await client2.call("/trivium/search", {"vector": vec(5), "topK": 40})
    assert "node-005" not in {h["externalId"] for h in hits["results"]} and len(hits["results"]) == 39
    stat = await client2.call("/trivium/stat", {"includeMappingIntegrity": True})
    assert stat["mappingIntegrity"] == {"ok": True, "stored": 39, "indexed": 39, "missingFromIndex": 0,
                                        "staleInIndex": 0}
