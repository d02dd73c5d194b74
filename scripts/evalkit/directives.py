"""Scoring of directive creation on the labelled lines (scripts/data/directives.jsonl).

Each line: {"id", "lang", "register": "ic" | "ooc", "marked": bool (OOC markers: (OOC: …), ((…)), // …),
"label": "none" | correction | preference | decision | error | workflow, "looks_like"?: a type, "text",
"held_out"?: true for lines written before the signal rule and kept out of its tuning}.
`register` says whose voice it is: "ooc" is the player talking to the story-teller (marked or a plain
instruction), "ic" is the player's character. Only lines labelled with a type are real instructions.

A line *creates* a directive when the product makes at least one directive memory from it. Precision:
of the lines that create one, the share that are real instructions; recall: of the real instructions,
the share that create one; false-positive rate: of the other lines, the share that create one; type
accuracy: of the real instructions that create one, the share whose directives include the labelled type.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "directives.jsonl"
TYPES = ("correction", "preference", "decision", "error", "workflow")


def load(path: Path = DEFAULT_PATH) -> list[dict]:
    lines = [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]
    for line in lines:
        if line["label"] not in ("none", *TYPES) or line["register"] not in ("ic", "ooc"):
            raise ValueError(f"{path}: bad label or register in {line['id']}")
    return lines


@dataclasses.dataclass
class Counts:
    lines: int = 0
    instructions: int = 0
    created: int = 0
    true_pos: int = 0
    false_pos: int = 0
    right_type: int = 0
    merged: int = 0          # made no directive of its own, only reinforced an earlier one as a duplicate

    @property
    def precision(self) -> float | None:
        return self.true_pos / self.created if self.created else None

    @property
    def recall(self) -> float | None:
        return self.true_pos / self.instructions if self.instructions else None

    @property
    def false_positive_rate(self) -> float | None:
        others = self.lines - self.instructions
        return self.false_pos / others if others else None

    @property
    def type_accuracy(self) -> float | None:
        return self.right_type / self.true_pos if self.true_pos else None


def count(lines: list[dict], created: dict[str, list[str]], merged: dict[str, str] | None = None) -> Counts:
    """Counts over `lines`; `created[id]` lists the directive types made from each line, `merged[id]` says
    which earlier directive a line only reinforced (the write path merges near-duplicates)."""
    c = Counts()
    for line in lines:
        types = created.get(line["id"], [])
        real = line["label"] != "none"
        c.lines += 1
        c.instructions += real
        c.merged += bool(not types and merged and line["id"] in merged)
        if types:
            c.created += 1
            c.true_pos += real
            c.false_pos += not real
            c.right_type += real and line["label"] in types
    return c


def group_key(line: dict) -> str:
    if line["register"] == "ic":
        return "ic"
    return "ooc marked" if line["marked"] else "ooc plain"


def table(lines: list[dict], created: dict[str, list[str]], merged: dict[str, str] | None = None) -> str:
    """Precision, recall and type accuracy per language and register, then per type."""
    rows: list[tuple[str, list[dict]]] = []
    for lang in sorted({line["lang"] for line in lines}):
        mine = [line for line in lines if line["lang"] == lang]
        for key in ("ic", "ooc marked", "ooc plain"):
            rows.append((f"{lang} {key}", [line for line in mine if group_key(line) == key]))
        rows.append((f"{lang} ooc (all)", [line for line in mine if line["register"] == "ooc"]))
        rows.append((f"{lang} all", mine))
    rows.append(("all", lines))
    held = [line for line in lines if line.get("held_out")]
    if held:
        tuned = [line for line in lines if not line.get("held_out")]
        for lang in sorted({line["lang"] for line in held}):
            rows.append((f"held out, {lang}", [line for line in held if line["lang"] == lang]))
        rows.append(("held out, all", held))
        rows.append(("tuned on, all", tuned))
    for type_ in TYPES:
        rows.append((f"all, label {type_}", [line for line in lines if line["label"] == type_]))
    head = (f"{'group':<22}{'lines':>6}{'instr':>6}{'made':>6}{'TP':>5}{'FP':>5}  precision  recall"
            f"  fp-rate  type-acc" + ("  merged" if merged is not None else ""))
    out = [head, "-" * len(head)]
    fmt = lambda v: "    -" if v is None else f"{v:5.3f}"  # noqa: E731
    for name, group in rows:
        c = count(group, created, merged)
        out.append(f"{name:<22}{c.lines:>6}{c.instructions:>6}{c.created:>6}{c.true_pos:>5}{c.false_pos:>5}"
                   f"      {fmt(c.precision)}   {fmt(c.recall)}    {fmt(c.false_positive_rate)}     {fmt(c.type_accuracy)}"
                   + (f"  {c.merged:>6}" if merged is not None else ""))
    return "\n".join(out)


def confusions(lines: list[dict], created: dict[str, list[str]], detail: dict[str, str], limit: int,
               merged: dict[str, str] | None = None) -> str:
    """False positives (what the in-character line turned into), misses and wrong types."""
    fp = [line for line in lines if line["label"] == "none" and created.get(line["id"])]
    fn = [line for line in lines if line["label"] != "none" and not created.get(line["id"])]
    wrong = [line for line in lines if line["label"] != "none" and created.get(line["id"])
             and line["label"] not in created[line["id"]]]
    out = []
    for title, group in (("Directives from lines that are not instructions", fp),
                         ("Instructions that made no directive", fn), ("Instructions made as another type", wrong)):
        out.append(f"\n{title} ({len(group)}):")
        for line in group[:limit]:
            made = ",".join(created.get(line["id"], [])) or "-"
            why = detail.get(line["id"]) or (f"merged into: {merged[line['id']]}" if merged and line["id"] in merged else "")
            out.append(f"  {line['id']} [{group_key(line)}; label {line['label']}; made {made}] {line['text']!r}"
                       + (f"  <- {why}" if why else ""))
        if len(group) > limit:
            out.append(f"  ... {len(group) - limit} more")
    return "\n".join(out)
