"""Signals: the user steering the story. Pure functions, no I/O.

A user message is cut into units: its out-of-character parts (`(OOC: …)`, `((…))`, `// …` lines) and the
sentences of the rest. Each unit is matched against the DNA Memory patterns (the seed's Chinese ones,
verbatim, plus English equivalents written for roleplay) and scored with the seed's confidence rule:
base 0.7, +0.05 per emphasis word present, +0.1 if a negation is present, capped at 0.98.
"""

from __future__ import annotations

import dataclasses
import re

SIGNAL_TYPES = ("correction", "preference", "decision", "error", "workflow")
# When one unit matches several types with the same confidence, the first of these wins.
TYPE_PRIORITY = ("correction", "error", "decision", "workflow", "preference")

_I = re.I

# The seed's Chinese patterns (verbatim) followed by English equivalents of each.
SIGNAL_PATTERNS: dict[str, tuple[str, ...]] = {
    "correction": (
        r"不是.*?是",
        r"应该.*?而不是",
        r"错了.*?正确的是",
        # "not blue but green", "not Myra, it's Mira"
        r"\bnot\b[^.!?]{1,60}?(?:\bbut\b|[,;]\s*(?:it|that|he|she|they)(?:'s|'re| is| are)\b)",
        # "her eyes are green, not blue"
        r"\w[^.!?]{0,80}?,\s*not\s+(?:a |an |the )?\w+",
        # "it should be X, not / instead of / rather than Y"
        r"\bshould (?:be|have been|say|read)\b[^.!?]{1,80}?\b(?:not|instead of|rather than)\b",
        # "that's wrong, the correct one is …", "correction: …"
        r"\b(?:wrong|incorrect|mistaken)\b[^.!?]{0,60}?\b(?:correct|right one|actually|should be)\b",
        r"^\s*(?:correction|actually)\s*[:,]",
    ),
    "preference": (
        r"我(喜欢|偏好|希望|想要)",
        r"不要.*?",
        r"以后.*?",
        # "I want slower pacing", "I'd like you to …": about the story, not the character's wishes
        r"\bI(?:'d| would)?(?: really)? (?:like|love|prefer|want|wish|hope)\b[^.!?]{0,40}?\b(?:you to|story|scenes?|"
        r"pacing|pace|tone|style|repl(?:y|ies)|responses?|descriptions?|narration|dialogue|writing|chapters?|plot|"
        r"romance|slower|faster|longer|shorter|more detail|less detail)\b",
        # "don't rush the romance", "stop writing for my character"
        r"\b(?:don'?t|do not|never|stop|avoid)\s+(?:\w+\s+){0,2}?(?:rush(?:ing)?|writ(?:e|ing)|describ(?:e|ing)|"
        r"narrat(?:e|ing)|us(?:e|ing)|add(?:ing)?|skip(?:ping)?|repeat(?:ing)?|speak(?:ing)?|talk(?:ing)? for|"
        r"act(?:ing)? for|decid(?:e|ing) for|control(?:ling)?|play(?:ing)?|summari[sz](?:e|ing))\b",
        r"\b(?:from now on|going forward|in (?:the )?future|henceforth|next time)\b",
    ),
    "decision": (
        r"决定.*?",
        r"选择.*?而不是",
        r"最终采用",
        # "we", not "I": "I decided to wait" is the user's character acting
        r"\b(?:we|let's|let us)(?:'ve| have)? (?:decided|agreed|settled on|chose|choose|are going with)\b",
        r"\b(?:it'?s|it is|that'?s) (?:decided|settled|final)\b",
        r"\b(?:choose|chose|go with|went with|pick|picked)\b[^.!?]{1,60}?\b(?:instead of|rather than|over)\b",
        r"\b(?:finally|in the end|ultimately),? (?:we(?:'ll| will)? )?(?:use|go with|adopt|pick)\b",
    ),
    "error": (
        r"失败.*?原因",
        r"错误.*?根因",
        r"踩坑",
        # "you keep forgetting she lost her arm"
        r"\byou(?:'ve| have)? (?:keep|kept|always|again|still) (?:forgetting|forget|getting|mixing|confusing|"
        r"ignoring|making|writing|saying|contradicting)\b",
        r"\byou(?:'ve| have)? (?:forgot(?:ten)?|ignored|contradicted|messed up|mixed up)\b",
        r"\b(?:fail(?:ed|s|ure)?|broke(?:n)?)\b[^.!?]{0,60}?\b(?:because|reason|cause)\b",
        r"\b(?:error|mistake|bug)\b[^.!?]{0,60}?\b(?:root cause|caused by|because)\b",
        r"\b(?:same mistake|pitfall|that mistake again)\b",
    ),
    "workflow": (
        r"先.*?再.*?",
        r"流程.*?",
        r"步骤.*?",
        # "first describe the scene, then the dialogue"
        r"\bfirst\b[^.!?]{1,80}?\b(?:then|after that|afterwards|next)\b",
        r"\b(?:workflow|routine|procedure|format)\b\s*(?:is|:|should)",
        r"\bsteps?\s*(?::|\d|one\b)|\bstep[- ]by[- ]step\b",
    ),
}
_COMPILED = {t: tuple((p, re.compile(p, _I | re.M)) for p in ps) for t, ps in SIGNAL_PATTERNS.items()}

