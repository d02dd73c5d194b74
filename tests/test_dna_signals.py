"""DNA signals: where they come from (out-of-character text and commands to the story-teller, not the
story), the patterns on any text, the confidence rule, the count per unit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stbme.dna.signals import (best_per_unit, confidence, correction_terms, extract_signals, is_command,
                               message_units, split_ooc, SIGNAL_PATTERNS)

LABELLED = Path(__file__).resolve().parent.parent / "scripts" / "data" / "directives.jsonl"

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
def test_the_patterns_on_any_text(text, expected):
    """With dna.signal_scope = message every sentence is matched, as the plan reads text."""
    signals = best_per_unit(extract_signals(text, scope="message"))
    assert [s.type for s in signals] == [expected], [(s.type, s.pattern) for s in signals]
    assert signals[0].content == text.strip() and signals[0].source in ("story", "command")


@pytest.mark.parametrize("text,expected", POSITIVES)
def test_the_same_sentences_out_of_character_are_signals_and_in_the_story_none(text, expected):
    for wrapped in (f"(OOC: {text})", f"(({text}))", f"// {text}", f"（OOC：{text}）", f"[OOC {text}]"):
        signals = best_per_unit(extract_signals(wrapped))
        assert [(s.type, s.content, s.ooc) for s in signals] == [(expected, text, True)], wrapped
    assert extract_signals(f'*I look at her.* "{text}"') == []


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_near_misses_are_not_signals(text):
    assert extract_signals(text, scope="message") == []
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


def test_unclosed_openers_are_story_text():
    """An opener without a closer is no OOC part; the scan goes forward once (a 200,000-character message of
    unclosed openers took minutes with a lazy match to the end)."""
    assert split_ooc("(OOC: keep it short") == ([], "(OOC: keep it short")
    assert split_ooc("(( a (( b )) c")[0] == ["a (( b"]
    text = "((a " * 50_000 + "(OOC: keep the replies short)"
    assert [s.content for s in extract_signals(text)] == ["keep the replies short"]
    assert extract_signals("[OOC: x " * 25_000) == []


def test_scopes():
    text = "Don't rush me. (OOC: we decided the heist is at midnight)\nFrom now on, keep the replies short."
    assert [(s.type, s.source) for s in extract_signals(text, scope="ooc")] == [("decision", "ooc")]
    instructions = best_per_unit(extract_signals(text))
    assert [(s.type, s.source) for s in instructions] == [("decision", "ooc"), ("preference", "command")]
    assert [(s.type, s.source) for s in best_per_unit(extract_signals(text, scope="message"))] == [
        ("decision", "ooc"), ("preference", "story"), ("preference", "command")]
    with pytest.raises(ValueError):
        extract_signals(text, scope="everything")


def test_min_confidence_filters():
    assert extract_signals("(OOC: we decided the heist is at midnight)", min_confidence=0.75) == []
    assert extract_signals("(OOC: we decided the heist is at midnight, remember)", min_confidence=0.75)


def test_one_signal_per_unit_prefers_confidence_then_priority():
    # "don't" (preference) and "not X, it's Y" (correction) in one sentence: same confidence, correction wins
    signals = best_per_unit(extract_signals("(OOC: Don't call her Myra, not Myra, it's Mira.)"))
    assert [s.type for s in signals] == ["correction"]


def test_the_plans_count_and_confidence_on_the_whole_instruction():
    """Seed 001 lines 54-83: a signal per matching pattern, confidence on the text. Here the text is the
    instruction (an out-of-character part or a command); best_per_unit keeps one signal of it."""
    found = extract_signals("（OOC：不是红色是绿色，以后不要忘记）")
    assert sorted((s.type, s.pattern) for s in found) == [
        ("correction", "不是.*?是"), ("preference", "不要.*?"), ("preference", "以后.*?")]
    assert [s.type for s in best_per_unit(found)] == ["correction"]
    [kept] = best_per_unit(extract_signals("（OOC：我喜欢慢节奏。一定记住。）"))
    assert (kept.type, kept.confidence, kept.content) == ("preference", pytest.approx(0.8), "我喜欢慢节奏。一定记住。")


INSTRUCTIONS = [
    # out of character, no pattern of the plan's, but a request: a preference
    ("(OOC: Could you keep the replies shorter? Two paragraphs max.)", "preference"),
    ("（OOC：回复可以再短一点吗？最多两段。）", "preference"),
    ("OOC: more sensory detail in the market scenes would be great", "preference"),
    ("（OOC：文风朴实一点，少用华丽的辞藻。）", "preference"),
    ("(ooc: avoid graphic violence)", "preference"),
    # a prohibition is a preference, not a workflow or a decision
    ("((no more cliffhangers at the end of every reply please))", "preference"),
    ("（OOC：以后不要每段都用问句结尾了。）", "preference"),
    ("((请不要替我的角色做动作和决定))", "preference"),
    # typed inside out-of-character text
    ("(OOC: Each reply, start with the time of day, then move on.)", "workflow"),
    ("（OOC：故事里每过完一天，用一句话在括号里总结一下。）", "workflow"),
    ("(OOC: final answer: no magic in this setting.)", "decision"),
    ("//好，定了，剧情直接跳到开春", "decision"),
    ("（OOC：苏念的眼睛是绿色的，不是蓝色。）", "correction"),
    ("（OOC：其实秦羽是左撇子。）", "correction"),
    ("（OOC：前后矛盾了，韩铁说过他从没去过扬州。）", "error"),
    ("(OOC: you keep writing Tobin as cheerful, but he's grieving right now.)", "error"),
    # a plain command to the story-teller
    ("From now on, please write in third person.", "preference"),
    ("回复请控制在两百字以内。", "preference"),
    ("Correction: Mara is twenty-five, not thirty.", "correction"),
    ("更正一下：苏念二十五岁，不是三十岁。", "correction"),
    ("You forgot that the bridge collapsed two chapters ago.", "error"),
    ("It's settled, Tobin is the villain.", "decision"),
    ("按步骤来：先写场景，再写林晚的台词，然后停下。", "workflow"),
    # on its own line after the story part of the message
    ('*I grin.* "You\'re on."\nPlease keep your responses under 200 words.', "preference"),
]


@pytest.mark.parametrize("text,expected", INSTRUCTIONS)
def test_instructions_to_the_story_teller(text, expected):
    assert [s.type for s in best_per_unit(extract_signals(text))] == [expected]


NOT_INSTRUCTIONS = [
    # out-of-character chatter
    "(OOC: brb, dinner)", "((sorry, slow replies today, work is crazy))", "// lol Tobin is the best",
    "(OOC: quick question, how old is Elena again?)", "（OOC：我去吃个饭，马上回来）", "（OOC：越来越喜欢这个故事了）",
    "(OOC: lol that was great)",
    # in-character lines that look like instructions, quoted or not
    "Nope, not yet!", "I'm tired, not hungry.", "It reminded me why I love writing.", "不是现在，还没到时候！",
    "我是累了，不是饿了。", "这让我想起了我为什么喜欢写东西。", '*I shake my head.* "First we eat, then we talk."',
    '"We decided to take the long way round."', "“我们决定绕远路走。”", '"You keep forgetting your gloves."',
    "“以后我自己带刀。”", "Remember, back before dark.", "Tell me a story.", "I tell her the story of my scar.",
    # a command-like line that is long story prose
    "Please " + "keep walking with me along the harbour wall while the chapter house bells ring, " * 4,
]


@pytest.mark.parametrize("text", NOT_INSTRUCTIONS)
def test_chatter_and_the_story_make_no_signal(text):
    assert extract_signals(text) == []


def test_is_command_needs_plain_text_about_the_telling():
    assert is_command("Please keep your replies short.")
    assert not is_command('"Please keep your replies short."')           # dialogue
    assert not is_command("*nods* Please keep your replies short.")     # action
    assert not is_command("Please keep your voice down.")               # not about the telling
    assert is_command("It's settled, Tobin is the villain.")            # weak word beside a decision
    assert not is_command("Please, tell me the story of your scar.")    # weak word beside a request only


def test_the_labelled_lines_at_defaults():
    """Issue 10's bar on scripts/data/directives.jsonl (scripts/eval_directives.py prints the full table):
    at least 0.9 of the lines that make a directive are real instructions; recall stays where it was measured."""
    lines = [json.loads(raw) for raw in LABELLED.read_text(encoding="utf-8").splitlines() if raw.strip()]
    made = {x["id"]: {s.type for s in best_per_unit(extract_signals(x["text"], min_confidence=0.7))} for x in lines}
    for group in ([x for x in lines if x["lang"] == "en"], [x for x in lines if x["lang"] == "zh"]):
        created = [x for x in group if made[x["id"]]]
        real = [x for x in group if x["label"] != "none"]
        assert sum(x["label"] != "none" for x in created) / len(created) >= 0.9
        assert sum(bool(made[x["id"]]) for x in real) / len(real) >= 0.85
        assert not any(made[x["id"]] for x in group if x["register"] == "ic")


def test_message_units_keep_the_order_and_the_source():
    text = "(OOC: keep it short)\n*I nod.* \"Fine.\"\nCorrection: the inn is the Gull, not the Crown.\n// be gentle"
    assert [(u.source, u.text) for u in message_units(text)] == [
        ("ooc", "keep it short"), ("ooc", "be gentle"), ("command", "Correction: the inn is the Gull, not the Crown.")]


@pytest.mark.parametrize("text,wrong,right", [
    ("no, her eyes are green, not blue", "blue", "green"),
    ("She is a knight, not a mage.", "mage", "knight"),
    ("It's not Myra, it's Mira.", "Myra", "Mira"),
    ("not the east gate but the west gate", "east gate", "west gate"),
    ("The tavern should be on the east side, not the west.", "west", "east side"),
    ("她的眼睛不是蓝色的，是绿色的", "蓝色", "绿色"),
    ("应该是骑士而不是法师", "法师", "骑士"),
    ("苏念的眼睛是绿色的，不是蓝色。", "蓝色", "绿色"),
    ("那艘船叫灰鸥号，不是灰鹭号", "灰鹭号", "灰鸥号"),
    ("我们是在灯塔认识的，不是在磨坊", "磨坊", None),   # no like-for-like term to write over it
    ("that's simply wrong", None, None),
])
def test_correction_terms(text, wrong, right):
    assert correction_terms(text) == (wrong, right)


def test_message_index_is_kept():
    signals = extract_signals("(OOC: we decided to leave at dawn)", index=7)
    assert signals[0].index == 7 and signals[0].to_json()["index"] == 7
