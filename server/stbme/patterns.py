"""User-written regular expressions (gene trigger patterns, extract.trigger_patterns), matched with RE2.

Python's `re` backtracks: a pattern like `(a+)+$` against 30 `a`s and a `!` takes minutes, and it would
run on the event loop. RE2 matches in time linear in the text and refuses what it cannot do in linear
time (backreferences, lookaround), so a pattern is checked once, at save, and is then safe to run on any
text. Syntax: https://github.com/google/re2/wiki/Syntax (`\\b` and `\\w` are ASCII-only).
"""

from __future__ import annotations

import functools

import re2

MAX_PATTERN_CHARS = 500
_MAX_PROGRAM_BYTES = 8 << 20  # RE2's memory for one compiled pattern; a larger one is refused


class PatternError(ValueError):
    """A pattern RE2 cannot compile (bad syntax, or a feature without a linear-time match)."""


def _options() -> re2.Options:
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False  # a refused pattern is an answer to the user, not a log line
    options.max_mem = _MAX_PROGRAM_BYTES
    return options


@functools.lru_cache(maxsize=512)
def compile_pattern(pattern: str):
    """The compiled, case-insensitive pattern, or PatternError saying why RE2 refuses it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"longer than {MAX_PATTERN_CHARS} characters")
    try:
        return re2.compile(pattern, _options())
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"{detail} (patterns use RE2 syntax: no backreferences or lookaround)") from None


def check_pattern(pattern: str) -> str:
    """The pattern itself when RE2 accepts it, else PatternError."""
    compile_pattern(pattern)
    return pattern


def matches(pattern: str, text: str) -> bool:
    """Whether the pattern occurs in the text (case-insensitive); False for a pattern RE2 refuses
    (one stored before patterns were checked)."""
    try:
        return compile_pattern(pattern).search(text) is not None
    except PatternError:
        return False


def split_patterns(patterns: str) -> list[str]:
    """extract.trigger_patterns: comma- or newline-separated, blanks ignored."""
    return [p.strip() for p in patterns.replace("\n", ",").split(",") if p.strip()]
