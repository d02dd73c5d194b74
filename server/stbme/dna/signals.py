"""Signals: the user steering the story. Pure functions, no I/O.

A user message is cut into units, by the chat's `dna.signal_scope`:
- `instructions` (default): its out-of-character parts ((OOC: …), ((…)), // …, [OOC …], a line opened
  with OOC:, （OOC：…）, （（…））), each one unit, and every plain line that is a command to the story-teller
  (no dialogue or action markup, and it talks about the telling: replies, narration, chapters, "my
  character", or it opens with "Correction:" / 更正). In-character text makes no unit.
- `ooc`: the out-of-character parts only.
- `message`: those, and every sentence of the in-character rest (the plan reads the whole text).

Each unit is matched against the patterns (`signal_patterns`); text addressed to the story-teller also
against the wider instruction patterns, where any request is a preference. `extract_signals` gives a
signal for every matching pattern (the plan's count); `best_per_unit` keeps one per unit, the most
confident, then by TYPE_PRIORITY. Confidence is the plan's rule, on the unit's text: 0.7, +0.05 per
emphasis word present, +0.1 if a negation is present, at most 0.98.
"""

from __future__ import annotations

import dataclasses
import re

from .signal_patterns import (EMPHASIS_WORDS, INSTRUCTION_PATTERNS, NARRATOR_ADDRESS, NEGATION_WORDS, OOC_LINES,
                              OOC_PAIRS, PROHIBITION, SIGNAL_PATTERNS, SIGNAL_TYPES, STORY_MARKUP, STRONG_NARRATION_WORDS,
                              WEAK_NARRATION_WORDS)

__all__ = ["SIGNAL_TYPES", "SIGNAL_PATTERNS", "SCOPES", "TYPE_PRIORITY", "Signal", "Unit", "split_ooc",
           "split_units", "is_command", "message_units", "confidence", "is_negated", "match_unit", "extract_signals",
           "best_per_unit", "correction_terms"]

SCOPES = ("instructions", "ooc", "message")
# When one unit matches several types with the same confidence, the first of these wins.
TYPE_PRIORITY = ("correction", "error", "decision", "workflow", "preference")
MAX_UNIT_CHARS = 600      # a longer out-of-character part is cut into its sentences
MAX_COMMAND_CHARS = 300   # a plain command is one short line; a longer one is story

_FLAGS = re.I | re.M
_STORY = {t: tuple((p, re.compile(p, _FLAGS)) for p in ps) for t, ps in SIGNAL_PATTERNS.items()}
_WIDE = {t: _STORY[t] + tuple((p, re.compile(p, _FLAGS)) for p in INSTRUCTION_PATTERNS.get(t, ()))
         for t in SIGNAL_TYPES}
_LATIN_WORD = re.compile(r"^[a-z' ]+$")
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[。！？；])|\n+")


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
    source: str = "story"   # ooc | command | story: where in the message the unit was

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Unit:
    text: str
    source: str             # ooc | command | story

    @property
    def addressed(self) -> bool:
        """Addressed to the story-teller: the wider instruction patterns apply."""
        return self.source != "story"


def split_ooc(text: str) -> tuple[list[str], str]:
    """Out-of-character segments of a message, and the in-character rest. Linear in the text."""
    segments: list[tuple[int, str]] = []
    chars = list(text)

    def blank(start: int, end: int) -> None:  # keep offsets for ordering
        chars[start:end] = " " * (end - start)

    for opener, closer in OOC_PAIRS:
        current, pos = "".join(chars), 0
        while (start := opener.search(current, pos)) is not None:
            end = closer.search(current, start.end())
            if end is None:
                break  # no closer after this opener, so none after a later one
            inner = current[start.end():end.start()].strip()
            if inner:
                segments.append((start.start(), inner))
            blank(start.start(), end.end())
            pos = end.end()
    for pattern in OOC_LINES:
        for match in list(pattern.finditer("".join(chars))):
            inner = match.group(1).strip()
            if inner:
                segments.append((match.start(), inner))
            blank(match.start(), match.end())
    segments.sort()
    return [s for _, s in segments], re.sub(r"[ \t]{2,}", " ", "".join(chars)).strip()


def split_units(text: str) -> list[str]:
    """Sentences of a text (Latin and CJK punctuation), each cut to MAX_UNIT_CHARS."""
    units = []
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if len(part) >= 2:
            units.append(part[:MAX_UNIT_CHARS])
    return units


def is_command(line: str) -> bool:
    """A plain line that instructs the story-teller: short, no dialogue or action markup, an instruction
    pattern matches, and it opens by addressing the telling ("Correction:", 更正) or talks about it
    (replies, narration, chapters, my character; the story or a scene only beside a typed pattern)."""
    line = line.strip()
    if not line or len(line) > MAX_COMMAND_CHARS or STORY_MARKUP.search(line):
        return False
    types = {t for t, _ in match_unit(line, addressed=True)}
    if not types:
        return False
    if NARRATOR_ADDRESS.search(line) or STRONG_NARRATION_WORDS.search(line):
        return True
    return bool(WEAK_NARRATION_WORDS.search(line)) and bool(types - {"preference"})


