"""Who said it: the text a message's memory is searched and embedded by starts with its speaker.

"I took up pottery last spring" is about its speaker, and a question names that speaker ("What did Mel
take up?"): as "Mel: I took up pottery last spring" the first person reads as Mel, for the keyword index
and the embedding model alike (the bundled model alone finds twice the evidence with the speaker in front,
docs/evaluation.md). A name the speaker only addresses ("Thanks, Irene! Have a great one!", "Hey Tom,",
"Wow, Tom! Keep it up!", "谢谢你，艾琳！", "请坐，张先生。", "艾琳，你来了？") does not make the message about that
person: such a vocative is left out of the searched text. The memory itself, and its line in the block, keep the
words as said.
"""

from __future__ import annotations

import functools
import re

from ..alternation import alternation
from .cjk_names import DOTTED_NAME, NOT_IN_NAMES, PERSON_TITLES, TITLED_PERSON

_WORD = r"[A-Z][a-zA-Z'\-]*[a-z]"   # a capitalised word of two letters or more
_NAME = rf"{_WORD}(?:\s{_WORD})?"
_GREETING = alternation([
    "hi", "hey", "hiya", "hello", "yo", "thanks", "thank you", "thx", "bye", "goodbye", "good night", "goodnight",
    "night", "good morning", "morning", "good evening", "good afternoon", "congrats", "congratulations", "welcome",
    "sorry", "dear", "love you", "miss you", "see you", "see ya", "cheers", "wow", "oh", "aw", "aww", "omg", "haha",
    "lol", "yes", "yeah", "no", "ok", "okay", "well", "come on", "happy birthday"])
# "Thanks, Irene!", "hey Tom,": a greeting, then the name; "Tom, ..." / "..., Tom!" / "..., Tom." at an end.
# One pattern (one scan of the text): after a greeting, leading, trailing. The greetings are grouped by first
# letter and the leading name is looked for only at a capital (alternation.py): the scan takes 0.4 of the time.
_VOCATIVE = re.compile(rf"(?i:\b{_GREETING}\b)(?:,\s*|\s+)(?-i:(?P<a>{_NAME}))(?=\s*(?:[,!?.…~:;)]|$))"
                       rf"|(?=[A-Z])(?:^|(?<=[.!?…]\s))(?P<b>{_NAME})(?=,\s)"
                       rf"|,\s*(?P<c>{_NAME})\s*(?=[!?.…~]|$)")
# Words that look like names at these places but are not people ("Thanks, God!", "Sorry, Monday...", a company's
# "Warner Bros. Entertainment, Inc.").
_NOT_A_PERSON = frozenset("god lord jesus man dude bro sis guys everyone everybody all girl boy buddy mate sir "
                          "madam monday tuesday wednesday thursday friday saturday sunday so and but then now "
                          "also anyway honestly seriously well yes yeah no ok okay sure right true "
                          "inc ltd corp".split())
_IS_GREETING = re.compile(rf"(?i){_GREETING}")
# What every vocative has: a name's (last) word, then a comma, an end mark or the end of the text. Three in
# four roleplay messages have none, and this finds that in 2 us where _VOCATIVE takes about 80; the long
# messages mostly have one, so a message costs 56 us on average instead of 79. An ingest reads every
# memory's text through here.
_MAY_HAVE_VOCATIVE = re.compile(r"[A-Z][a-zA-Z'\-]*[a-z]\s*(?:[,!?.…~:;)]|$)")


# Chinese has no capitals to tell a name by, so only shapes that say "address": a greeting and a short name after
# its comma ("谢谢你，艾琳！", "晚安，小雪。"), and a titled person's name between a comma and a sentence's edge
# ("张先生，请坐。", "请坐，张先生。"). A bare name at a sentence's edge ("艾琳，你来了") may as well be the topic,
# unless the chat's speakers go by it (below).
_CJK_GREETING = alternation((
    "谢谢你?|謝謝你?|谢了|謝了|多谢|多謝|你好|您好|嗨|哈喽|哈囉|嘿|喂|早安|早上好|午安|晚安|晚上好|再见|再見|"
    "拜拜|回头见|回頭見|对不起|對不起|抱歉|恭喜你?|欢迎你?|歡迎你?|辛苦了|亲爱的|親愛的").split("|"))
