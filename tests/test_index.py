"""HNSW index: add, update, remove, grow, query, save/load, verification and rebuild."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import DEADLINE_S, wait_for_sync
from stbme.index.hnsw import EXACT_MAX, ChatIndex, IndexMismatch


def unit(rng, n, dim=16):
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_add_query_update_remove_and_grow():
    rng = np.random.default_rng(0)
    index = ChatIndex(16, "test", capacity=10)
    vecs = unit(rng, 2500)
    ids = [f"n{i}" for i in range(2500)]
    index.upsert(ids, vecs, list(range(2500)))  # grows past the initial capacity
    assert len(index) == 2500
    assert index.query(vecs[7], 1)[0][0] == "n7"
    index.upsert(["n7"], unit(rng, 1)[0:1] * -1 + 0, [9999])  # re-embed in place
    assert index.rev_of["n7"] == 9999 and index.label_of["n7"] == 7
    index.remove(["n8"])
    assert "n8" not in index and all(n != "n8" for n, _ in index.query(vecs[8], 50))
    index.upsert(["n8"], vecs[8:9], [1])  # restore reuses the label
    assert index.label_of["n8"] == 8 and index.query(vecs[8], 1)[0][0] == "n8"
    assert index.next_label == 2500


def test_query_clamps_k_and_handles_empty():
    index = ChatIndex(8, "test")
    assert index.query(np.ones(8, np.float32), 10) == []
    index.upsert(["a"], np.ones((1, 8), np.float32), [1])
    hits = index.query(np.ones(8, np.float32), 10)
    assert [h[0] for h in hits] == ["a"] and hits[0][1] == pytest.approx(1.0, abs=1e-5)


def test_save_load_roundtrip_and_mismatch(tmp_path):
    rng = np.random.default_rng(1)
    index = ChatIndex(16, "model-a")
    vecs = unit(rng, 100)
    index.upsert([f"n{i}" for i in range(100)], vecs, [1] * 100)
    index.remove(["n3"])
    index.save(tmp_path / "idx")
    loaded = ChatIndex.load(tmp_path / "idx", embedder_id="model-a", dim=16)
    assert len(loaded) == 99 and "n3" not in loaded
    assert loaded.query(vecs[5], 1)[0][0] == "n5"
    with pytest.raises(IndexMismatch, match="built by model-a"):
        ChatIndex.load(tmp_path / "idx", embedder_id="model-b", dim=16)
    with pytest.raises(IndexMismatch):
        ChatIndex.load(tmp_path / "missing", embedder_id="model-a", dim=16)
    # a second save replaces the file atomically and removes the old generation
    loaded.save(tmp_path / "idx")
    assert len(list(tmp_path.glob("idx.*.bin"))) == 1


def test_corrupt_index_file_is_a_mismatch(tmp_path):
    index = ChatIndex(8, "m")
    index.upsert(["a", "b"], np.eye(2, 8, dtype=np.float32), [1, 1])
    index.save(tmp_path / "idx")
    for f in tmp_path.glob("idx.*.bin"):
        f.write_bytes(b"garbage")
    with pytest.raises(IndexMismatch):
        ChatIndex.load(tmp_path / "idx", embedder_id="m", dim=8)


async def _chat_with_memories(sidecar, n=12):
    from conftest import full_sync, settle

    chat = []
    for i in range(n):
        chat.append({"role": "user", "name": "Alex", "text": f"Question {i} about the lantern number {i}"})
        chat.append({"role": "assistant", "name": "Elena", "text": f"Answer {i}: the lantern shines {i} times"})
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    return chat


async def test_manager_reconciles_a_stale_saved_index(sidecar):
    await _chat_with_memories(sidecar)
    index = await sidecar.indexes.vectors.get("c")
    await sidecar.indexes.save_dirty()
    before = set(index.rev_of)
    node = (await sidecar.memories.list("c", limit=1, type_="event"))["nodes"][0]
    await sidecar.memories.act("c", node["id"], "archive")  # changes the store after the save
    sidecar.indexes.vectors._items.clear()  # as after a restart
    reloaded = await sidecar.indexes.vectors.get("c")
    assert set(reloaded.rev_of) == before - {node["id"]}


async def test_manager_rebuilds_when_the_file_is_missing_or_from_another_model(sidecar, tmp_path):
    await _chat_with_memories(sidecar)
    expected = set((await sidecar.indexes.vectors.get("c")).rev_of)
    await sidecar.indexes.save_dirty()
    for f in sidecar.indexes.vectors.directory.glob("*.bin"):
        f.unlink()
    sidecar.indexes.vectors._items.clear()
    assert set((await sidecar.indexes.vectors.get("c")).rev_of) == expected
    await sidecar.indexes.save_dirty()
    meta = next(sidecar.indexes.vectors.directory.glob("*.json"))
    meta.write_text(meta.read_text().replace(sidecar.embeddings.id, "other-model"))
    sidecar.indexes.vectors._items.clear()
    assert set((await sidecar.indexes.vectors.get("c")).rev_of) == expected


async def test_index_files_are_named_by_hash_not_chat_id(sidecar):
    from conftest import full_sync

    await full_sync(sidecar, "../../evil/../name", [{"role": "user", "name": "A", "text": "hi"},
                                                    {"role": "assistant", "name": "B", "text": "hello"}])
    await sidecar.indexes.vectors.get("../../evil/../name")
    await sidecar.indexes.save_dirty()
    for path in sidecar.indexes.vectors.directory.iterdir():
        assert "evil" not in path.name and path.parent == sidecar.indexes.vectors.directory


async def test_index_mostly_made_of_deleted_slots_is_rebuilt(sidecar, monkeypatch):
    import stbme.index.vectors as vectors

    monkeypatch.setattr(vectors, "MIN_DEAD_SLOTS", 4)
    await _chat_with_memories(sidecar)
    index = await sidecar.indexes.vectors.get("c")
    live = len(index)
    nodes = (await sidecar.memories.list("c", limit=500, type_="event"))["nodes"]
    for node in nodes[: live - 3]:
        await sidecar.memories.act("c", node["id"], "archive")
    rebuilt = await sidecar.indexes.vectors.get("c")
    assert rebuilt is not index  # swapped for a compact one on the way
    assert rebuilt.next_label - len(rebuilt) <= max(4, 2 * len(rebuilt))  # dead slots stay bounded
    status = await sidecar.chats.status("c")
    assert len(rebuilt) == status["nodes"] - status["unembedded"] < live


def test_equal_similarities_are_ordered_by_node_id_not_label():
    vec = np.ones(8, np.float32) / np.sqrt(8)
    index = ChatIndex(8, "test")
    index.upsert(["z", "m", "a"], np.vstack([vec, vec, vec]), [1, 1, 1])  # labels in the order z, m, a
    assert [n for n, _ in index.query(vec, 3)] == ["a", "m", "z"]


def test_vectors_read_back_follow_every_change():
    # Recall reads vectors back through a cache: an updated, removed or restored memory never gets an old one.
    rng = np.random.default_rng(3)
    index = ChatIndex(8, "test")
    first = rng.standard_normal((3, 8)).astype(np.float32)
    index.upsert(["a", "b", "c"], first, [1, 1, 1])
    before = index.vectors(["a", "b", "c", "a"])
    assert before.shape == (4, 8) and np.array_equal(before[0], before[3])
    assert np.allclose(before[:3], first, atol=1e-6)
    changed = rng.standard_normal((1, 8)).astype(np.float32)
    index.upsert(["b"], changed, [2])
    assert np.allclose(index.vectors(["b"])[0], changed[0], atol=1e-6)
    index.remove(["c"])
    with pytest.raises(RuntimeError):
        index.vectors(["c"])
    index.upsert(["c"], changed, [3])
    assert np.array_equal(index.vectors(["c"])[0], index.vectors(["b"])[0])
    assert index.vectors([]).shape == (0, 8)


def _cone(rng, n, dim=32, spread=0.35):
    """Vectors close together, as a roleplay chat's memories are (cosine about .9 to their centre)."""
    centre = unit(rng, 1, dim)[0]
    v = centre + spread * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
    return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def test_a_small_chat_is_searched_exactly_whatever_order_it_was_built_in():
    rng = np.random.default_rng(5)
    vecs = _cone(rng, 3000)
    ids = [f"n{i}" for i in range(3000)]
    queries = _cone(np.random.default_rng(6), 40)
    forward, backward = ChatIndex(32, "test", ef_search=10), ChatIndex(32, "test", ef_search=10)
    forward.upsert(ids, vecs, [1] * 3000)
    backward.upsert(ids[::-1], vecs[::-1], [1] * 3000)
    assert forward.exact and backward.exact
    for q in queries:
        sims = vecs @ (q / np.linalg.norm(q))
        best = [ids[i] for i in np.argsort(-sims, kind="stable")[:20]]
        assert [n for n, _ in forward.query(q, 20)] == best
        # The same answer; a row's product may differ in its last bit with its place in the matrix (BLAS blocks).
        ahead, behind = forward.query(q, 20), backward.query(q, 20)
        assert [n for n, _ in ahead] == [n for n, _ in behind]
        assert np.allclose([s for _, s in ahead], [s for _, s in behind], rtol=0, atol=1e-6)


