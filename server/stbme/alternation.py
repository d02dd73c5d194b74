"""One alternation of many phrases that Python's `re` scans fast.

`re` tries every alternative of `a|b|c` at every position of a text. With forty phrases and a roleplay message of
a thousand characters or more, that is most of a scan's time (the vocatives of graph/attribution.py, the change
words of recall/current.py). Grouped by first character behind a lookahead of those characters, a position that
starts no phrase fails at one test, and one that does tries only its group. The matches are the same: at one
position only the phrases that start with its character can match, and within a group their order is kept.
"""

from __future__ import annotations

from collections.abc import Iterable


def alternation(phrases: Iterable[str]) -> str:
    """The phrases (regular expressions, each starting with a plain character: a letter, a digit or a CJK
    character, with no quantifier of its own) as one group: ["hi", "hey", "thanks"] gives
    "(?=[ht])(?:h(?:i|ey)|t(?:hanks))". Under (?i) the lookahead ignores case as the phrases do; give the phrases
    in lowercase then."""
    by_first: dict[str, list[str]] = {}
    for phrase in phrases:
        if not phrase[:1].isalnum() or phrase[1:2] in ("?", "*", "+", "{"):
            raise ValueError(f"a phrase must start with a letter or a digit of its own, not {phrase!r}")
        by_first.setdefault(phrase[0], []).append(phrase[1:])
    groups = "|".join(f"{first}(?:{'|'.join(rests)})" for first, rests in by_first.items())
    return f"(?=[{''.join(by_first)}])(?:{groups})"