EMPHASIS_WORDS = ("一定", "必须", "绝对", "永远", "记住",
                  "always", "must", "absolutely", "definitely", "remember", "make sure", "important")
NEGATION_WORDS = ("不要", "别", "don't", "dont", "do not", "never", "stop")
_LATIN_WORD = re.compile(r"^[a-z' ]+$")

_OOC_PATTERNS = (
    re.compile(r"[(\[（【]\s*OOC\s*[:：]\s*(.+?)\s*[)\]）】]", _I | re.S),
    re.compile(r"\(\(\s*(.+?)\s*\)\)", re.S),
    re.compile(r"（（\s*(.+?)\s*））", re.S),
    re.compile(r"(?:^|(?<=\s))//+[ \t]*(.+?)[ \t]*$", re.M),  # "// …" to the end of the line
    re.compile(r"^[ \t]*OOC[ \t]*[:：][ \t]*(.+?)[ \t]*$", re.M | _I),
)
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；])|\n+")
MAX_UNIT_CHARS = 600


@dataclasses.dataclass
class Signal:
    type: str
    content: str            # the unit of text that carried the signal
    confidence: float
    pattern: str            # the pattern that matched
    ooc: bool = False       # found in out-of-character text
    index: int | None = None  # message index, when known
    wrong: str | None = None  # corrections: what was wrong and what is right, when the sentence says so
    right: str | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def split_ooc(text: str) -> tuple[list[str], str]:
    """Out-of-character segments of a message, and the in-character rest."""
    segments: list[tuple[int, str]] = []
    rest = text
    for pattern in _OOC_PATTERNS:
        def take(match: re.Match) -> str:
            inner = match.group(1).strip()
            if inner:
                segments.append((match.start(), inner))
            return " " * (match.end() - match.start())  # keep offsets for ordering
        rest = pattern.sub(take, rest)
    segments.sort()
    return [s for _, s in segments], re.sub(r"[ \t]{2,}", " ", rest).strip()


def split_units(text: str) -> list[str]:
    """Sentences of a text (Latin and CJK punctuation), each cut to MAX_UNIT_CHARS."""
    units = []
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if len(part) >= 2:
            units.append(part[:MAX_UNIT_CHARS])
    return units


def confidence(text: str) -> float:
    """The seed's rule: 0.7, +0.05 per emphasis word present, +0.1 if negated, at most 0.98."""
    folded = text.casefold()
    score = 0.7
    for word in EMPHASIS_WORDS:
        if _has_word(folded, word):
            score += 0.05
    if any(_has_word(folded, word) for word in NEGATION_WORDS):
        score += 0.1
    return round(min(score, 0.98), 4)


def _has_word(folded: str, word: str) -> bool:
    if _LATIN_WORD.match(word):
        return re.search(rf"(?<![a-z']){re.escape(word)}(?![a-z'])", folded) is not None
    return word in folded


def match_unit(unit: str) -> list[tuple[str, str]]:
    """(type, pattern) of every signal type whose patterns match the unit (first matching pattern)."""
    found = []
    for type_, patterns in _COMPILED.items():
        for source, compiled in patterns:
            if compiled.search(unit):
                found.append((type_, source))
                break
    return found


