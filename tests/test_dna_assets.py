"""GEP assets: gene scoring and selection, genes/capsules through the API, the events export."""

from __future__ import annotations

import orjson
import pytest

from conftest import full_sync, settle
from stbme.api.keys import services_key
from stbme.dna.assets import BUILTIN_GENES, Gene, gene_score, pattern_similarity, select_gene


def gene(id_, triggers, builtin=False, enabled=True):
    return Gene(id_, id_, "", triggers, [{"op": "create_directive"}], enabled=enabled, builtin=builtin)


def test_score_is_type_match_plus_similarity_over_signal_count():
    g = gene("g", [{"type": "error", "pattern": r"forget"}, {"type": "correction", "pattern": ""}])
    signals = [{"type": "error", "content": "you keep forgetting her arm"},      # 0.3 + 0.7 * 1
               {"type": "correction", "content": "green, not blue"},            # 0.3 + 0.7 * 0
               {"type": "decision", "content": "we decided"}]                   # no trigger of its type
    assert gene_score(g, signals) == pytest.approx((1.0 + 0.3) / 3)
    assert gene_score(g, []) == 0


def test_pattern_similarity():
    assert pattern_similarity(r"\beyes?\b", "her eyes are green") == 1.0
    assert pattern_similarity("", "anything") == 0.0
    assert pattern_similarity("tavern (name|sign)", "the tavern is red") == pytest.approx(1 / 3)  # literal words
    assert pattern_similarity("[unclosed", "x") == 0.0


def test_selection_prefers_matching_pattern_then_user_genes_then_generic():
    generic = gene("b_generic", [{"type": "preference", "pattern": ""}], builtin=True)
    specific = gene("a_specific", [{"type": "preference", "pattern": "pacing"}], builtin=True)
    mine = gene("z_mine", [{"type": "preference", "pattern": ""}])
    off = gene("off", [{"type": "preference", "pattern": "pacing"}], enabled=False)
    pacing = [{"type": "preference", "content": "slower pacing"}]
    tone = [{"type": "preference", "content": "dark tone"}]
    assert select_gene([generic, specific, off], pacing) == (specific, 1.0)
    assert select_gene([specific, generic], tone)[0] is generic      # a pattern that did not match loses the tie
    assert select_gene([generic, mine, specific], tone)[0] is mine   # the user's own gene wins a tie
    assert select_gene([generic], [{"type": "error", "content": "x"}]) == (None, 0.0)


def test_builtins_cover_every_signal_type_and_repair_loops():
    types = {t["type"] for g in BUILTIN_GENES for t in g.triggers}
    assert types == {"correction", "preference", "decision", "error", "workflow", "repair_loop"}
    assert select_gene(list(BUILTIN_GENES), [{"type": "preference", "content": "always slower"}])[0].id == \
        "gene_insist_pin"
    assert select_gene(list(BUILTIN_GENES), [{"type": "preference", "content": "slower"}])[0].id == \
        "gene_preference_note"


async def test_gene_crud_through_the_api(client):
    resp = await client.get("/v1/dna/genes")
    data = await resp.json()
    assert resp.status == 200 and {g["id"] for g in data["genes"]} >= {g.id for g in BUILTIN_GENES}
    body = {"name": "Forget names", "description": "Errors about names get pinned",
            "triggers": [{"type": "error", "pattern": "name"}], "actions": [{"op": "create_directive"}, {"op": "pin"}]}
    resp = await client.post("/v1/dna/genes", json=body)
    created = (await resp.json())["gene"]
    assert resp.status == 201 and created["origin"] == "local" and created["enabled"]
    resp = await client.patch(f"/v1/dna/genes/{created['id']}", json={"enabled": False, "name": "Names"})
    assert (await resp.json())["gene"]["name"] == "Names" and not (await resp.json())["gene"]["enabled"]
    resp = await client.post("/v1/dna/genes/select", json={"signals": [{"type": "error", "content": "her name"}]})
    assert (await resp.json())["gene"]["id"] == "gene_error_guard"  # disabled genes are not selected
    resp = await client.delete(f"/v1/dna/genes/{created['id']}")
    assert resp.status == 200
    assert (await client.get(f"/v1/dna/genes/{created['id']}")).status == 404


@pytest.mark.parametrize("body,field", [
    ({"name": "x", "triggers": [{"type": "joke", "pattern": ""}], "actions": [{"op": "pin"}]}, "triggers[0].type"),
    ({"name": "x", "triggers": [{"type": "error", "pattern": "("}], "actions": [{"op": "pin"}]}, "triggers[0].pattern"),
    ({"name": "x", "triggers": [{"type": "error"}], "actions": [{"op": "explode"}]}, "actions[0].op"),
    ({"name": "x", "triggers": [{"type": "error"}], "actions": [{"op": "decay", "amount": 3}]}, "actions[0].amount"),
    ({"name": "", "triggers": [{"type": "error"}], "actions": [{"op": "pin"}]}, "name"),
    ({"name": "x", "triggers": [], "actions": [{"op": "pin"}]}, "triggers"),
    ({"name": "x", "triggers": [{"type": "error"}], "actions": [{"op": "pin"}], "colour": "red"}, "colour"),
])
async def test_bad_genes_are_400_naming_the_field(client, body, field):
    resp = await client.post("/v1/dna/genes", json=body)
    data = await resp.json()
    assert resp.status == 400 and data["ok"] is False and data["field"] == field, data


async def test_builtins_cannot_be_deleted_only_disabled(client):
    resp = await client.delete("/v1/dna/genes/gene_preference_note")
    assert resp.status == 409 and "disable" in (await resp.json())["error"]
    resp = await client.patch("/v1/dna/genes/gene_preference_note", json={"enabled": False})
    assert resp.status == 200


