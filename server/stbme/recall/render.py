"""Render chosen memories as the block injected into the prompt, in the chat's language, within a
token budget (cl100k_base): never over it.

What goes in, in turn: pinned memories, rules and the synopsis (always considered first); the user's
directives, within their share of the budget and each said once; then the evidence, best first, as long as
it fits. How it reads: fixed sections, past events in story order with their story date ("[Mar 4]"), so the
same memories always render to the same text (a provider's prompt cache can hold it)."""

from __future__ import annotations

import functools

import datetime as dt
from collections.abc import Callable

from ..graph.model import Node, field_text
from ..graph.schema import MESSAGE_FIELDS, NODE_TYPES
from ..tokens import count_joined, count_tokens, fit_tokens
from .snippet import focus
from ..pipeline.timeline import format_story_date

# Pinned memories first (the user chose them), then the user's directives and the story's rules.
SECTION_ORDER = ("pinned", "directives", "rules", "state", "episodic", "reflective", "other")
HEADINGS = {
    "en": {
        "title": "[Long-term memory of this story: background for continuity. Use what fits; do not repeat it verbatim.]",
        "pinned": "## Pinned memories",
        "directives": "## User directives (follow these)",
        "rules": "## Rules and constraints",
        "state": "## Characters, places and things",
        "episodic": "## Past events",
        "reflective": "## Reflections and synopsis",
        "other": "## Other notes",
        "message": "msg",
    },
    "zh": {
        "title": "[本故事的长期记忆：用于保持前后连贯的背景。按需使用，不要逐字复述。]",
        "pinned": "## 置顶记忆",
        "directives": "## 用户指示（请遵守）",
        "rules": "## 规则与约束",
        "state": "## 人物、地点与事物",
        "episodic": "## 过往事件",
        "reflective": "## 反思与概要",
        "other": "## 其他记忆",
        "message": "楼",
    },
}
_HIDDEN_FIELDS = {*MESSAGE_FIELDS, "participants"}


def section_of(node: Node) -> str:
    """The block section a memory goes in: pinned ones first, except directives, which keep their
    "follow these" heading."""
    spec = NODE_TYPES.get(node.type)
    section = spec.section if spec else "other"
    return "pinned" if node.pinned and section != "directives" else section


def story_day(node: Node) -> dt.date | None:
    day = (node.story_time or {}).get("date") if isinstance(node.story_time, dict) else None
    try:
        return dt.date.fromisoformat(day) if isinstance(day, str) else None
    except ValueError:
        return None


def render_line(node: Node, lang: str, today: dt.date | None = None,
                shorten: Callable[[str], str] | None = None) -> str:
    """One memory as a bullet line; an event says when it happened (its story date, else its message).
    `shorten` gives the part of a long event text to show (snippet.focus)."""
    if node.type == "event":
        head, body = _event_line(node, lang, today, shorten)
        return head + body if body else head.rstrip()
    return _other_line(node, lang)


def _event_line(node: Node, lang: str, today: dt.date | None, shorten) -> tuple[str, str]:
    f = node.fields
    day = story_day(node)
    if day is not None:
        where = f"[{format_story_date(day, lang, today)}] "
    else:
        where = f"[{HEADINGS[lang]['message']} {node.seq_from}] " if node.seq_from is not None else ""
    speaker = f"{f['speaker']}: " if f.get("speaker") else ""
    summary = field_text(f.get("summary"))
    body = field_text(f.get("title")) + (" — " if f.get("title") else "") + (
        shorten(summary) if shorten else summary)
    context = field_text(f.get("context"))  # what A-MEM evolution learnt about it since
    body = body.strip() + (f" ({context})" if context else "")
    return f"- {where}{speaker}", body


