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


def _balanced_spans(text: str) -> tuple[list[str], bool]:
    """Candidate JSON values: from each top-level { or [ to its matching close (strings respected),
    longest first; and whether a value was left open at the end of the text (cut off)."""
    spans, cut_off = [], False
    i, n = 0, len(text)
    while i < n:
        if text[i] not in "{[":
            i += 1
            continue
        stack, in_str, j = [], False, i
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
        if stack and j >= n:  # the text ends inside this value
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