def test_past_exact_max_the_graph_answers(monkeypatch):
    import stbme.index.hnsw as hnsw

    monkeypatch.setattr(hnsw, "EXACT_MAX", 1500)
    rng = np.random.default_rng(7)
    vecs = unit(rng, 2000)
    index = ChatIndex(16, "test", capacity=10)
    index.upsert([f"n{i}" for i in range(1400)], vecs[:1400], [1] * 1400)
    index.remove(["n3"])
    assert index.exact and index.query(vecs[5], 1)[0][0] == "n5"
    assert all(n != "n3" for n, _ in index.query(vecs[3], 50))
    index.upsert(["n3"], vecs[3:4], [2])   # restored: found again
    assert index.query(vecs[3], 1)[0][0] == "n3"
    index.upsert([f"n{i}" for i in range(1400, 2000)], vecs[1400:], [1] * 600)
    assert not index.exact and len(index) == 2000
    assert index.query(vecs[1900], 1)[0][0] == "n1900"
    assert np.allclose(index.vectors(["n1900"])[0], vecs[1900], atol=1e-6)


def test_a_loaded_small_chat_is_searched_exactly_again(tmp_path):
    rng = np.random.default_rng(8)
    vecs = _cone(rng, 1200)
    ids = [f"n{i}" for i in range(1200)]
    index = ChatIndex(32, "test", ef_search=10)
    index.upsert(ids, vecs, [1] * 1200)
    index.remove(["n0"])
    index.save(tmp_path / "c")
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32, ef_search=10)
    assert loaded.exact
    for q in _cone(np.random.default_rng(9), 10):
        assert loaded.query(q, 30) == index.query(q, 30)
    assert "n0" not in {n for n, _ in loaded.query(vecs[0], 30)}
    assert np.array_equal(loaded.vectors(["n7"]), index.vectors(["n7"]))


