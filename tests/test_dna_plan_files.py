"""The plan's asset files (seed 001, `GEPAssets`, lines 226-278): genes.json, capsules.json and events.jsonl
carried both ways (`stbme dna export-assets|import-assets`, `GET|POST /v1/dna/assets`), and the plan's
gene actions accepted (mapped to ours, or kept as templates that do nothing here)."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner
from conftest import HashEmbedder, full_sync, settle

from stbme.api.keys import services_key
from stbme.cli import main
from stbme.services import Services

PLAN_GENES = [   # what the plan's create_gene appends to genes.json
    {"id": "gene_1713370000", "name": "修复 API 超时", "description": "超时就加重试",
     "triggers": [{"type": "error", "pattern": "超时"}], "actions": ["检查超时设置", "增加重试"],
     "created": 1713370000.123456, "usage_count": 3},
    {"id": "gene_1713370100", "name": "记住偏好", "description": "",
     "triggers": [{"type": "preference", "pattern": "喜欢"}],
     "actions": [{"type": "remember", "importance": 9}, "pin"], "created": 1713370100.5, "usage_count": 0},
]
PLAN_CAPSULES = [
    {"id": "capsule_1713370200", "name": "API 稳定性加固", "gene_ids": ["gene_1713370000", "gene_1713370100"],
     "strategy": "harden", "created": 1713370200.0},
]
PLAN_EVENTS = [   # what the plan's record_event appends to events.jsonl
    {"timestamp": 1713370300.5, "type": "gene_selected", "details": {"gene_id": "gene_1713370000", "score": 0.93}},
    {"timestamp": 1713370301.0, "type": "memory_created", "details": {"content": "用户喜欢慢节奏"}},
]


def cli(*args, expect: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="stbme")
    assert result.exit_code == expect, (result.output, result.exception)
    return result.output


def write_plan_dir(path, genes=PLAN_GENES, capsules=PLAN_CAPSULES, events=PLAN_EVENTS):
    path.mkdir(parents=True, exist_ok=True)
    (path / "genes.json").write_text(json.dumps(genes, ensure_ascii=False, indent=2), encoding="utf-8")
    (path / "capsules.json").write_text(json.dumps(capsules, ensure_ascii=False, indent=2), encoding="utf-8")
    (path / "events.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events),
                                       encoding="utf-8")


def read_plan_dir(path):
    return (json.loads((path / "genes.json").read_text("utf-8")), json.loads((path / "capsules.json").read_text("utf-8")),
            [json.loads(line) for line in (path / "events.jsonl").read_text("utf-8").splitlines()])


async def with_services(data_dir, fn):
    sc = Services.open(data_dir, embedder=HashEmbedder())
    await sc.start()
    try:
        return await fn(sc)
    finally:
        await sc.close()


def test_the_plans_files_are_imported_and_come_back_out_the_same(tmp_path):
    plan = tmp_path / "plan-memory"
    write_plan_dir(plan)
    out = cli("dna", "import-assets", plan, "--data-dir", tmp_path / "data", "--create")
    assert "genes: 2 added" in out and "events: 2 added" in out
    assert "unknown strategy 'harden', using balanced" in out
    assert "2 of 2 actions kept as templates" in out and "never selected" in out

    async def check(sc):
        gene = await sc.dna_assets.get_gene("gene_1713370000")
        assert (gene["created"], gene["usage_count"], gene["origin"]) == (1713370000.123456, 3, "local")
        assert gene["actions"] == [{"op": "template", "original": "检查超时设置"},
                                   {"op": "template", "original": "增加重试"}]
        other = await sc.dna_assets.get_gene("gene_1713370100")
        assert other["actions"] == [{"op": "create_directive", "importance": 9.0,
                                     "original": {"type": "remember", "importance": 9}},
                                    {"op": "pin", "original": "pin"}]
        capsule = await sc.dna_assets.get_capsule("capsule_1713370200")
        assert capsule["strategy"] == "balanced" and capsule["gene_ids"] == PLAN_CAPSULES[0]["gene_ids"]
        events = await sc.dna_assets.events(oldest_first=True, limit=10)
        assert [(e["at"], e["kind"], e["data"], e["chat_id"]) for e in events[:2]] == [
            (e["timestamp"], e["type"], e["details"], None) for e in PLAN_EVENTS]
        # the template-only gene never wins over a built-in; the mapped one runs
        chosen = await sc.dna_assets.select_gene([{"type": "error", "content": "又超时了"}])
        assert chosen["gene"]["id"] == "gene_error_guard"
        chosen = await sc.dna_assets.select_gene([{"type": "preference", "content": "我喜欢慢节奏"}])
        assert chosen["gene"]["id"] == "gene_1713370100"
    asyncio.run(with_services(tmp_path / "data", check))

    # out again: the plan's genes, capsule and events as the plan wrote them (our keys added after)
    cli("dna", "export-assets", tmp_path / "out", "--data-dir", tmp_path / "data")
    genes, capsules, events = read_plan_dir(tmp_path / "out")
    by_id = {g["id"]: g for g in genes}
    for written in PLAN_GENES:
        assert {k: by_id[written["id"]][k] for k in written} == written
    assert {"gene_correction_fix", "gene_repair_escalate"} <= set(by_id)   # built-ins travel too
    [capsule] = [c for c in capsules if c["id"] == "capsule_1713370200"]
    assert {k: capsule[k] for k in PLAN_CAPSULES[0]} == {**PLAN_CAPSULES[0], "strategy": "balanced"}
    assert events[:2] == PLAN_EVENTS
    assert events[2]["type"] == "import_assets" and set(events[2]) == {"timestamp", "type", "details"}
    # importing the same files again adds nothing
    out = cli("dna", "import-assets", plan, "--data-dir", tmp_path / "data", "--create")
    assert "genes: 0 added, 0 replaced, 2 kept" in out and "events: 0 added, 2 already there" in out


async def make_history(sc):
    """A chat whose signals made directives and events; a user gene with a plan action; a capsule."""
    chat = [{"role": "user", "name": "Alex", "text": "I want slower pacing, don't rush the romance."},
            {"role": "assistant", "name": "Elena", "text": "Alright."},
            {"role": "user", "name": "Alex", "text": "(OOC: we decided the heist is at midnight)"},
            {"role": "assistant", "name": "Elena", "text": "Midnight it is."}]
    await full_sync(sc, "chat/1", chat)
    await settle(sc, "chat/1")
    gene = await sc.dna_assets.create_gene({"name": "Heists", "triggers": [{"type": "decision", "pattern": "heist"}],
                                            "actions": [{"op": "create_directive", "importance": 9}, "plan it"]})
    await sc.dna_assets.create_capsule({"name": "Crime", "gene_ids": [gene["id"]], "strategy": "aggressive"})
    await sc.dna_assets.edit_gene("gene_workflow_steps", {"enabled": False})


def test_export_import_round_trip_between_sidecars(tmp_path):
    asyncio.run(with_services(tmp_path / "a", make_history))
    cli("dna", "export-assets", tmp_path / "files", "--data-dir", tmp_path / "a")
    cli("dna", "import-assets", tmp_path / "files", "--replace", "--data-dir", tmp_path / "b", "--create")

    async def snapshot(sc):
        genes = {g["id"]: {k: g[k] for k in ("name", "description", "triggers", "actions", "enabled", "usage_count",
                                             "created", "origin", "builtin")} for g in await sc.dna_assets.list_genes()}
        capsules = {c["id"]: {k: c[k] for k in ("name", "gene_ids", "strategy", "enabled", "created")}
                    for c in await sc.dna_assets.list_capsules()}
        events = [(e["at"], e["kind"], e["data"], e["chat_id"])
                  for e in await sc.dna_assets.events(oldest_first=True, limit=1000) if e["kind"] != "import_assets"]
        return genes, capsules, events

    a = asyncio.run(with_services(tmp_path / "a", snapshot))
    b = asyncio.run(with_services(tmp_path / "b", snapshot))
    def own(genes):   # a built-in's definition, counts and age are each sidecar's own; its switch travels
        return {i: g if not g["builtin"] else g["enabled"] for i, g in genes.items()}
    assert own(a[0]) == own(b[0]) and a[1] == b[1]
    assert any(not g["builtin"] and g["origin"] == "local" for g in b[0].values())
    assert not b[0]["gene_workflow_steps"]["enabled"]
    assert a[2] == b[2] and any(e[3] == "chat/1" for e in a[2])
    assert {"signal", "gene_use"} <= {e[1] for e in a[2]}
    # one chat's events only
    cli("dna", "export-assets", tmp_path / "one", "--chat", "nobody", "--data-dir", tmp_path / "a")
    assert read_plan_dir(tmp_path / "one")[2] == []


@pytest.mark.parametrize("breakage,message", [
    (lambda d: (d / "genes.json").write_text("[{", encoding="utf-8"), "genes.json is not valid JSON"),
    (lambda d: (d / "events.jsonl").write_text('{"timestamp": 1, "type": "x", "details": {}}\n{"type": "y"}\n',
                                               encoding="utf-8"), "events.jsonl line 2.timestamp"),
    (lambda d: (d / "capsules.json").write_text('[{"id": "capsule_1", "name": "c", "gene_ids": ["gene_nope"]}]',
                                                encoding="utf-8"), "capsules.json[0]: no gene 'gene_nope'"),
    (lambda d: (d / "genes.json").write_text('[{"name": "g", "triggers": [], "actions": ["x"]}]', encoding="utf-8"),
     "genes.json[0]: 'triggers' must be"),
])
def test_a_bad_file_imports_nothing_and_says_where(tmp_path, breakage, message):
    plan = tmp_path / "plan"
    write_plan_dir(plan)
    breakage(plan)
    out = cli("dna", "import-assets", plan, "--data-dir", tmp_path / "data", "--create", expect=1)
    assert message in out, out

    async def nothing_added(sc):
        genes = {g["id"] for g in await sc.dna_assets.list_genes()}
        return genes & {g["id"] for g in PLAN_GENES}, await sc.dna_assets.events(kind="gene_selected")
    assert asyncio.run(with_services(tmp_path / "data", nothing_added)) == (set(), [])


def test_an_empty_directory_is_an_error(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "holds none of genes.json" in cli("dna", "import-assets", tmp_path / "empty", "--data-dir",
                                               tmp_path / "data", "--create", expect=1)


async def test_the_same_through_the_api(client):
    resp = await client.post("/v1/dna/assets", json={"genes": PLAN_GENES, "capsules": PLAN_CAPSULES,
                                                     "events": PLAN_EVENTS})
    report = (await resp.json())["imported"]
    assert resp.status == 200 and report["genes"]["added"] == 2 and report["events"]["added"] == 2
    data = await (await client.get("/v1/dna/assets")).json()
    mine = [g for g in data["genes"] if g["id"] in {"gene_1713370000", "gene_1713370100"}]
    assert [{k: g[k] for k in PLAN_GENES[0]} for g in mine] == PLAN_GENES
    resp = await client.get("/v1/dna/events.jsonl", params={"format": "plan", "kind": "gene_selected"})
    assert resp.status == 200 and [json.loads(x) for x in (await resp.text()).splitlines()] == PLAN_EVENTS[:1]
    resp = await client.get("/v1/dna/events.jsonl", params={"kind": "gene_selected"})
    [ours] = [json.loads(x) for x in (await resp.text()).splitlines()]
    assert (ours["at"], ours["kind"], ours["data"]) == (1713370300.5, "gene_selected", PLAN_EVENTS[0]["details"])
    for body, field in (({"genes": {}}, "genes"), ({"events": [{"timestamp": "now", "type": "x"}]}, "events[0].timestamp"),
                        ({"genes": [{"name": "x", "triggers": [{"type": "error"}], "actions": [{"op": "boom"}]}]},
                         "genes[0].actions[0].op"), ({"replace": "yes"}, "replace"), ({"colour": 1}, "colour")):
        resp = await client.post("/v1/dna/assets", json=body)
        assert resp.status == 400 and (await resp.json())["field"] == field, (body, await resp.text())
    assert (await client.get("/v1/dna/events.jsonl", params={"format": "xml"})).status == 400


async def test_the_plans_actions_through_the_gene_api(client):
    resp = await client.post("/v1/dna/genes", json={
        "name": "Plan gene", "triggers": [{"type": "error", "pattern": "name"}],
        "actions": ["检查名字", {"action": "LOCK"}, {"type": "reinforce", "amount": 5}, 42, ["a", "b"], None],
        "created": 1713370000, "usage_count": 2})
    gene = (await resp.json())["gene"]
    assert resp.status == 201, gene
    assert [a["op"] for a in gene["actions"]] == ["template", "lock", "template", "template", "template", "template"]
    assert gene["actions"][2]["original"] == {"type": "reinforce", "amount": 5}   # out of range: kept inert
    assert (gene["created"], gene["usage_count"]) == (1713370000, 2)
    # our own shape stays strict
    for actions, field in (([{"op": "explode"}], "actions[0].op"), ([{"op": "template"}], "actions[0].original"),
                           (["x" * 3000], "actions[0]"), ([{"op": "pin"}] * 33, "actions")):
        resp = await client.post("/v1/dna/genes", json={"name": "x", "triggers": [{"type": "error"}],
                                                        "actions": actions})
        assert resp.status == 400 and (await resp.json())["field"] == field, await resp.text()
    resp = await client.post("/v1/dna/genes", json={"name": "x", "triggers": [{"type": "error"}], "actions": ["pin"],
                                                    "created": -1})
    assert resp.status == 400 and (await resp.json())["field"] == "created"
    # a gene that does something here, then edited through the API with what it listed, is unchanged
    edited = await client.patch(f"/v1/dna/genes/{gene['id']}", json={"actions": gene["actions"]})
    assert (await edited.json())["gene"]["actions"] == gene["actions"]
    sc = client.server.app[services_key]
    [event] = await sc.dna_assets.events(kind="gene_create")
    assert event["data"]["gene_id"] == gene["id"]


def test_an_unwritable_directory_is_a_clear_error(tmp_path):
    (tmp_path / "a-file").write_text("x")
    asyncio.run(with_services(tmp_path / "data", lambda sc: sc.dna_assets.list_genes()))
    out = cli("dna", "export-assets", tmp_path / "a-file" / "memory", "--data-dir", tmp_path / "data", expect=1)
    assert "cannot write to" in out and "a-file" in out
