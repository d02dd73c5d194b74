"""Turn what an LLM said into the JSON it meant: fenced blocks, text around the JSON, reasoning blocks,
trailing commas, comments, Python literals and smart quotes around keys.

An answer that stops inside its JSON (a string or a bracket left open: the model ran out of tokens) is not
repaired: closing it would keep a summary cut to "su" or an operation list cut in half as if they were the
answer. It raises JSONRepairError, so the call is asked again or fails."""

from __future__ import annotations

import re
from typing import Any

import orjson

_FENCE = re.compile(r"```(?:json|JSON|javascript|js)?\s*\n?(.*?)```", re.S)
_REASONING = re.compile(r"<(think|thinking|analysis|reasoning)>.*?</\1>", re.S | re.I)


class JSONRepairError(ValueError):
    """No JSON value could be read from the text."""


def _loads(text: str) -> Any:
    return orjson.loads(text)


def _scan_fix(text: str) -> str:
    """Outside strings: drop // and /* */ comments and commas before } or ], map True/False/None."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = False
    while i < n:
        ch = text[i]
        if in_str:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if ch == '"':
                in_str = False
            elif ch == "\n":
                out[-1] = "\\n"  # a raw newline inside a string is invalid JSON
            i += 1
            continue
        if ch in "\u201c\u201d":  # smart quotes used as JSON quotes
            ch = '"'
        if ch == '"':
            in_str = True
            out.append(ch)
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                i += 1
                continue
        for word, repl in (("True", "true"), ("False", "false"), ("None", "null")):
            if text.startswith(word, i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")) \
                    and not (i + len(word) < n and (text[i + len(word)].isalnum() or text[i + len(word)] == "_")):
                out.append(repl)
                i += len(word)
                break
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class TruncatedJSON(JSONRepairError):
    """The answer's JSON is cut off before it ends."""


def _value_end(text: str, i: int) -> tuple[int, bool]:
    """Where the { or [ at `i` closes (strings respected): its index, or the first mismatched bracket's; and
    whether the text ended with the value still open (cut off)."""
    stack, in_str, j, n = [], False, i, len(text)
    while j < n:
        ch = text[j]
        if in_str:
            if ch == "\\":
                j += 2
                continue
            if ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack[-1] != ch:
                break
            stack.pop()
            if not stack:
                break
        j += 1
    return j, bool(stack) and j >= n


def _balanced_spans(text: str) -> tuple[list[str], bool]:
    """Candidate JSON values: from each top-level { or [ to its matching close (strings respected),
    longest first; and whether a value was left open at the end of the text (cut off)."""
    spans, cut_off = [], False
    i, n = 0, len(text)
    while i < n:
        if text[i] not in "{[":
            i += 1
            continue
        j, open_at_end = _value_end(text, i)
        if open_at_end:  # the text ends inside this value
            cut_off = True
            break
        spans.append(text[i:j + 1])
        i = j + 1
    return sorted(spans, key=len, reverse=True), cut_off


def parse_json(text: str) -> Any:
    """The JSON value in an LLM's answer. Raises JSONRepairError when there is none."""
    if not isinstance(text, str) or not text.strip():
        raise JSONRepairError("the answer is empty")
    text = _REASONING.sub("", text.strip().lstrip("\ufeff")).strip()
    spans, cut_off = _balanced_spans(text)
    if cut_off:  # the answer ends inside a JSON value: whatever came before is not the whole answer
        raise TruncatedJSON(f"the answer stops before its JSON ends (cut off?): ...{text[-80:]!r}")
    for candidate in (text, *(m.group(1).strip() for m in _FENCE.finditer(text)), *spans):
        for variant in (candidate, _scan_fix(candidate)):
            try:
                value = _loads(variant)
            except orjson.JSONDecodeError:
                continue
            if isinstance(value, (dict, list)):
                return value
    raise JSONRepairError(f"no JSON object in the answer: {text[:160]!r}")


def salvage_items(text: str, key: str | None = None) -> list[dict]:
    """The complete objects of the first list in a cut-off answer: `{"operations": [{..}, {..}, {..` gives the
    first two (with `key`, an outer object's list must be that key's value). Only an object whose closing brace
    was written is kept, never the half one the answer stopped in, and the scan stops at the first element that
    does not parse, so nothing after a damaged spot is kept. The caller decides whether that is safe: it is for
    lists of operations or decisions, where each item stands alone."""
    if not isinstance(text, str):
        return []
    text = _REASONING.sub("", text.strip().lstrip("\ufeff"))
    start = text.find("[")
    brace = text.find("{")
    if start < 0:
        return []
    if 0 <= brace < start:  # the list must be the outer object's value, not one nested in an operation
        if text.count("{", brace, start) != 1 or (key and f'"{key}"' not in text[brace:start]):
            return []
    items: list[dict] = []
    i, n = start + 1, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] != "{":
            break  # the list ended, or holds something other than objects
        j, open_at_end = _value_end(text, i)
        if open_at_end or j >= n:  # the answer stops inside this object: it is the half one, dropped
            break
        chunk = text[i:j + 1]
        for variant in (chunk, _scan_fix(chunk)):
            try:
                value = _loads(variant)
            except orjson.JSONDecodeError:
                continue
            break
        else:
            break
        if not isinstance(value, dict):
            break
        items.append(value)
        i = j + 1
    return items