def _saved_small_chat(tmp_path, n=1200):
    vecs = _cone(np.random.default_rng(10), n)
    index = ChatIndex(32, "test", ef_search=10)
    index.upsert([f"n{i}" for i in range(n)], vecs, [1] * n)
    index.remove(["n0"])
    index.save(tmp_path / "c")
    return index


def test_a_loaded_small_chat_reads_its_scanned_copy_from_the_saved_file(tmp_path):
    import orjson

    from stbme.index.hnsw import _file_digest

    index = _saved_small_chat(tmp_path)
    meta_path = tmp_path / "c.json"
    meta = orjson.loads(meta_path.read_bytes())
    copy_path = tmp_path / meta["exact"]["file"]
    # A copy that differs from the graph, with a checksum that fits: the load must take the file's rows.
    np.save(copy_path, np.load(copy_path) * 2, allow_pickle=False)
    meta["exact"]["digest"] = _file_digest(copy_path)
    meta_path.write_bytes(orjson.dumps(meta))
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert np.array_equal(loaded.vectors(["n7"]), index.vectors(["n7"]) * 2)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "older save", "other shape"])
def test_a_damaged_or_absent_scanned_copy_is_rebuilt_from_the_graph(tmp_path, damage):
    import orjson

    from stbme.index.hnsw import _file_digest

    index = _saved_small_chat(tmp_path)
    meta_path = tmp_path / "c.json"
    meta = orjson.loads(meta_path.read_bytes())
    copy_path = tmp_path / meta["exact"]["file"]
    if damage == "garbage":
        copy_path.write_bytes(b"garbage")
    elif damage == "truncated":
        copy_path.write_bytes(copy_path.read_bytes()[:-100])
    elif damage == "missing":
        copy_path.unlink()
    elif damage == "older save":   # saved before the copy was: no entry in the metadata
        del meta["exact"]
    else:
        np.save(copy_path, np.load(copy_path)[:-1], allow_pickle=False)
        meta["exact"]["digest"] = _file_digest(copy_path)
    meta_path.write_bytes(orjson.dumps(meta))
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert loaded.exact
    assert np.array_equal(loaded.vectors(["n7", "n900"]), index.vectors(["n7", "n900"]))
    for q in _cone(np.random.default_rng(11), 5):
        assert loaded.query(q, 30) == index.query(q, 30)