def message_units(text: str, scope: str = "instructions") -> list[Unit]:
    """The units of a user message that may carry signals, in the order of the message."""
    ooc, rest = split_ooc(text)
    units = [Unit(u, "ooc") for seg in ooc for u in (split_units(seg) if len(seg) > MAX_UNIT_CHARS else [seg])]
    if scope == "ooc":
        return units
    for line in re.split(r"\n+", rest):
        if is_command(line):
            units.append(Unit(line.strip(), "command"))
        elif scope == "message":
            units += [Unit(u, "story") for u in split_units(line)]
    return units


def confidence(text: str) -> float:
    """The seed's rule: 0.7, +0.05 per emphasis word present, +0.1 if negated, at most 0.98."""
    folded = text.casefold()
    score = 0.7
    for word in EMPHASIS_WORDS:
        if _has_word(folded, word):
            score += 0.05
    if is_negated(text):
        score += 0.1
    return round(min(score, 0.98), 4)


def is_negated(text: str) -> bool:
    """Whether the text says don't / never / stop / 不要 / 别 (the plan's negation words and ours)."""
    folded = text.casefold()
    return any(_has_word(folded, word) for word in NEGATION_WORDS)


def _has_word(folded: str, word: str) -> bool:
    if _LATIN_WORD.match(word):
        return re.search(rf"(?<![a-z']){re.escape(word)}(?![a-z'])", folded) is not None
    return word in folded


def match_unit(text: str, *, addressed: bool = False) -> list[tuple[str, str]]:
    """(type, pattern) for every pattern that matches the text; with `addressed`, the instruction
    patterns too."""
    table = _WIDE if addressed else _STORY
    found = [(type_, source) for type_, patterns in table.items() for source, compiled in patterns
             if compiled.search(text)]
    if addressed and PROHIBITION.search(text):
        found = [(t, p) for t, p in found if t not in ("workflow", "decision")]
    return found


def extract_signals(text: str, *, min_confidence: float = 0.0, scope: str = "instructions",
                    index: int | None = None) -> list[Signal]:
    """A signal for every pattern that matches a unit of the message (the plan's count)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown signal scope {scope!r}")
    signals = []
    for unit in message_units(text, scope):
        score = confidence(unit.text)
        if score < min_confidence:
            continue
        for type_, pattern in match_unit(unit.text, addressed=unit.addressed):
            sig = Signal(type_, unit.text, score, pattern, unit.source == "ooc", index, source=unit.source)
            if type_ == "correction":
                sig.wrong, sig.right = correction_terms(unit.text)
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
_CLAUSE = r"[^,.;:!?，。；：！？]"
_CORRECTION_TERMS = (
    # (regex, right-part is the tail of a longer clause: True for words, None for CJK characters)
    (re.compile(rf"不是(?P<wrong>{_CLAUSE}+?)的?[，,\s]*(?:而)?是(?P<right>{_CLAUSE}+)"), False),
    (re.compile(rf"应该是?(?P<right>{_CLAUSE}+?)而不是(?P<wrong>{_CLAUSE}+)"), False),
    (re.compile(rf"正确的是(?P<right>{_CLAUSE}+)"), False),
    # "苏念的眼睛是绿色的，不是蓝色": the right term ends the clause before (checked in correction_terms)
    (re.compile(rf"(?:是|叫|在)(?P<right>[^,.;:!?，。；：！？是叫在]+?)的?[，,]\s*(?:而)?不是(?:在|叫)?"
                rf"(?P<wrong>{_CLAUSE}+)"), None),
    (re.compile(rf"\bnot (?P<wrong>{_CLAUSE}+?),? but (?P<right>{_CLAUSE}+)", re.I), False),
    (re.compile(rf"\bnot (?P<wrong>{_CLAUSE}+?)[,;]\s*(?:it|that|he|she|they)(?:'s|'re| is| are) (?P<right>{_CLAUSE}+)",
                re.I), False),
    (re.compile(rf"\bshould (?:be|say|read) (?P<right>{_CLAUSE}+?),? (?:not|instead of|rather than) "
                rf"(?P<wrong>{_CLAUSE}+)", re.I), False),
    (re.compile(rf"(?P<right>{_CLAUSE}+?) (?:instead of|rather than) (?P<wrong>{_CLAUSE}+)", re.I), True),
    (re.compile(rf"(?P<right>{_CLAUSE}+?)\s*,\s*not (?P<wrong>{_CLAUSE}+)", re.I), True),
)
_DETERMINER = re.compile(r"^(?:(?:on|in|at|to|from|with|by)\s+)?(?:a|an|the|her|his|their|its|my|your)\s+", re.I)
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
        elif right_is_tail is None and len(right) > len(wrong) + 1:
            right = ""  # "是在灯塔认识的，不是在磨坊": no like-for-like term to write over the wrong one
        right = _clean_term(right)
        if right and wrong and right.casefold() == wrong.casefold():
            continue
        return (wrong or None), (right or None)
    return None, None
