"""The CLI tells the truth (issue 21 §1): a busy port is one line before anything is created, a setting set
through a server echoes its new value, an unknown name gets similar names, `stbme recall` changes nothing
and says when it answered without vectors, a file that is not a chat is refused, the same export imported
twice says nothing changed, a chat ending with the user's message is processed to 100%, `stbme --help`
loads no server, and the docs say what the server answers. (The server's own sides of these: test_api.py,
test_recall.py, test_import_tied.py, test_progress.py.)"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DEADLINE_S, one_line_error, serve_process, st_chat_file, st_message
from test_cli import data_dir, run  # noqa: F401 - the CLI runner and the prepared data dir (a fixture)

from stbme.api import DEFAULT_PORT
from stbme.api.hub import DEFAULT_HUB_PORT
from stbme.cli.commands import DEFAULT_PORT as CLI_PORT
from stbme.cli.dna import DEFAULT_HUB_PORT as CLI_HUB_PORT

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("aiohttp", "numpy", "hnswlib", "tiktoken", "stbme.services", "stbme.api")


def chat_file(path: Path, messages: list[tuple[bool, str]]) -> Path:
    return st_chat_file(path, [st_message(user, text) for user, text in messages])


# -- serve: a busy port ------------------------------------------------------------------------------------
def test_a_busy_port_is_one_line_before_the_banner_and_before_anything_is_created(tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        result = run("serve", "--port", port, "--data-dir", tmp_path / "data", expect=1)
    line = one_line_error(result)
    assert f"port {port}" in line and "in use" in line and "--port" in line
    assert "ST-BME sidecar" not in result.output
    assert not (tmp_path / "data").exists()


def test_the_cli_and_the_server_default_to_the_same_ports():
    assert CLI_PORT == DEFAULT_PORT and CLI_HUB_PORT == DEFAULT_HUB_PORT


# -- settings --------------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_settings_set_through_a_server_echo_the_new_value(tmp_path):
    data = tmp_path / "data"
    with serve_process(data):
        result = run("settings", "recall.budget_tokens", "1200", "--data-dir", data)
        assert result.stdout.startswith("recall.budget_tokens = 1200   (default 800)"), result.stdout
        result = run("settings", "recall.budget_tokens", "700", "--chat", "c9", "--data-dir", data)
        assert result.stdout.startswith("recall.budget_tokens = 700"), result.stdout
        assert json.loads(run("settings", "--json", "--data-dir", data).stdout)["recall.budget_tokens"] == 1200


@pytest.mark.parametrize("key, says, never", [
    ("server.port", "stbme serve --port", "importance"),
    ("server.host", "stbme serve --host", "importance"),
    ("recall.max_memory", "did you mean recall.max_memories", None),
    ("budget_tokens", "did you mean recall.budget_tokens", None),
])
def test_an_unknown_setting_gets_similar_names_not_substrings(tmp_path, key, says, never):
    result = run("settings", key, "9000", "--data-dir", tmp_path / "data", "--create", expect=1)
    line = one_line_error(result)
    assert says in line and (never is None or never not in line)


# -- recall ------------------------------------------------------------------------------------------------------
def node_state(data: Path) -> list:
    with sqlite3.connect(data / "stbme.sqlite3") as conn:
        return conn.execute("SELECT id, access_count, weight, last_access FROM nodes ORDER BY id").fetchall()


def test_recall_changes_nothing_stored(data_dir):
    before = node_state(data_dir)
    result = run("recall", "c1", "where is the silver key buried?", "--data-dir", data_dir)
    assert "oak tree" in result.stdout
    assert node_state(data_dir) == before
    # `stbme dna recall` says it reinforces, and does
    run("dna", "recall", "c1", "where is the silver key buried?", "--data-dir", data_dir)
    assert node_state(data_dir) != before


def test_recall_without_vectors_says_so(data_dir):
    run("settings", "embed.provider", "openai", "--data-dir", data_dir, expect=1)   # refused: no URL
    run("settings", "embed.openai_url", "http://127.0.0.1:9/v1", "--data-dir", data_dir)
    run("settings", "embed.retries", "0", "--data-dir", data_dir)
    run("settings", "embed.provider", "openai", "--data-dir", data_dir)
    result = run("recall", "c1", "where is the silver key buried?", "--data-dir", data_dir)
    assert "oak tree" in result.stdout                           # keywords still answer
    assert re.search(r"^-- vector search unavailable: ", result.stderr, re.M), result.stderr


# -- ingest ----------------------------------------------------------------------------------------------------
def test_ingest_of_a_file_that_is_not_a_chat_is_an_error_and_creates_nothing(tmp_path):
    script = tmp_path / "tool.py"
    script.write_text('import sys\nprint("hello")\n{"not": "a message"}\n', encoding="utf-8")
    result = run("ingest", script, "--data-dir", tmp_path / "data", "--create", expect=1)
    assert "is not a SillyTavern chat file" in one_line_error(result) and "nothing was ingested" in result.stderr
    assert not (tmp_path / "data").exists()


def test_ingest_skips_what_is_not_a_chat_in_a_folder(tmp_path):
    folder = tmp_path / "chats"
    folder.mkdir()
    (folder / "notes.jsonl").write_text('{"a": 1}\n{"b": 2}\n', encoding="utf-8")
    chat_file(folder / "Elena - 1.jsonl", [(True, "Hello Elena."), (False, "Hello Alex, the kettle is on.")])
    result = run("ingest", folder, "--no-wait", "--data-dir", tmp_path / "data", "--create")
    assert "skipping" in result.stderr and "notes.jsonl is not a SillyTavern chat file" in result.stderr
    chats = json.loads(run("stats", "--json", "--data-dir", tmp_path / "data").stdout)["chats"]
    assert [c["chat_id"] for c in chats] == ["Elena - 1"]


@pytest.mark.e2e
def test_a_chat_ending_with_the_users_message_reaches_100_and_that_message_is_found(tmp_path):
    data = tmp_path / "data"
    path = chat_file(tmp_path / "Elena - 2.jsonl", [
        (True, "Where did you put the lantern?"), (False, "On the hook by the cellar door."),
        (True, "Good. Tomorrow we sail to the saffron islands with the cartographer Odalys."),
    ])
    result = run("ingest", path, "--data-dir", data, "--create")
    assert "Elena - 2: 3 messages (chat); 3 processed (100%)" in result.stderr, result.stderr
    # A real recall leaves out what is still in the prompt (the last messages): ask for every message.
    run("settings", "recall.exclude_recent_messages", "0", "--chat", "Elena - 2", "--data-dir", data)
    assert not (data / "indexes").exists()      # the ingest made vectors; no recall has loaded an index yet
    found = json.loads(run("recall", "Elena - 2", "saffron islands cartographer", "--json", "--data-dir", data).stdout)
    assert "Odalys" in found["text"]
    # the recall waited for the vector index rather than answer from keywords, and saved the index it built
    assert "degraded" not in found and any(m["score_parts"].get("vector") for m in found["memories"])
    assert list((data / "indexes").iterdir())


# -- import ------------------------------------------------------------------------------------------------------
def test_the_same_export_imported_again_changes_nothing_and_says_so(data_dir, tmp_path):
    out = tmp_path / "c1.json"
    run("export", "c1", "-o", out, "--data-dir", data_dir)
    first = run("import", "c2", out, "--data-dir", data_dir)
    assert "imported" in first.stderr and "tied to messages" in first.stderr

    def rows():
        with sqlite3.connect(data_dir / "stbme.sqlite3") as conn:
            return (conn.execute("SELECT id, rev FROM nodes WHERE chat_id = 'c2' ORDER BY id").fetchall(),
                    conn.execute("SELECT count(*) FROM journal WHERE chat_id = 'c2'").fetchone())

    before = rows()
    again = run("import", "c2", out, "--data-dir", data_dir)
    nodes = len(json.loads(out.read_text(encoding="utf-8"))["nodes"])
    assert f"nothing changed: c2 already holds these {nodes} memories" in again.stderr, again.stderr
    assert rows() == before
    # a separate memory (another chat's export) already there is not doubled, and is said to be there
    other = run("import", "c3", out, "--data-dir", data_dir)
    assert "imported" in other.stderr
    again = run("import", "c3", out, "--data-dir", data_dir)
    assert "nothing changed" in again.stderr


# -- speed: the help and the version load no server -----------------------------------------------------------
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["recall", "--help"]])
def test_help_and_version_import_no_server(args):
    script = (f"import sys\nfrom stbme.cli import main\ntry:\n    main({args!r}, prog_name='stbme')\n"
              f"except SystemExit:\n    pass\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S).stdout
    assert out.strip().splitlines()[-1] == "[]", out


@pytest.mark.e2e
def test_a_command_through_a_running_server_imports_no_server(tmp_path):
    data = tmp_path / "data"
    with serve_process(data):
        run("ingest", chat_file(tmp_path / "Elena - 3.jsonl", [(True, "The key?"), (False, "Under the oak.")]),
            "--data-dir", data)
        run("settings", "recall.exclude_recent_messages", "0", "--data-dir", data)
        script = ("import sys\nfrom stbme.cli import main\ntry:\n"
                  f"    main(['recall', 'Elena - 3', 'key', '--data-dir', {str(data)!r}], prog_name='stbme')\n"
                  f"except SystemExit as exc:\n    print('exit', exc.code)\n"
                  f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=DEADLINE_S,
                              env={**os.environ, "STBME_TOKEN": ""})
    lines = proc.stdout.strip().splitlines()
    assert "oak" in proc.stdout and lines[-2] == "exit 0" and lines[-1] == "[]", (proc.stdout, proc.stderr)


# -- docs ----------------------------------------------------------------------------------------------------------
def test_docs_link_only_inside_the_repository():
    for doc in ("docs/architecture.md", "docs/api.md", "docs/security.md", "README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        assert "../shared" not in text and "](../" not in text, doc


async def test_the_health_shape_in_the_api_docs_is_what_the_server_answers(client):
    health = await (await client.get("/health")).json()
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    documented = api[api.index("`GET /health` ->"):api.index("## Live channel")]
    for key in health:
        assert f'"{key}"' in documented, f"/health {key!r} is not in docs/api.md"
    for part in ("embedder", "store", "queue", "llm"):
        for key in health[part]:
            assert f'"{key}"' in documented, f"/health {part}.{key} is not in docs/api.md"