# A short name holds no pronoun or particle, nor a negation, a question or a modal word ("抱歉，不知道。",
# "你好，请问……").
_NOT_IN_SHORT_NAMES = NOT_IN_NAMES + "不没沒别別无無非请請问問吗嗎呢吧啊呀哦嗯好真多少知道想要会會能可以"
_CJK_SHORT_NAME = rf"(?:(?![{_NOT_IN_SHORT_NAMES}])[\u4e00-\u9fff]){{1,4}}"
_CJK_NAME = rf"{DOTTED_NAME.pattern}|{TITLED_PERSON}"
# Each group is what goes: the name with the comma that set it off. The first two shapes start a text or follow
# a mark, a comma or a space: "(?<![^...])" is "no character before, or one of these", tested once for both (the
# second then asks for its own, narrower start). Most positions of a Chinese text fail there: 0.65 of the time.
_CJK_VOCATIVE = re.compile(
    rf"(?<![^。！？!?…，,\s“\"「『*])(?:{_CJK_GREETING}[啊呀呢吧哦]?"
    rf"(?P<a>[，,]\s*(?:{_CJK_NAME}|{_CJK_SHORT_NAME}))(?=\s*(?:[！!。？?~～…，,”\"」』*]|$))"
    rf"|(?<![^。！？!?…\n])[\s“\"「『*]*(?P<b>(?:{TITLED_PERSON})[，,]\s*))"
    rf"|(?P<c>[，,]\s*(?:{TITLED_PERSON}))(?=\s*(?:[！!。？?~～…”\"」』*]|$))")
# Each vocative above has a greeting or a person's title: most Chinese messages have neither.
_MAY_HAVE_CJK_VOCATIVE = re.compile(rf"{_CJK_GREETING}|{PERSON_TITLES}")


# A Chinese name standing alone between commas or a sentence's edges is a topic as often as an address ("汪峰，
# 1971年出生于..."), unless it is the name of someone in the chat: in a roleplay the other speaker is the one
# listening ("艾琳，你来了？", "好了，艾琳，我们走吧。", "你来了，艾琳。"). Of the 后宫甄嬛传 scripts' lines that hold
# a name their scene's speakers go by so, 60 of 60 read were addresses (docs/evaluation.md).
# What goes: the name with the comma after it; else with the comma before it ("你来了，艾琳。"); else, a name that
# is a sentence of its own ("艾琳！你去哪？"), with its end mark.
_CLAUSE_START = r"(?:(?P<lead>[，,])|^|(?<=[。！？!?…\n，,—]))(?P<open>[\s“\"「『*]*)"
_CLAUSE_END = r"(?:(?P<trail>\s*[，,]\s*)|(?P<mark>\s*[！!。？?~～…—]+|[ \t]*(?=\n|$)))"   # not “艾琳” (her name)


@functools.lru_cache(maxsize=256)
def _known_name_pattern(names: tuple[str, ...]) -> re.Pattern:
    longest_first = sorted(names, key=lambda n: (-len(n), n))   # "艾琳娜" before "艾琳"
    return re.compile(rf"{_CLAUSE_START}(?P<name>{'|'.join(map(re.escape, longest_first))}){_CLAUSE_END}")


@functools.lru_cache(maxsize=256)   # one chat's few names, asked for every message
def _chinese_names(names: frozenset[str], speaker: str) -> tuple[str, ...]:
    speaker = speaker.strip()
    return tuple(sorted({n.strip() for n in names if len(n.strip()) >= 2 and n.strip() != speaker
                         and re.search(r"[\u4e00-\u9fff]", n)}))