def test_a_save_keeps_one_scanned_copy_and_none_past_exact_max(tmp_path, monkeypatch):
    import stbme.index.hnsw as hnsw

    index = _saved_small_chat(tmp_path)
    index.save(tmp_path / "c")
    assert len(list(tmp_path.glob("c.*.npy"))) == 1 and len(list(tmp_path.glob("c.*.bin"))) == 1
    monkeypatch.setattr(hnsw, "EXACT_MAX", 1500)
    index.upsert([f"m{i}" for i in range(400)], _cone(np.random.default_rng(12), 400), [1] * 400)
    assert not index.exact
    index.save(tmp_path / "c")
    assert not list(tmp_path.glob("c.*.npy")) and len(list(tmp_path.glob("c.*.bin"))) == 1
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert not loaded.exact and len(loaded) == len(index)


def test_a_save_that_dies_before_its_metadata_leaves_the_previous_one_whole(tmp_path, monkeypatch):
    import stbme.index.hnsw as hnsw

    index = _saved_small_chat(tmp_path)
    before = index.query(_cone(np.random.default_rng(13), 1, 32)[0], 30)
    index.upsert(["late"], _cone(np.random.default_rng(14), 1, 32), [1])
    real_replace = hnsw.os.replace

    def dies_at_the_metadata(src, dst):
        if str(dst).endswith(".json"):
            raise OSError("killed")   # as kill -9 after the new index and copy were written
        real_replace(src, dst)
    monkeypatch.setattr(hnsw.os, "replace", dies_at_the_metadata)
    with pytest.raises(OSError):
        index.save(tmp_path / "c")
    monkeypatch.setattr(hnsw.os, "replace", real_replace)
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert "late" not in loaded and loaded.exact
    assert loaded.query(_cone(np.random.default_rng(13), 1, 32)[0], 30) == before
    loaded.save(tmp_path / "c")   # the next save clears what the dead one left
    assert len(list(tmp_path.glob("c.*.npy"))) == 1 and len(list(tmp_path.glob("c.*.bin"))) == 1


@pytest.mark.parametrize("writing", ["the index file's digest", "the scanned copy", "the metadata"])
def test_an_upsert_while_a_save_writes_is_not_in_that_save(tmp_path, monkeypatch, writing):
    import stbme.index.hnsw as hnsw

    index = ChatIndex(32, "test")
    vecs = _cone(np.random.default_rng(15), 50)
    index.upsert([f"n{i}" for i in range(50)], vecs, [1] * 50)
    saved_n1 = index.vectors(["n1"]).copy()
    module, name = {"the index file's digest": (hnsw, "_file_digest"), "the scanned copy": (hnsw.np, "save"),
                    "the metadata": (hnsw.orjson, "dumps")}[writing]
    real = getattr(module, name)

    def an_upsert_comes_first(*args, **kwargs):
        # The save thread has let go of the lock; the loop thread adds a memory and re-embeds another.
        monkeypatch.setattr(module, name, real)
        index.upsert(["late", "n1"], _cone(np.random.default_rng(16), 2), [1, 2])
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, an_upsert_comes_first)
    index.save(tmp_path / "c")
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert "late" not in loaded and loaded.rev_of["n1"] == 1   # the save's state: the store reconciles the rest
    assert np.array_equal(loaded.vectors(["n1"]), saved_n1)


