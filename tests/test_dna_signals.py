"""DNA signals: English and Chinese sentences (positives and near-misses), OOC text, the confidence rule."""

from __future__ import annotations

import pytest

from stbme.dna.signals import (best_per_unit, confidence, correction_terms, extract_signals, split_ooc,
                               SIGNAL_PATTERNS)

POSITIVES = [
    # the roleplay examples
    ("no, her eyes are green, not blue", "correction"),
    ("I want slower pacing, don't rush the romance", "preference"),
    ("we decided the heist is at midnight", "decision"),
    ("you keep forgetting she lost her arm", "error"),
    ("first describe the scene, then the dialogue", "workflow"),
    # more English
    ("She is a knight, not a mage.", "correction"),
    ("It's not Myra, it's Mira.", "correction"),
    ("The tavern should be on the east side, not the west.", "correction"),
    ("That's wrong, the correct one is the silver key.", "correction"),
    ("Correction: Marcus is nineteen.", "correction"),
    ("I'd like you to write longer replies.", "preference"),
    ("Please stop writing for my character.", "preference"),
    ("From now on, keep the tone dark.", "preference"),
    ("Let's go with the northern route instead of the river.", "decision"),
    ("It's settled: the wedding happens in spring.", "decision"),
    ("You forgot that the bridge collapsed.", "error"),
    ("The spell failed because you ignored the cost.", "error"),
    ("Same mistake again with the timeline.", "error"),
    ("Step 1: describe the weather.", "workflow"),
    # the seed's Chinese patterns
    ("她的眼睛不是蓝色的，是绿色的", "correction"),
    ("应该是骑士而不是法师", "correction"),
    ("你错了，正确的是银钥匙", "correction"),
    ("我希望节奏慢一点", "preference"),
    ("不要替我的角色说话", "preference"),
    ("以后每次回复都写长一点", "preference"),
    ("我们决定午夜行动", "decision"),
    ("选择北边的路而不是河道", "decision"),
    ("最终采用第二个方案", "decision"),
    ("这次失败的原因是地图错了", "error"),
    ("错误的根因是时间线混乱", "error"),
    ("又踩坑了", "error"),
    ("先描写场景，再写对话", "workflow"),
    ("战斗流程要清楚", "workflow"),
    ("按步骤来写", "workflow"),
]

NEAR_MISSES = [
    "I want the sword.",                       # the character's wish, not a story preference
    "She smiled and walked away.",
    "Did Elena say anything about the map?",
    "The guard was tired after the long night.",
    "I decided to wait.",                      # a character's decision, narrated
    "He forgot his coat at the inn.",           # someone forgot something in the story
    "Not now.",
    "First light broke over the hills.",       # "first" without a "then"
    "他笑了笑，转身离开。",
    "我们到了城门口。",
    "她是一名骑士。",
    "The error in his plan was obvious to everyone.",
]


@pytest.mark.parametrize("text,expected", POSITIVES)
def test_positive_sentences(text, expected):
    signals = best_per_unit(extract_signals(text))
    assert [s.type for s in signals] == [expected], [(s.type, s.pattern) for s in signals]
    assert signals[0].content == text.strip()


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_not_signals(text):
    assert extract_signals(text) == []


def test_every_seed_chinese_pattern_is_kept():
    seed = {"correction": ["不是.*?是", "应该.*?而不是", "错了.*?正确的是"],
            "preference": ["我(喜欢|偏好|希望|想要)", "不要.*?", "以后.*?"],
            "decision": ["决定.*?", "选择.*?而不是", "最终采用"],
            "error": ["失败.*?原因", "错误.*?根因", "踩坑"],
            "workflow": ["先.*?再.*?", "流程.*?", "步骤.*?"]}
    for type_, patterns in seed.items():
        assert SIGNAL_PATTERNS[type_][:3] == tuple(patterns)
        assert len(SIGNAL_PATTERNS[type_]) > 3  # and English equivalents


@pytest.mark.parametrize("text,expected", [
    ("the hall is dark", 0.7),
    ("you must remember her name", 0.8),               # two emphasis words
    ("always describe the weather", 0.75),
    ("don't rush", 0.8),                                # negation
    ("never, ever rush: always slow, you must", 0.9),  # negation +0.1, always and must +0.05 each
    ("一定要记住，必须绝对永远不要忘", 0.98),             # capped
    ("别急", 0.8),
])
def test_confidence_rule(text, expected):
    assert confidence(text) == pytest.approx(expected)


def test_emphasis_words_count_once_and_whole_words_only():
    assert confidence("must must must") == pytest.approx(0.75)
    assert confidence("mustard and stopwatch") == pytest.approx(0.7)  # no "must", no "stop"


def test_ooc_parts_are_found_and_marked():
    text = "(OOC: from now on, always write in past tense) Elena draws her blade.\nI follow. // don't narrate for Alex"
    ooc, rest = split_ooc(text)
    assert ooc == ["from now on, always write in past tense", "don't narrate for Alex"]
    assert "Elena draws her blade." in rest and "OOC" not in rest and "//" not in rest
    signals = best_per_unit(extract_signals(text))
    assert [(s.type, s.ooc) for s in signals] == [("preference", True), ("preference", True)]
    assert signals[0].confidence == pytest.approx(0.75)


def test_ooc_forms():
    assert split_ooc("((she is left-handed, not right-handed)) ok")[0] == ["she is left-handed, not right-handed"]
    assert split_ooc("[OOC: slower please]")[0] == ["slower please"]
    assert split_ooc("（OOC：不要替我说话）")[0] == ["不要替我说话"]
    assert split_ooc("OOC: keep it short\nShe nods.")[0] == ["keep it short"]
    assert split_ooc("see http://example.com now")[0] == []  # a URL is not a comment


def test_ooc_only_scope_ignores_in_character_text():
    text = "I want slower pacing. (OOC: we decided the heist is at midnight)"
    assert [s.type for s in extract_signals(text, ooc_only=True)] == ["decision"]
    assert sorted(s.type for s in extract_signals(text)) == ["decision", "preference"]


def test_min_confidence_filters():
    assert extract_signals("we decided the heist is at midnight", min_confidence=0.75) == []
    assert extract_signals("we decided the heist is at midnight, remember", min_confidence=0.75)


def test_one_signal_per_unit_prefers_confidence_then_priority():
    # "don't" (preference) and "not X, it's Y" (correction) in one sentence: same confidence, correction wins
    signals = best_per_unit(extract_signals("Don't call her Myra, not Myra, it's Mira."))
    assert [s.type for s in signals] == ["correction"]


@pytest.mark.parametrize("text,wrong,right", [
    ("no, her eyes are green, not blue", "blue", "green"),
    ("She is a knight, not a mage.", "mage", "knight"),
    ("It's not Myra, it's Mira.", "Myra", "Mira"),
    ("not the east gate but the west gate", "east gate", "west gate"),
    ("The tavern should be on the east side, not the west.", "west", "east side"),
    ("她的眼睛不是蓝色的，是绿色的", "蓝色", "绿色"),
    ("应该是骑士而不是法师", "法师", "骑士"),
    ("that's simply wrong", None, None),
])
def test_correction_terms(text, wrong, right):
    assert correction_terms(text) == (wrong, right)


def test_message_index_is_kept():
    signals = extract_signals("we decided to leave at dawn", index=7)
    assert signals[0].index == 7 and signals[0].to_json()["index"] == 7