def addressed_names(text: str, speaker: str, names) -> list[str]:
    """The names of the chat (`names`: its speakers) that `text` addresses as a clause of their own; the
    speaker's own name is never one. What a message's memory keeps as `addressed` (its searched text leaves
    them out, `without_vocatives`)."""
    known = _chinese_names(frozenset(names), speaker)
    if not known or not any(n in text for n in known):
        return []
    return sorted({m.group("name") for m in _known_name_pattern(known).finditer(text)})


def _without_known_names(text: str, names: tuple[str, ...]) -> str:
    def drop(match: re.Match) -> str:
        if match.group("trail") is not None:   # "好了，艾琳，我们走吧。" keeps the comma before the name
            return (match.group("lead") or "") + match.group("open")
        if match.group("lead"):   # "你来了，艾琳。": the sentence keeps its end
            return match.group("open") + match.group("mark")
        return match.group("open")

    return _known_name_pattern(names).sub(drop, text)


def without_vocatives(text: str, speaker: str = "", addressed=()) -> str:
    """`text` without the names it only addresses; a name the speaker goes by is never such a name.
    `addressed`: the chat's names the message addresses (`addressed_names`), left out wherever they stand
    as a clause of their own."""
    known = _chinese_names(frozenset(addressed), speaker) if addressed else ()
    if known:
        text = _without_known_names(text, known)
    if _MAY_HAVE_CJK_VOCATIVE.search(text):
        text = _without_cjk_vocatives(text, speaker)
    if not _MAY_HAVE_VOCATIVE.search(text):
        return text.strip()
    dropped = False

    def drop(match: re.Match) -> str:
        nonlocal dropped
        group = next(g for g in "abc" if match.group(g) is not None)
        name = match.group(group)
        if (name.lower() in _NOT_A_PERSON or _IS_GREETING.fullmatch(name)
                or (speaker and name.casefold() == speaker.casefold()) or _paired_with_a_name(match, group)):
            return match.group(0)
        dropped = True
        start, end = match.span(group)
        whole = match.group(0)
        return whole[:start - match.start()] + whole[end - match.start():]

    text = _VOCATIVE.sub(drop, text)
    if not dropped:
        return text.strip()
    text = re.sub(r"(?:^|(?<=[.!?…]\s)),\s*|\s*,\s*(?=[!?.…,~]|$)", "", text)   # the comma the name left
    text = re.sub(r"\s+(?=[,!?.…])", "", text)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _without_cjk_vocatives(text: str, speaker: str) -> str:
    def drop(match: re.Match) -> str:
        group = next(g for g in "abc" if match.group(g) is not None)
        if speaker and match.group(group).strip().strip("，,").strip() == speaker.strip():
            return match.group(0)
        start, end = match.span(group)
        whole = match.group(0)
        return whole[:start - match.start()] + whole[end - match.start():]

    return _CJK_VOCATIVE.sub(drop, text)


_ENDS_WITH_NAME = re.compile(rf"(?<=[^\s.!?…] ){_WORD}$")   # a capitalised word that does not start a sentence
_STARTS_WITH_NAME = re.compile(rf",\s+(?!I'){_WORD}\b")


def _paired_with_a_name(match: re.Match, group: str) -> bool:
    """A capitalised word on the comma's other side makes a pair, not an address: "we went to Tulum,
    Mexico.", "Paris, France is lovely" (a place and its country, two names in a row). A sentence's first
    word is capitalised anyway: in "Absolutely, Liza!" Liza is addressed."""
    text = match.string
    if group == "c":
        return bool(_ENDS_WITH_NAME.search(text, 0, match.start()))
    if group == "b":
        return bool(_STARTS_WITH_NAME.match(text, match.end()))
    return False




@functools.lru_cache(maxsize=8192)   # recall reads the same memories' texts again and again
def attributed_text(speaker: str, text: str, addressed: tuple[str, ...] = ()) -> str:
    """"Speaker: text", vocatives left out: what a message's memory is indexed and embedded by."""
    speaker = speaker.strip()
    body = without_vocatives(text, speaker, addressed)
    return f"{speaker}: {body}" if speaker else body
