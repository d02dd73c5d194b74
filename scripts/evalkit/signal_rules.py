"""The signal rules the product chose, measured against the plan's (DNA Memory seed 001, lines 54-83) on
the labelled lines, with the product's own pure functions (`stbme.dna.signals`) and embedder.

- Counting: the plan makes a signal for every matching pattern; the product keeps the best one per unit
  (an out-of-character part, a plain command). Compared: directives per instruction, the share of them
  with the labelled type, and the share of instructions that got their labelled type.
- Confidence: the plan scores the whole text; the product scores the unit. Compared with the sentence
  (the product before) and the whole message, at the only remember threshold where it decides anything
  (the conservative strategy's 0.8; the default balanced one remembers every signal from 0.7).
- Dedupe similarity: pairs of different labelled instructions of one type, and pairs of a real repeat
  (scripts/data/directive_repeats.jsonl), under the plan's cosine bounds alone and with the product's word
  overlap added.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np

from stbme.dna import repair
from stbme.dna.signals import (Signal, best_per_unit, confidence, extract_signals, is_negated, match_unit,
                               message_units, split_units)

REPEATS_PATH = Path(__file__).resolve().parent.parent / "data" / "directive_repeats.jsonl"
CONSERVATIVE = 0.8   # 1 - the conservative strategy's new_memory_weight 0.2


def _per_sentence(text: str, scope: str) -> list[Signal]:
    """The product before: one signal per sentence of each unit, scored on the sentence."""
    out = []
    for unit in message_units(text, scope):
        for sentence in split_units(unit.text):
            out += [Signal(t, sentence, confidence(sentence), p, unit.source == "ooc", source=unit.source)
                    for t, p in match_unit(sentence, addressed=unit.addressed)]
    return best_per_unit(out)


def _per_type(signals: list[Signal]) -> list[Signal]:
    seen, out = set(), []
    for s in signals:
        if (s.content, s.type) not in seen:
            seen.add((s.content, s.type))
            out.append(s)
    return out


COUNTING = {
    "the plan: one per matching pattern": lambda text, scope: extract_signals(text, scope=scope),
    "one per type and unit": lambda text, scope: _per_type(extract_signals(text, scope=scope)),
    "product: the best per unit": lambda text, scope: best_per_unit(extract_signals(text, scope=scope)),
    "before: the best per sentence": _per_sentence,
}


def counting_table(lines: list[dict], scope: str) -> str:
    head = f"{'counting rule':<38}{'dir/instr':>10}{'right type':>11}{'instr typed':>12}{'dir/other':>10}"
    out = [head, "-" * len(head)]
    instructions = [x for x in lines if x["label"] != "none"]
    others = [x for x in lines if x["label"] == "none"]
    for name, rule in COUNTING.items():
        made = {x["id"]: rule(x["text"], scope) for x in lines}
        directives = sum(len(made[x["id"]]) for x in instructions)
        right = sum(sum(s.type == x["label"] for s in made[x["id"]]) for x in instructions)
        typed = sum(any(s.type == x["label"] for s in made[x["id"]]) for x in instructions)
        stray = sum(len(made[x["id"]]) for x in others)
        out.append(f"{name:<38}{directives / len(instructions):>10.2f}{right / max(1, directives):>11.3f}"
                   f"{typed / len(instructions):>12.3f}{stray / max(1, len(others)):>10.3f}")
    return "\n".join(out)


def _scored(text: str, scope: str, basis: str) -> list[float]:
    """The confidence of each signal the product keeps, scored on the unit, its sentence, or the message."""
    scores = []
    for sig in best_per_unit(extract_signals(text, scope=scope)):
        if basis == "unit":
            scores.append(sig.confidence)
        elif basis == "message":
            scores.append(confidence(text))
        else:
            pattern = re.compile(sig.pattern, re.I | re.M)
            sentence = next((s for s in split_units(sig.content) if pattern.search(s)), sig.content)
            scores.append(confidence(sentence))
    return scores


def confidence_table(lines: list[dict], scope: str) -> str:
    head = f"{'confidence scored on':<34}{'mean':>6}{'  at 0.8 (conservative): made':>30}{'precision':>10}{'recall':>8}"
    out = [head, "-" * len(head)]
    instructions = sum(x["label"] != "none" for x in lines)
    for basis, name in (("unit", "product: the unit"), ("sentence", "before: the sentence"),
                        ("message", "the whole message")):
        scores = {x["id"]: _scored(x["text"], scope, basis) for x in lines}
        flat = [s for v in scores.values() for s in v]
        made = [x for x in lines if any(s >= CONSERVATIVE for s in scores[x["id"]])]
        tp = sum(x["label"] != "none" for x in made)
        out.append(f"{name:<34}{np.mean(flat) if flat else 0:>6.3f}{len(made):>30}"
                   f"{tp / max(1, len(made)):>10.3f}{tp / max(1, instructions):>8.3f}")
    example = "（OOC：我喜欢慢节奏。一定记住。）"
    out.append(f"  {example}: unit {_scored(example, scope, 'unit')}, sentence {_scored(example, scope, 'sentence')}"
               f"; the plan's example 不是红色是绿色，以后不要忘记 as OOC: "
               f"{len(extract_signals('（OOC：不是红色是绿色，以后不要忘记）'))} signals by the plan's count, "
               f"{len(best_per_unit(extract_signals('（OOC：不是红色是绿色，以后不要忘记）')))} kept")
    return "\n".join(out)


def _directive_text(sig: Signal) -> str:
    from stbme.dna.stage import directive_fields
    from stbme.graph.model import node_text
    return node_text(directive_fields(sig))


def dedupe_table(lines: list[dict], scope: str) -> str:
    """How often the dedupe (> 0.9, same type) and the loop check (> 0.85, corrections and errors) would
    join two different instructions, and how often they join a real repeat."""
    from stbme.embed.local import LocalEmbedder
    embedder = LocalEmbedder()
    embedder.load()

    def directive(text: str) -> tuple[str, str] | None:
        kept = best_per_unit(extract_signals(text, scope=scope))
        return (kept[0].type, _directive_text(kept[0])) if kept else None

    repeats = [json.loads(raw) for raw in REPEATS_PATH.read_text(encoding="utf-8").splitlines() if raw.strip()]
    out = [f"{'pairs':<44}{'same type':>10}{'cos > .9':>9}{'+ words':>8}{'same words':>11}{'loop types':>11}"
           f"{'cos > .85':>10}{'+ words':>8}"]
    out.append("-" * len(out[0]))
    for lang in sorted({x["lang"] for x in lines}):
        items = [d for x in lines if x["lang"] == lang and x["label"] != "none" and (d := directive(x["text"]))]
        pairs = list(itertools.combinations(range(len(items)), 2))
        out.append(_pair_row(f"{lang}: two different instructions", pairs, items, embedder))
        found = [(directive(r["first"]), directive(r["repeat"])) for r in repeats if r["lang"] == lang]
        items = [d for pair in found if pair[0] and pair[1] for d in pair]
        out.append(_pair_row(f"{lang}: an instruction and its repeat", [(2 * k, 2 * k + 1) for k in
                                                                         range(len(items) // 2)], items, embedder))
    out.append(f"(share of pairs joined; + words: and the texts share >= {repair.WORD_OVERLAP} of their words, "
               "Dice over the search terms, and agree on negation: the dedupe within the hour; same words: "
               f">= {repair.SAME_WORDS} of them and negation alike: the dedupe at any time; loop types: both a "
               "correction or an error)")
    return "\n".join(out)


def _pair_row(name: str, pairs, items, embedder) -> str:
    vectors = embedder.embed_passages_sync([t for _, t in items]) if items else []
    same = [(i, j) for i, j in pairs if items[i][0] == items[j][0]]
    loops = [(i, j) for i, j in pairs if items[i][0] in repair.LOOP_TYPES and items[j][0] in repair.LOOP_TYPES]

    def rates(group, bound, overlap, negation):
        cos = [repair.cosine(vectors[i], vectors[j]) > bound for i, j in group]
        words = [c and repair.word_overlap(items[i][1], items[j][1]) >= overlap
                 and (not negation or is_negated(items[i][1]) == is_negated(items[j][1]))
                 for c, (i, j) in zip(cos, group)]
        n = max(1, len(group))
        return sum(cos) / n, sum(words) / n

    d, dw = rates(same, repair.DEDUPE_SIMILARITY, repair.WORD_OVERLAP, True)
    _, da = rates(same, repair.DEDUPE_SIMILARITY, repair.SAME_WORDS, True)
    lp, lw = rates(loops, repair.LOOP_SIMILARITY, repair.WORD_OVERLAP, False)
    return f"{name:<44}{len(same):>10}{d:>9.3f}{dw:>8.3f}{da:>11.3f}{len(loops):>11}{lp:>10.3f}{lw:>8.3f}"


def recall_set_table(scope: str) -> str:
    """The same rule on the recall set's user messages (scripts/data/recall_eval.json.gz, ~3,000 messages of
    six long chats with their OOC instructions, OOC chatter and in-character look-alikes labelled)."""
    from .evalset import load
    head = f"{'user messages of the recall set':<40}{'lines':>7}{'made':>6}{'share':>7}{'right type':>11}"
    out = [head, "-" * len(head)]
    groups: dict[str, list[int]] = {}
    for chat in load()["chats"]:
        labels = chat["labels"]
        ooc = {i: t for i, t in labels["ooc_instructions"]}
        chatter, lookalikes = set(labels["ooc_chatter"]), set(labels["lookalikes"])
        for i, message in enumerate(chat["messages"]):
            if message["role"] != "user":
                continue
            types = {s.type for s in best_per_unit(extract_signals(message["text"], min_confidence=0.7, scope=scope))}
            group = (f"{chat['lang']} OOC instructions" if i in ooc else f"{chat['lang']} OOC chatter" if i in chatter
                     else f"{chat['lang']} in-character look-alikes" if i in lookalikes else f"{chat['lang']} other lines")
            row = groups.setdefault(group, [0, 0, 0])
            row[0] += 1
            row[1] += bool(types)
            row[2] += i in ooc and ooc[i] in types
    for name in sorted(groups):
        lines, made, right = groups[name]
        out.append(f"{name:<40}{lines:>7}{made:>6}{made / lines:>7.3f}"
                   + (f"{right / max(1, made):>11.3f}" if "instructions" in name else f"{'-':>11}"))
    return "\n".join(out)