def _other_line(node: Node, lang: str) -> str:
    f = node.fields
    if node.type == "correction" and f.get("right"):  # the user's words, then what to use instead of what
        right, wrong = field_text(f["right"]), field_text(f.get("wrong"))
        if lang == "zh":
            hint = f"（应为“{right}”" + (f"，而非“{wrong}”）" if wrong else "）")
        else:
            hint = f' (use "{right}"' + (f', not "{wrong}")' if wrong else ")")
        return f"- {field_text(f.get('content'))}{hint}"
    head = field_text(f.get("name") or f.get("title") or "")
    rest = [f"{k}: {field_text(v)}" for k, v in f.items()
            if k not in ("name", "title") and k not in _HIDDEN_FIELDS and field_text(v)]
    if node.type in ("rule",) and f.get("constraint"):
        rest = [field_text(f["constraint"])] + [r for r in rest if not r.startswith("constraint:")]
    if len(rest) == 1 and ":" in rest[0] and rest[0].split(":", 1)[0] in ("summary", "content", "insight"):
        rest = [rest[0].split(":", 1)[1].strip()]
    text = head + (": " if head and rest else "") + "; ".join(rest)
    return f"- {text}"


@functools.cache
def _fixed_tokens(text: str) -> int:
    """Token counts of the headings, counted once."""
    return count_tokens(text)


def has_content(fields: dict) -> bool:
    """A bare name anchor (no other field) says nothing on its own: it is not injected."""
    return any(field_text(v) for k, v in fields.items() if k != "name" and k not in MESSAGE_FIELDS)


def render_block(nodes: list[Node], budget_tokens: int, lang: str, *, evidence: list[Node] = (),
                 directive_share: float = 1.0, today: dt.date | None = None,
                 query_weights: dict[str, float] | None = None,
                 line_tokens: int = 0) -> tuple[str, list[Node], int]:
    """Fit memories into the budget: `nodes` (the core: pinned, rules, synopsis, directives) first, directives
    within `directive_share` of the budget and each text once, then `evidence` in rank order, an evidence
    text over `line_tokens` shown by its sentences that share the query's words (`query_weights`, term ->
    weight). Returns the text, the memories it holds and its token count.

    A line's cost is the count of the line with its line break: the text count_joined counts it as in the
    block, so the block's exact count, taken once, finds most of its lines' counts remembered (a line shown
    before, or a long memory's new snippet counted a moment ago). The block never exceeds the budget."""
    h = HEADINGS[lang]
    line_cap = max(40, budget_tokens // 3)
    chosen: list[tuple[Node, str, str]] = []   # (memory, its line, its section)
    used = _fixed_tokens(h["title"])
    directive_room = int(budget_tokens * directive_share)
    directive_used = 0
    said: set[str] = set()
    sections_used: set[str] = set()
    shorten = (lambda text: focus(text, query_weights, line_tokens)) if query_weights and line_tokens else None
    # Only evidence is shortened: the core (pinned, rules, directives) is always shown whole.
    for node, node_shorten in [*((n, None) for n in nodes), *((n, shorten) for n in evidence)]:
        line = render_line(node, lang, today, node_shorten)
        cost = count_tokens(line + "\n")
        if cost > line_cap:
            line, tokens = fit_tokens(line, line_cap)
            cost = tokens + 1
        section = section_of(node)
        if section not in sections_used:
            cost += _fixed_tokens(h[section]) + 2
        if used + cost > budget_tokens:
            continue  # a shorter, lower-ranked memory may still fit
        if section == "directives":
            if line in said or directive_used + cost > directive_room:
                continue  # the same instruction twice, or directives would crowd out the evidence
            said.add(line)
            directive_used += cost
        chosen.append((node, line, section))
        sections_used.add(section)
        used += cost
    while chosen:
        lines = _assemble(chosen, h)
        tokens = count_joined(lines)   # the joined block's exact count
        if tokens <= budget_tokens:
            return "\n".join(lines), [n for n, _, _ in chosen], tokens
        # The costs above are per line; the joined text is what must fit (a section's last line goes with
        # the blank line after it, the block's last has no break): while it is over, the last one chosen goes.
        chosen.pop()
    return "", [], 0


def _assemble(chosen: list[tuple[Node, str, str]], h: dict) -> list[str]:
    """The block's lines (joined by line breaks)."""
    parts = [h["title"]]
    for section in SECTION_ORDER:
        lines = [(n, line) for n, line, in_section in chosen if in_section == section]
        if not lines:
            continue
        if section == "episodic":  # story order reads better than score order
            lines.sort(key=lambda item: (item[0].seq_from if item[0].seq_from is not None else 1 << 60,
                                         item[0].id))
        parts.append("")
        parts.append(h[section])
        parts.extend(line for _, line in lines)
    return parts
