"""The recall evaluation's scoring and baselines (scripts/evalkit), on tiny hand-made cases. No model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from evalkit import bm25, directives, metrics  # noqa: E402
from evalkit.metrics import Outcome  # noqa: E402
from evalkit.sidecar import anchor_indexes, chains  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def outcome(evidence, ranked, block=None, stale=None, category="fact", lang="en", qid="q"):
    return Outcome(qid, lang, category, evidence, ranked, block=block, stale_in_block=stale)


def test_a_memory_hits_evidence_when_its_range_covers_the_index():
    assert metrics.hits([5, 9], [(1, 4), (8, 10)]) == {9}
    assert metrics.hits([5], [(5, 5)]) == {5}
    assert metrics.hits([5], [(-1, -1), (6, 7)]) == set()


def test_recall_at_k_gives_partial_credit_and_counts_each_evidence_once():
    ranked = [(0, 0), (7, 7), (7, 7), (3, 3), (9, 9)]
    assert metrics.recall_at([3, 7, 11], ranked, 1) == 0
    assert metrics.recall_at([3, 7, 11], ranked, 2) == pytest.approx(1 / 3)
    assert metrics.recall_at([3, 7, 11], ranked, 4) == pytest.approx(2 / 3)  # the duplicate of 7 adds nothing
    assert metrics.first_hit_rank([3, 11], ranked) == 4
    assert metrics.first_hit_rank([11], ranked) is None


def test_scores_average_over_questions_and_pool_the_block_share():
    a = outcome([1], [(1, 1)] + [(50, 50)] * 9, block=[(1, 1)])        # top-10 evidence 1, kept 1
    b = outcome([2, 3], [(2, 2), (3, 3)], block=[(3, 3)])             # top-10 evidence 2, kept 1
    c = outcome([4], [(9, 9)] * 30 + [(4, 4)], block=[])               # nothing in the top 10
    s = metrics.score([a, b, c])
    assert s.n == 3
    assert s.recall[5] == pytest.approx((1 + 1 + 0) / 3)
    assert s.recall[20] == pytest.approx(2 / 3)
    assert s.block_share == pytest.approx(2 / 3)                      # (1 + 1) / (1 + 2), not the mean of 1 and .5


def test_stale_rate_counts_only_correction_questions():
    s = metrics.score([outcome([1], [(1, 1)], block=[], stale=True), outcome([2], [], block=[], stale=False),
                       outcome([3], [], block=[])])
    assert s.stale_rate == pytest.approx(0.5)
    assert s.stale_n == 2
    assert metrics.score([outcome([1], [])]).stale_rate is None       # no block, no stale figure


def test_groups_are_per_language_and_category_with_totals():
    outs = [outcome([1], [], lang="en", category="fact"), outcome([1], [], lang="zh", category="date"),
            outcome([1], [], lang="zh", category="fact")]
    keys = list(metrics.groups(outs, ("fact", "date")))
    assert keys == [("en", "fact"), ("en", "all"), ("zh", "fact"), ("zh", "date"), ("zh", "all"), ("all", "all")]


def test_bm25_ranks_by_rare_shared_terms_and_leaves_out_non_matches():
    docs = ["the brass key is under the mill", "a key and a key and a key", "gulls over the quay", "brass band tonight"]
    index = bm25.BM25(docs)
    ranking = bm25.ranking(index.scores("where is the brass key"))
    assert ranking[0] == 0                      # both rare terms
    assert 2 not in ranking                     # shares only stopwords
    assert index.idf("gulls") > index.idf("key")


def test_bm25_cuts_chinese_into_bigrams():
    assert bm25.terms("钥匙藏在城隍庙") == ["钥匙", "匙藏", "藏在", "在城", "城隍", "隍庙"]
    assert bm25.terms("我 key Key") == ["我", "key", "key"]
    index = bm25.BM25(["苏念把铜钥匙埋在竹林里", "秦羽去了渡口", "铜锣响了"])
    assert bm25.ranking(index.scores("铜钥匙在哪儿"))[0] == 0


def test_rrf_weights_each_ranking():
    assert bm25.rrf([(2.0, [1, 2]), (1.0, [2, 3])]) == [2, 1, 3]
    assert bm25.rrf([(2.0, [1, 2]), (1.0, [2, 1])])[0] == 1    # weight 2 wins the tie in rank positions


def test_sync_chains_match_the_shared_hash_vectors():
    vectors = json.loads((FIXTURES / "hash_vectors.json").read_text(encoding="utf-8"))
    got = chains(vectors["messages"])
    assert got == vectors["chain"]
    assert chains(vectors["messages"][1:], got[0]) == got[1:]   # continuing from a prefix


def test_anchors_are_the_previous_index_and_exponential_steps_before_the_slice():
    assert anchor_indexes(100, 96) == [35, 67, 83, 91, 95]
    assert anchor_indexes(10, 0) == []
    assert anchor_indexes(1001, 1000) == sorted({999} | {1000 - 2 ** j for j in range(10)})


def test_directive_counts_precision_recall_and_false_positive_rate():
    lines = [{"id": "1", "label": "preference", "register": "ooc", "marked": True, "lang": "en"},
             {"id": "2", "label": "correction", "register": "ooc", "marked": False, "lang": "en"},
             {"id": "3", "label": "none", "register": "ic", "marked": False, "lang": "en"},
             {"id": "4", "label": "none", "register": "ic", "marked": False, "lang": "en"}]
    c = directives.count(lines, {"1": ["preference"], "3": ["correction"], "2": []})
    assert (c.created, c.true_pos, c.false_pos) == (2, 1, 1)
    assert c.precision == pytest.approx(0.5)
    assert c.recall == pytest.approx(0.5)
    assert c.false_positive_rate == pytest.approx(0.5)
    assert c.type_accuracy == 1.0
    assert directives.count(lines, {"1": ["workflow"]}).type_accuracy == 0.0


def test_the_labelled_directive_lines_are_sound():
    lines = directives.load()
    assert len(lines) >= 200
    assert len({line["id"] for line in lines}) == len(lines)
    for lang in ("en", "zh"):
        mine = [line for line in lines if line["lang"] == lang]
        assert {line["label"] for line in mine if line["register"] == "ooc"} >= set(directives.TYPES)
        assert sum(line["register"] == "ic" for line in mine) >= 40
        assert all(line["label"] == "none" for line in mine if line["register"] == "ic")


def test_an_answer_counts_only_when_every_part_is_in_the_block():
    block = "- [Mar 4] Elena: She's staying near  the North Quay now.\n- 老刘摔断了腿"
    assert metrics.answer_found("the north quay", block)
    assert metrics.answer_found("老刘; north quay", block)
    assert not metrics.answer_found("老刘; 奶奶", block)  # one part missing
    assert not metrics.answer_found(" ; ", block)        # no answer at all


def _answering(pattern: str, lang: str = "en", category: str = "fact") -> list[Outcome]:
    """One outcome per character of `pattern`: "1" finds the question's evidence first, "0" does not."""
    return [outcome([7], [(7, 7)] if hit == "1" else [(99, 99)], lang=lang, category=category, qid=f"q{i}")
            for i, hit in enumerate(pattern)]