def extract_signals(text: str, *, min_confidence: float = 0.0, ooc_only: bool = False,
                    index: int | None = None) -> list[Signal]:
    """Every signal in a user message: one per (unit, type), OOC units first, then the sentences."""
    ooc, rest = split_ooc(text)
    units = [(u, True) for seg in ooc for u in (split_units(seg) if len(seg) > MAX_UNIT_CHARS else [seg])]
    if not ooc_only:
        units += [(u, False) for u in split_units(rest)]
    signals = []
    for unit, is_ooc in units:
        score = confidence(unit)
        if score < min_confidence:
            continue
        for type_, pattern in match_unit(unit):
            sig = Signal(type_, unit, score, pattern, is_ooc, index)
            if type_ == "correction":
                sig.wrong, sig.right = correction_terms(unit)
            signals.append(sig)
    return signals


def best_per_unit(signals: list[Signal]) -> list[Signal]:
    """One signal per unit of text: the most confident, ties broken by TYPE_PRIORITY."""
    best: dict[tuple[int | None, str], Signal] = {}
    for sig in signals:
        key = (sig.index, sig.content)
        cur = best.get(key)
        if cur is None or (sig.confidence, -TYPE_PRIORITY.index(sig.type)) > (
                cur.confidence, -TYPE_PRIORITY.index(cur.type)):
            best[key] = sig
    return [s for s in signals if best[(s.index, s.content)] is s]


# -- corrections: what was wrong, what is right -------------------------------------------------------
_CLAUSE = r"[^,.;:!?，。；！？]"
_CORRECTION_TERMS = (
    # (regex, right-part is the tail of a longer clause)
    (re.compile(rf"不是(?P<wrong>{_CLAUSE}+?)的?[，,\s]*(?:而)?是(?P<right>{_CLAUSE}+)"), False),
    (re.compile(rf"应该是?(?P<right>{_CLAUSE}+?)而不是(?P<wrong>{_CLAUSE}+)"), False),
    (re.compile(rf"正确的是(?P<right>{_CLAUSE}+)"), False),
    (re.compile(rf"\bnot (?P<wrong>{_CLAUSE}+?),? but (?P<right>{_CLAUSE}+)", _I), False),
    (re.compile(rf"\bnot (?P<wrong>{_CLAUSE}+?)[,;]\s*(?:it|that|he|she|they)(?:'s|'re| is| are) (?P<right>{_CLAUSE}+)",
                _I), False),
    (re.compile(rf"\bshould (?:be|say|read) (?P<right>{_CLAUSE}+?),? (?:not|instead of|rather than) "
                rf"(?P<wrong>{_CLAUSE}+)", _I), False),
    (re.compile(rf"(?P<right>{_CLAUSE}+?) (?:instead of|rather than) (?P<wrong>{_CLAUSE}+)", _I), True),
    (re.compile(rf"(?P<right>{_CLAUSE}+?)\s*,\s*not (?P<wrong>{_CLAUSE}+)", _I), True),
)
_DETERMINER = re.compile(r"^(?:(?:on|in|at|to|from|with|by)\s+)?(?:a|an|the|her|his|their|its|my|your)\s+", _I)
_TRAILING = re.compile(r"[\s的了呢啊吧!！。.]+$")


def _clean_term(term: str, max_words: int = 5) -> str:
    term = _TRAILING.sub("", term.strip())
    term = _DETERMINER.sub("", term)
    words = term.split()
    return " ".join(words[:max_words]) if words else term


def correction_terms(text: str) -> tuple[str | None, str | None]:
    """The wrong and the right term of a correction ("green, not blue" -> ("blue", "green")), if it says."""
    for pattern, right_is_tail in _CORRECTION_TERMS:
        match = pattern.search(text)
        if not match:
            continue
        wrong = _clean_term(match.group("wrong")) if "wrong" in pattern.groupindex else ""
        right = match.group("right").strip()
        if right_is_tail:
            # "her eyes are green, not blue": the right term is as long as the wrong one, at the clause's end
            words = right.split()
            right = " ".join(words[-max(1, len(wrong.split())):])
        right = _clean_term(right)
        if right and wrong and right.casefold() == wrong.casefold():
            continue
        return (wrong or None), (right or None)
    return None, None
