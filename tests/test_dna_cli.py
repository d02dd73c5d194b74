"""`stbme dna ...` and `stbme stats` against a data dir prepared with the deterministic embedder.

The CLI opens the sidecar with the real local embedder; commands that embed (remember) use it."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner
from conftest import HashEmbedder, full_sync, settle

from stbme.cli import main
from stbme.services import Services


def run(*args, expect: int = 0) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="stbme")
    assert result.exit_code == expect, (result.output, result.exception)
    return result.output


async def prepare(data_dir) -> None:
    """A chat with a repair loop (two corrections two hours apart), made with the HashEmbedder."""
    sc = Services.open(data_dir, embedder=HashEmbedder())
    await sc.start()
    try:
        chat = [{"role": "user", "name": "Alex", "text": "(OOC: no, her eyes are green, not blue)"},
                {"role": "assistant", "name": "Elena", "text": "Sorry."}]
        await full_sync(sc, "c", chat)
        await settle(sc, "c")
        await sc.store.write(lambda conn: conn.execute("UPDATE nodes SET created_at = created_at - 7200"))
        chat += [{"role": "user", "name": "Alex", "text": "(OOC: no! her eyes are green, not blue!)"},
                 {"role": "assistant", "name": "Elena", "text": "Sorry again."}]
        await full_sync(sc, "c", chat)
        await settle(sc, "c")
    finally:
        await sc.close()


def test_stats_lists_open_repair_loops(tmp_path):
    asyncio.run(prepare(tmp_path))
    out = run("stats", "--data-dir", tmp_path)
    assert "1 open repair loops" in out and "no! her eyes are green" in out
    data = json.loads(run("dna", "stats", "c", "--data-dir", tmp_path, "--json"))
    assert len(data["open_repair_loops"]) == 1 and data["directives"]["correction"] == 2
    assert "open repair loops: 1" in run("dna", "stats", "c", "--data-dir", tmp_path)


def test_list_delete_link_genes_events(tmp_path):
    asyncio.run(prepare(tmp_path))
    listed = json.loads(run("dna", "list", "c", "--type", "correction", "--data-dir", tmp_path, "--json"))
    ids = [n["id"] for n in listed["nodes"]]
    assert len(ids) == 2
    assert " PL " in run("dna", "list", "c", "--type", "correction", "--data-dir", tmp_path)  # pinned, locked
    edge = run("dna", "link", "c", ids[0], ids[1], "--relation", "evolves", "--data-dir", tmp_path).strip()
    assert edge.startswith("e_")
    run("dna", "delete", "c", ids[0], "--data-dir", tmp_path)
    archived = json.loads(run("dna", "list", "c", "--archived", "true", "--data-dir", tmp_path, "--json"))
    assert [n["id"] for n in archived["nodes"]] == [ids[0]]
    assert "gene_correction_fix" in run("dna", "genes", "--data-dir", tmp_path)
    run("dna", "genes", "--disable", "gene_workflow_steps", "--data-dir", tmp_path)
    genes = json.loads(run("dna", "genes", "--json", "--data-dir", tmp_path))["genes"]
    assert next(g for g in genes if g["id"] == "gene_workflow_steps")["enabled"] is False
    assert "no gene" in run("dna", "genes", "--disable", "gene_nope", "--data-dir", tmp_path, expect=1)
    lines = [json.loads(x) for x in run("dna", "events", "--chat", "c", "--jsonl", "--data-dir", tmp_path).splitlines()]
    kinds = [x["kind"] for x in lines]
    assert {"signal", "gene_use", "repair_loop", "link", "archive"} <= set(kinds)
    assert "repair_loop" in run("dna", "events", "--kind", "repair_loop", "--data-dir", tmp_path)


def test_decay_reflect_export_and_errors(tmp_path):
    asyncio.run(prepare(tmp_path))
    assert "memories decayed" in run("dna", "decay", "c", "--data-dir", tmp_path)
    assert "layers:" in run("dna", "reflect", "c", "--data-dir", tmp_path)
    out = tmp_path / "export.json"
    run("dna", "export", "c", "-o", out, "--data-dir", tmp_path)
    doc = json.loads(out.read_text())
    assert doc["nodes"] and doc["dna"]["events"] and doc["dna"]["stats"]["chat_id"] == "c"
    assert "no chat 'nope'" in run("dna", "decay", "nope", "--data-dir", tmp_path, expect=1)
    assert "no memory" in run("dna", "link", "c", "n_x", "n_y", "--data-dir", tmp_path, expect=1)


def test_hub_refuses_public_bind_without_token(tmp_path):
    assert "needs --token" in run("hub", "--host", "0.0.0.0", "--data-dir", tmp_path, expect=1)


def test_remember_a_directive_with_the_local_model(tmp_path):
    asyncio.run(prepare(tmp_path))
    node_id = run("dna", "remember", "c", "Elena is left-handed", "--type", "correction", "--importance", "9",
                  "--data-dir", tmp_path).splitlines()[0].strip()
    listed = json.loads(run("dna", "list", "c", "--type", "correction", "--data-dir", tmp_path, "--json"))
    node = next(n for n in listed["nodes"] if n["id"] == node_id)
    assert node["fields"] == {"content": "Elena is left-handed"} and node["importance"] == 9 and node["source"] == "manual"
    assert "left-handed" in run("dna", "recall", "c", "which hand does Elena use", "--data-dir", tmp_path)
    assert "Invalid value" in run("dna", "remember", "c", "x", "--type", "feeling", "--data-dir", tmp_path, expect=2)