def test_the_bar_is_the_best_fusion_plus_three_points_or_the_best_of_the_products_own_sides():
    product = _answering("1" * 60 + "0" * 40)                      # .60
    fusion = _answering("1" * 55 + "0" * 45)                       # .55 -> the bar .58
    keywords, vectors = _answering("1" * 59 + "0" * 41), _answering("0" * 40 + "1" * 50 + "0" * 10)  # .59, .50
    cells = metrics.bar_cells(product, {"RRF speaker": fusion}, {"keywords": keywords, "vectors": vectors}, ("fact",))
    assert [c.key for c in cells] == [("en", "fact"), ("en", "all")]
    cell = cells[0]
    assert (cell.n, cell.by) == (100, "keywords")
    assert cell.product == pytest.approx(0.60) and cell.bar == pytest.approx(0.59)
    assert cell.met and cell.margin == pytest.approx(0.01)
    assert cell.low <= cell.margin <= cell.high
    fused_higher = metrics.bar_cells(product, {"RRF speaker": _answering("1" * 58 + "0" * 42)}, {}, ("fact",))[0]
    assert fused_higher.by == "RRF speaker" and fused_higher.bar == pytest.approx(0.61) and not fused_higher.met


def test_the_bars_interval_resamples_the_same_questions_for_every_system():
    product = _answering("10" * 20)
    # The same answers: on every draw the margin is 0 (a draw apart per system would scatter it).
    same = metrics.bar_cells(product, {}, {"vectors": _answering("10" * 20)}, ("fact",))[0]
    assert (same.low, same.high, same.reached) == (0.0, 0.0, 1.0)
    # The product misses what the side finds, one question in four: below the bar on every draw with one of them.
    worse = metrics.bar_cells(product, {}, {"vectors": _answering("1110" * 10)}, ("fact",))[0]
    assert worse.high < 0 and worse.reached < 0.01 and not worse.met
    table = metrics.bar_table([same, worse])
    assert "MET" in table.splitlines()[2] and "MISS" in table.splitlines()[3]


def test_a_public_sets_halves_fold_into_the_whole_set():
    outs = [outcome([1], [], lang="en-tune", qid="a"), outcome([1], [], lang="en-held", qid="b"),
            outcome([1], [], lang="zh", qid="c")]
    assert [o.lang for o in metrics.whole_sets(outs)] == ["en", "en", "zh"]
    assert [o.lang for o in outs] == ["en-tune", "en-held", "zh"]      # the originals are left as they were


def test_the_bar_needs_a_system_to_set_it_and_the_same_questions_in_each():
    product = _answering("10")
    with pytest.raises(ValueError, match="no fusion baseline and no side"):
        metrics.bar_cells(product, {}, {}, ("fact",))
    with pytest.raises(ValueError, match="missing from vectors"):
        metrics.bar_cells(product, {}, {"vectors": _answering("1")}, ("fact",))