async def test_disabled_gene_means_the_signal_is_not_remembered(client):
    await client.patch("/v1/dna/genes/gene_decision_record", json={"enabled": False})
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: we decided the heist is at midnight)"},
            {"role": "assistant", "name": "Elena", "text": "Fine."}]
    await full_sync(client, "c", chat)
    sc = client.server.app[services_key]
    await settle(sc, "c")
    nodes = (await sc.memories.list("c", limit=50))["nodes"]
    assert not [n for n in nodes if n["type"] == "decision"]
    [event] = await sc.dna_assets.events(chat_id="c", kind="signal")
    assert event["data"]["outcome"] == "ignored"


async def test_capsules_through_the_api_and_per_chat(client):
    sc = client.server.app[services_key]
    resp = await client.post("/v1/dna/capsules", json={"name": "Only decisions", "gene_ids": ["gene_decision_record"],
                                                       "strategy": "aggressive"})
    capsule = (await resp.json())["capsule"]
    assert resp.status == 201
    bad = await client.post("/v1/dna/capsules", json={"name": "x", "gene_ids": ["nope"]})
    assert bad.status == 400 and (await bad.json())["field"] == "gene_ids"
    bad = await client.post("/v1/dna/capsules", json={"name": "x", "gene_ids": [], "strategy": "bold"})
    assert (await bad.json())["field"] == "strategy"
    await client.put("/v1/chats/c/settings", json={"settings": {"dna.capsule": capsule["id"]}})
    chat = [{"role": "user", "name": "Alex", "text": "We decided the heist is at midnight. I want slower pacing."},
            {"role": "assistant", "name": "Elena", "text": "Fine."}]
    await full_sync(client, "c", chat)
    await settle(sc, "c")
    types = [n["type"] for n in (await sc.memories.list("c", limit=50))["nodes"] if n["source"] == "dna"]
    assert types == ["decision"]  # the capsule has no preference gene
    stats = await (await client.get("/v1/chats/c/dna")).json()
    assert stats["stats"]["strategy"]["name"] == "aggressive" and stats["stats"]["capsule"] == capsule["id"]
    assert (await client.delete("/v1/dna/genes/gene_decision_record")).status == 409  # built in


async def test_events_list_and_jsonl_export(client):
    sc = client.server.app[services_key]
    chat = [{"role": "user", "name": "Alex", "text": "(OOC: we decided the heist is at midnight)"},
            {"role": "assistant", "name": "Elena", "text": "Fine."}]
    await full_sync(client, "c", chat)
    await settle(sc, "c")
    chat[0] = {**chat[0], "text": "Hello."}
    await full_sync(client, "c", chat)
    await settle(sc, "c")
    resp = await client.get("/v1/dna/events.jsonl", params={"chat_id": "c"})
    assert resp.status == 200 and resp.content_type == "application/x-ndjson"
    lines = [orjson.loads(x) for x in (await resp.read()).splitlines()]
    kinds = [x["kind"] for x in lines]
    assert kinds.index("gene_use") < kinds.index("rollback")  # oldest first
    assert all({"id", "at", "chat_id", "kind", "data"} <= set(x) for x in lines)
    resp = await client.get("/v1/dna/events", params={"chat_id": "c", "kind": "signal", "limit": "5"})
    assert [e["kind"] for e in (await resp.json())["events"]] == ["signal"]
    assert (await client.get("/v1/dna/events", params={"since": "soon"})).status == 400


async def test_signal_preview_and_dna_stats(client):
    resp = await client.post("/v1/dna/signals", json={"text": "(OOC: no, her eyes are green, not blue)"})
    data = await resp.json()
    assert data["signals"][0]["type"] == "correction" and data["signals"][0]["remember"] is True
    assert data["signals"][0]["wrong"] == "blue" and data["remember_threshold"] == 0.5
    assert (await client.post("/v1/dna/signals", json={"text": ""})).status == 400
    stats = await (await client.get("/v1/dna/stats")).json()
    assert stats["stats"]["genes"] >= len(BUILTIN_GENES) and stats["hub"]["enabled"] is False
    assert (await client.get("/v1/chats/nope/dna")).status == 404
    assert (await client.post("/v1/chats/nope/dna/decay")).status == 404


def test_m013_moves_an_unedited_insist_gene_on_and_leaves_an_edited_one(tmp_path):
    """A database made before the insist gene gave a head start instead of a pin gets the new definition
    (the built-ins are only inserted when missing, so it would keep pinning); a user's edit is kept."""
    import sqlite3

    from stbme.dna import assets
    from stbme.store.db import prepare_connection
    from stbme.store.migrations import MIGRATIONS, migrate

    old = [{"op": "create_directive", "importance": 8}, {"op": "update_target"}, {"op": "pin"}]
    before = [m for m in MIGRATIONS if m[0] < "m013"]
    for name, actions in (("unedited", old), ("edited", old + [{"op": "lock"}])):
        conn = sqlite3.connect(tmp_path / f"{name}.sqlite3", isolation_level=None)
        prepare_connection(conn)
        migrate(conn, before)
        gene = next(g for g in assets.BUILTIN_GENES if g.id == "gene_insist_pin")
        assets._insert_gene(conn, Gene(**{**gene.to_json(), "name": "Pin what the user insists on", "actions": actions}))
        migrate(conn)
        stored = assets.get_gene(conn, "gene_insist_pin")
        if name == "unedited":   # now exactly what a new database gets
            assert (stored.name, stored.description, stored.actions) == (gene.name, gene.description, gene.actions)
            assert not stored.has("pin")
        else:
            assert stored.actions == actions and stored.name == "Pin what the user insists on"
        conn.close()
