"""Scores of the recall evaluation, and the tables that print them.

A ranked item is a message range (first, last): a product memory's `seq_range`, or (i, i) for a raw
message in the baselines. An item *hits* an evidence message when its range covers the message index.
- recall@k of a question: the share of its evidence messages hit by the first k items; averaged over
  questions (multi-hop questions with three evidence messages get partial credit).
- block share: of the evidence hit in the top 10, the share also hit by the injected block, pooled
  over questions (sum of both counts, then the ratio).
- stale rate: the share of correction questions whose block holds a memory of a stale message that
  still says the old value.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict

import numpy as np

KS = (5, 10, 20)
BAR_MARGIN = 0.03       # issue 18's bar: the fusion baselines + 3 points, and each of the product's own sides
RESAMPLES = 2000        # bootstrap resamples of a group's questions
DIRECTIVE_TYPES = frozenset(("correction", "preference", "decision", "error", "workflow"))

Range = tuple[int, int]


@dataclasses.dataclass
class Outcome:
    """One system's answer to one question."""
    qid: str
    lang: str
    category: str
    evidence: list[int]
    ranked: list[Range]
    block: list[Range] | None = None          # the injected block (the product only)
    stale_in_block: bool | None = None        # correction questions (the product only)
    directives_block: int = 0
    answer_in_block: bool | None = None       # every part of the answer is in the block's text


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).casefold().strip()


def answer_found(answer: str, text: str) -> bool:
    """Is every part of the answer ("老刘; 奶奶") in the text? Case and spacing do not count."""
    hay = _squash(text)
    parts = [_squash(a) for a in answer.split(";") if a.strip()]
    return bool(parts) and all(part in hay for part in parts)


def hits(evidence: list[int], items: list[Range]) -> set[int]:
    """Evidence indexes covered by any item."""
    return {e for e in evidence if any(a <= e <= b for a, b in items)}


def recall_at(evidence: list[int], ranked: list[Range], k: int) -> float:
    return len(hits(evidence, ranked[:k])) / len(evidence) if evidence else 0.0


def first_hit_rank(evidence: list[int], ranked: list[Range]) -> int | None:
    """1-based rank of the first item that hits any evidence, None when none does."""
    for rank, (a, b) in enumerate(ranked, 1):
        if any(a <= e <= b for e in evidence):
            return rank
    return None


@dataclasses.dataclass
class Score:
    n: int
    recall: dict[int, float]
    block_share: float | None = None
    stale_rate: float | None = None
    stale_n: int = 0
    directives_block: float | None = None
    answer_rate: float | None = None


def score(outcomes: list[Outcome]) -> Score:
    """Aggregate scores of a group of outcomes (one system)."""
    n = len(outcomes)
    recall = {k: sum(recall_at(o.evidence, o.ranked, k) for o in outcomes) / n if n else 0.0 for k in KS}
    result = Score(n, recall)
    with_block = [o for o in outcomes if o.block is not None]
    if with_block:
        top = sum(len(hits(o.evidence, o.ranked[:10])) for o in with_block)
        kept = sum(len(hits(o.evidence, o.ranked[:10]) & hits(o.evidence, o.block)) for o in with_block)
        result.block_share = kept / top if top else None
        result.directives_block = sum(o.directives_block for o in with_block) / len(with_block)
    answered = [o for o in outcomes if o.answer_in_block is not None]
    if answered:
        result.answer_rate = sum(o.answer_in_block for o in answered) / len(answered)
    stale = [o for o in outcomes if o.stale_in_block is not None]
    if stale:
        result.stale_rate = sum(o.stale_in_block for o in stale) / len(stale)
        result.stale_n = len(stale)
    return result