class _HeldSave:
    """hnswlib's index with save_index held until the test lets it go (the rest passes through)."""

    def __init__(self, graph):
        self._graph = graph
        self.writing, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self._graph, name)

    def save_index(self, path):
        self.writing.set()
        self.release.wait(2 * DEADLINE_S)
        self._graph.save_index(path)


@pytest.mark.parametrize("size", [50, EXACT_MAX + 1])
def test_a_query_goes_on_while_a_save_writes_the_index_file_and_an_upsert_waits(tmp_path, size):
    """Recall queries on the event loop: a save in a worker thread must not hold it up (it only reads the
    index), while an upsert meanwhile must wait, or the file would hold a label its metadata lacks."""
    index = ChatIndex(32, "test")
    vecs = _cone(np.random.default_rng(17), size)
    index.upsert([f"n{i}" for i in range(size)], vecs, [1] * size)
    held = index._index = _HeldSave(index._index)
    saver = threading.Thread(target=index.save, args=(tmp_path / "c",))
    saver.start()
    answered, upserted = [], threading.Event()
    upserter = threading.Thread(target=lambda: (index.upsert(["late"], vecs[:1], [1]), upserted.set()))
    try:
        wait_for_sync(held.writing.is_set, "the save to start writing the index file")
        asker = threading.Thread(target=lambda: answered.append(index.query(vecs[3], 5)))
        asker.start()
        wait_for_sync(lambda: answered, "a query while the index file is written")
        assert answered[0][0][0] == "n3"
        upserter.start()
    finally:
        held.release.set()
        saver.join()
    upserter.join()
    assert upserted.is_set() and "late" in index
    loaded = ChatIndex.load(tmp_path / "c", embedder_id="test", dim=32)
    assert "late" not in loaded and len(loaded) == size   # the upsert waited for the file


def test_the_read_write_lock_shares_reads_and_gives_a_writer_the_object_alone():
    from stbme.index.rwlock import ReadWriteLock

    lock, events = ReadWriteLock(), []
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()

    def first_reader():
        with lock.reading():
            first_in.set()
            first_out.wait(2 * DEADLINE_S)
            events.append("first reader left")

    def second_reader():
        with lock.reading():
            second_in.set()

    def writer():
        with lock.writing():
            events.append("wrote")
    threads = [threading.Thread(target=first_reader)]
    threads[0].start()
    wait_for_sync(first_in.is_set, "the first reader")
    threads.append(threading.Thread(target=second_reader))
    threads[1].start()
    wait_for_sync(second_in.is_set, "a second reader beside the first")
    threads.append(threading.Thread(target=writer))
    threads[2].start()
    first_out.set()
    for thread in threads:
        thread.join()
    assert events == ["first reader left", "wrote"]   # the writer waited for the reader

    held, leave = threading.Event(), threading.Event()

    def holding_writer():
        with lock.writing():
            held.set()
            leave.wait(2 * DEADLINE_S)
            events.append("writer left")

    def reader():
        with lock.reading():
            events.append("reader in")
    holder = threading.Thread(target=holding_writer)
    holder.start()
    wait_for_sync(held.is_set, "the writer to hold the lock")
    late_reader = threading.Thread(target=reader)
    late_reader.start()
    leave.set()
    holder.join()
    late_reader.join()
    assert events[-2:] == ["writer left", "reader in"]   # a reader waits for a writer that holds the lock


def test_metadata_naming_labels_its_file_lacks_is_a_mismatch(tmp_path):
    import orjson

    index = ChatIndex(8, "m")
    index.upsert(["a", "b"], np.eye(2, 8, dtype=np.float32), [1, 1])
    index.save(tmp_path / "idx")
    meta_path = tmp_path / "idx.json"
    meta = orjson.loads(meta_path.read_bytes())
    meta["labels"]["late"], meta["revs"]["late"] = 2, 1   # as an older revision's save could write
    meta_path.write_bytes(orjson.dumps(meta))
    with pytest.raises(IndexMismatch, match="labels its file does not hold"):
        ChatIndex.load(tmp_path / "idx", embedder_id="m", dim=8)