def groups(outcomes: list[Outcome], categories: tuple[str, ...]) -> dict[tuple[str, str], list[Outcome]]:
    """Outcomes by (language, category), with (language, 'all') and ('all', 'all')."""
    out: dict[tuple[str, str], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        out[(o.lang, o.category)].append(o)
        out[(o.lang, "all")].append(o)
        out[("all", "all")].append(o)
    langs = sorted({o.lang for o in outcomes})
    order = [(lang, c) for lang in langs for c in (*categories, "all")] + [("all", "all")]
    return {key: out[key] for key in order if out.get(key)}


def _fmt(value: float | None, width: int = 5) -> str:
    if value is None:
        return "-".rjust(width)
    return f"{value:.3f}".lstrip("0").rjust(width) if value < 1 else f"{value:.2f}".rjust(width)


def _recall_cells(s: Score) -> str:
    return " ".join(_fmt(s.recall[k]) for k in KS)


def main_table(systems: dict[str, list[Outcome]], categories: tuple[str, ...], product: str) -> str:
    """Recall@5/10/20 of every system per language and category, plus the product's block share, stale
    rate and directive memories among its first 10."""
    names = list(systems)
    width = len(_recall_cells(Score(0, {k: 0.0 for k in KS})))
    head1 = f"{'':<19}|" + "|".join(f" {name[:width]:<{width}} " for name in names) + "| product"
    head2 = f"{'lang category':<14}{'n':>5}|" + "|".join(f" {'R@5   R@10  R@20':<{width}} " for _ in names) + \
        "| block  answer stale  dirs"
    lines = [head1, head2, "-" * len(head2)]
    grouped = {name: groups(outs, categories) for name, outs in systems.items()}
    for key in grouped[product]:
        row = f"{key[0] + ' ' + key[1]:<14}{len(grouped[product][key]):>5}|"
        row += "|".join(f" {_recall_cells(score(grouped[name].get(key, [])))} " for name in names)
        p = score(grouped[product][key])
        row += f"| {_fmt(p.block_share)}  {_fmt(p.answer_rate)}  {_fmt(p.stale_rate)}  {_fmt(p.directives_block)}"
        lines.append(row)
    return "\n".join(lines)


def ablation_table(variants: dict[str, list[Outcome]]) -> str:
    """One row per variant: recall per language, block share, stale rate, directive slots in the top 10."""
    langs = sorted({o.lang for outs in variants.values() for o in outs})
    width = len(_recall_cells(Score(0, {k: 0.0 for k in KS})))
    head = f"{'variant':<48}|" + "|".join(f" {lang + ' R@5  R@10  R@20':<{width}} " for lang in langs) + \
        "|  R@10 | block  answer stale  dirs"
    lines = [head, "-" * len(head)]
    for name, outs in variants.items():
        row = f"{name[:48]:<48}|"
        row += "|".join(f" {_recall_cells(score([o for o in outs if o.lang == lang]))} " for lang in langs)
        s = score(outs)
        row += f"| {_fmt(s.recall[10])} | {_fmt(s.block_share)}  {_fmt(s.answer_rate)}  {_fmt(s.stale_rate)}  " \
            f"{_fmt(s.directives_block)}"
        lines.append(row)
    return "\n".join(lines)


def r10_table(systems: dict[str, list[Outcome]], categories: tuple[str, ...]) -> str:
    """R@10 of every system (a row each) per group and category (a column each): the compact table for
    comparing the product's variants with the baselines."""
    keys = list(groups(next(iter(systems.values())), categories))
    head = f"{'system':<44}|" + "|".join(f"{(g + ' ' + c)[:13]:>13}" for g, c in keys)
    counts = f"{'n':<44}|" + "|".join(f"{len(v):>13}" for v in groups(next(iter(systems.values())), categories).values())
    lines = [head, counts, "-" * len(head)]
    for name, outs in systems.items():
        grouped = groups(outs, categories)
        lines.append(f"{name[:44]:<44}|" + "|".join(f"{_fmt(score(grouped.get(k, [])).recall[10]):>13}" for k in keys))
    return "\n".join(lines)


@dataclasses.dataclass
class BarCell:
    """The product's R@10 in one group against issue 18's bar, with how sure that comparison is."""
    key: tuple[str, str]
    n: int
    product: float
    bar: float
    by: str            # the system that sets the bar
    low: float         # 5th and 95th percentiles of the margin (product - bar) over resampled questions
    high: float
    reached: float     # the share of resamples in which the product reaches the bar

    @property
    def margin(self) -> float:
        return self.product - self.bar

    @property
    def met(self) -> bool:
        return self.margin >= -1e-9


def bar_cells(product: list[Outcome], fusions: dict[str, list[Outcome]], sides: dict[str, list[Outcome]],
              categories: tuple[str, ...], *, margin: float = BAR_MARGIN, resamples: int = RESAMPLES,
              seed: int = 0) -> list[BarCell]:
    """Per (language, category) group of the product's questions: its R@10 against the bar (each fusion
    baseline + `margin`, each of the product's own sides, whichever is highest), and a paired bootstrap of the
    difference: the group's questions drawn again with replacement, every system scored on the same draw. A
    group of 21 questions is one question (about 5 points) wide; the interval says so."""
    others = {**{name: (outs, margin) for name, outs in fusions.items()},
              **{name: (outs, 0.0) for name, outs in sides.items()}}
    if not others:
        raise ValueError("bar_cells: no fusion baseline and no side to set the bar")
    by_qid = {name: {o.qid: recall_at(o.evidence, o.ranked, 10) for o in outs} for name, (outs, _) in others.items()}
    missing = {name: len({o.qid for o in product} - set(scored)) for name, scored in by_qid.items()}
    if any(missing.values()):   # scored as 0 they would lower the bar: the runs asked different questions
        raise ValueError(f"bar_cells: product questions missing from {', '.join(n for n, k in missing.items() if k)}")
    lifts = np.array([0.0] + [lift for _, lift in others.values()])[:, None]
    rng = np.random.default_rng(seed)
    cells = []
    for key, outs in groups(product, categories).items():
        if key == ("all", "all"):
            continue
        rows = np.array([[recall_at(o.evidence, o.ranked, 10) for o in outs]]
                        + [[by_qid[name][o.qid] for o in outs] for name in others])
        draws = rng.integers(0, len(outs), size=(resamples, len(outs)))
        means = rows.mean(axis=1) + lifts[:, 0]
        resampled = rows[:, draws].mean(axis=2) + lifts                  # (systems, resamples)
        diffs = resampled[0] - resampled[1:].max(axis=0)
        best = int(np.argmax(means[1:]))
        cells.append(BarCell(key, len(outs), float(means[0]), float(means[1 + best]), list(others)[best],
                             float(np.percentile(diffs, 5)), float(np.percentile(diffs, 95)),
                             float(np.mean(diffs >= -1e-9))))
    return cells


def whole_sets(outcomes: list[Outcome]) -> list[Outcome]:
    """The outcomes with a half's label ("en-tune", "en-held") folded into its set's language ("en")."""
    return [dataclasses.replace(o, lang=o.lang.split("-")[0]) for o in outcomes]


def bar_table(cells: list[BarCell]) -> str:
    """The bar cells as lines: product, bar and who sets it, the margin and its 90% interval, MET or MISS."""
    def signed(x: float) -> str:
        return ("+" if x >= 0 else "-") + f"{abs(x):.3f}".lstrip("0")

    head = f"{'group':<18}{'n':>5} | product |  bar  set by {'':<26}| margin  90% interval  reached in"
    lines = [head, "-" * len(head)]
    for c in cells:
        lines.append(f"{c.key[0] + ' ' + c.key[1]:<18}{c.n:>5} |  {_fmt(c.product)}  | {_fmt(c.bar)}  {c.by[:32]:<32}|"
                     f" {signed(c.margin)}  [{signed(c.low)}, {signed(c.high)}]  {c.reached:>5.0%}  "
                     f"{'MET' if c.met else 'MISS'}")
    return "\n".join(lines)
