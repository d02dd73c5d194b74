#!/usr/bin/env python
"""Recall evaluation: the real product (stbme serve, the bundled local model, heuristic memories) against
plain BM25, the same model alone and their fusion (each over the bare text and over "Speaker: text"), on
the generated bilingual roleplay set (scripts/data/recall_eval.json.gz; see make_eval_set.py: CI's
regression check) or on the public development sets of real conversations (--public realtalk, --public
kdconv; evalkit/public_sets.py says where to get them), with an ablation of every read-path stage that
has a setting.

The chats are synced as the SillyTavern extension syncs them; each question is sent as the chat's new
user message and recalled as the extension's interceptor asks (query = that message, recent = the four
messages before it, budget = the chat's recall.budget_tokens). Scores: evidence recall@5/10/20 per
language and category, the share of the top-10 evidence that reaches the injected block, the stale-fact
rate on corrected facts, and the directive memories among the first 10. With the product's two sides and
the fusion baselines in the run, issue 18's bar per group (metrics.bar_cells): the margin to the best fusion
+ 3 points or the best side, with its interval from resampling the group's questions.

    .venv/bin/python scripts/eval_recall.py                    # everything
    .venv/bin/python scripts/eval_recall.py --quick            # one chat per language
    .venv/bin/python scripts/eval_recall.py --data-dir /tmp/ev # keep the product's data: a re-run skips ingest
    STBME_RECALL_TUNING='{"CANDIDATES": 200}' .venv/bin/python scripts/eval_recall.py --no-ablations
    .venv/bin/python scripts/eval_recall.py --public realtalk --public kdconv --data-dir /tmp/ev-public

Cost: ingesting the six chats takes the product about 25 CPU minutes (it embeds every message); the
21 recall passes about 4 minutes; the baselines' vectors as much CPU as the ingest once, then nothing
(cached in .eval-cache/). The script prints wall time and the server's CPU time.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evalkit import evalset, metrics, public_sets  # noqa: E402
from evalkit.embedcache import DEFAULT_DIR, EmbeddingCache  # noqa: E402
from evalkit.runs import as_long_inputs, baseline_outcomes, product_outcomes  # noqa: E402
from evalkit.sidecar import Client, Server, parse_settings, processed_length  # noqa: E402

PRODUCT = "product defaults"
# The DNA scheduler's passes change what a recall ranks by; the evaluation reflects each chat once, itself.
STILL_DNA = {"dna.auto_reflect": False, "dna.auto_decay": False}
# Each stage off in turn. A read-path setting is global (one pass, then back to its default); a named
# constant of the read path (recall/tuning.py) is overridden by restarting the server under
# STBME_RECALL_TUNING; "query" variants change the request. Write-path settings need the chats ingested
# again under a per-chat override (their embeddings come from the product's own cache, so that is cheap).
READ_ABLATIONS = {
    "keywords only (VECTOR_WEIGHT 0)": ("tuning", {"VECTOR_WEIGHT": 0.0}),
    "vectors only (LEXICAL_WEIGHT 0)": ("tuning", {"LEXICAL_WEIGHT": 0.0, "LEXICAL_WEIGHT_CJK": 0.0}),
    "raw input (recall.query_cleanup false)": ("settings", {"recall.query_cleanup": False}),
    "no days (TIME_WEIGHT 0)": ("tuning", {"TIME_WEIGHT": 0.0}),
    "no graph (GRAPH_WEIGHT 0)": ("tuning", {"GRAPH_WEIGHT": 0.0}),
    "no subject of the recent turns (SUBJECT_WEIGHT 0)": ("tuning", {"SUBJECT_WEIGHT": 0.0}),
    "no passage the recent turns echo (SUBJECT_ECHOES 0)": ("tuning", {"SUBJECT_ECHOES": 0}),
    "no latest word (LATEST_WEIGHT 0)": ("tuning", {"LATEST_WEIGHT": 0.0}),
    "no neighbours (NEIGHBOUR_SHARE 0)": ("tuning", {"NEIGHBOUR_SHARE": 0.0}),
    "neighbours: exchange (user-role rule)": ("tuning", {"NEIGHBOUR_KINDS": ["exchange"]}),
    "neighbours: replies before and after": ("tuning", {"NEIGHBOUR_KINDS": ["prev_reply", "next_reply"]}),
    "neighbours: + same speaker's next": ("tuning", {"NEIGHBOUR_KINDS": ["prev_reply", "next_reply", "next_same"]}),
    "neighbours: every adjacent message": ("tuning", {"NEIGHBOUR_KINDS": ["prev_reply", "next_reply", "next_same",
                                                                          "prev_same"]}),
    "no references (recall.recent_turns 0)": ("settings", {"recall.recent_turns": 0}),
    "references: 1 recent turn (recall.recent_turns 1)": ("settings", {"recall.recent_turns": 1}),
    "no borrowed rare terms (BORROW_RARE_TERMS false)": ("tuning", {"BORROW_RARE_TERMS": False}),
    "no question-only lowering (ASKING_SHARE 1)": ("tuning", {"ASKING_SHARE": 1.0}),
    "no speaker asked about (SPEAKER_SHARE 1)": ("tuning", {"SPEAKER_SHARE": 1.0}),
    "no lift from a question on topic (ASKING_TOPIC_LIFT false)": ("tuning", {"ASKING_TOPIC_LIFT": False}),
    "floors off (MIN_SIMILARITY, VECTOR_MARGIN, MIN_BM25 0)": ("tuning", {"MIN_SIMILARITY": 0.0,
                                                                          "VECTOR_MARGIN": 0.0, "MIN_BM25": 0.0}),
    "candidates 200 (CANDIDATES)": ("tuning", {"CANDIDATES": 200}),
    "no importance (IMPORTANCE_WEIGHT 0)": ("tuning", {"IMPORTANCE_WEIGHT": 0.0}),
    "no recency (RECENCY_WEIGHT 0)": ("tuning", {"RECENCY_WEIGHT": 0.0}),
    "no near-dup drop (DUPLICATE_SIMILARITY 1)": ("tuning", {"DUPLICATE_SIMILARITY": 1.0}),
    "common terms length-normalised (COMMON_TERM_SHARE 0)": ("tuning", {"COMMON_TERM_SHARE": 0.0}),
    "long input: the 4 recent turns and the question as one input": ("query", "long"),
}
# The product's own single rankings: the bar compares the fused ranking with each, so they run on
# every chat of the run (both halves of a public set), not only on the part the ablations use.
SINGLE_SIDES = ("keywords only (VECTOR_WEIGHT 0)", "vectors only (LEXICAL_WEIGHT 0)")
NO_DIRECTIVES = "no directives (dna.signals false)"
WRITE_ABLATIONS = {
    NO_DIRECTIVES: {"dna.signals": False},
    "OOC-only signals (dna.signal_scope ooc)": {"dna.signal_scope": "ooc"},
}
NOT_ABLATABLE = (
    "the directives' share of the block (recall.directive_share) apart from creating none (dna.signals)",
    "the speaker-attributed text indexed and embedded (a write-path change: its worth is the baselines'"
    " bare vs speaker rows)",
    "reciprocal-rank fusion itself (its k = 60) and the DNA weight factor on the score",
    "one memory per message (a long message's chunks are one piece of evidence)",
    "the rendering order and per-line token cap of the block (recall.budget_tokens is the budget, not a stage)",
)


def log(text: str) -> None:
    click.echo(text, err=True)


async def ingest(client: Client, chats: list[dict], suffix: str = "", overrides: dict | None = None) -> None:
    for chat in chats:
        chat_id = chat["chat_id"] + suffix
        if overrides:
            await client.put_chat_settings(chat_id, overrides)
        await client.sync(chat_id, chat["messages"])
    await client.wait_processed({c["chat_id"] + suffix: processed_length(c["messages"]) for c in chats})
    # Each chat reflected once, as the DNA scheduler does after a chat's first memories; the scheduler itself
    # is off (STILL_DNA): a reflection it started in the middle of a pass, or on its first tick after a
    # restart, would change the memory layers a ranking reads, and passes are compared with each other
    # (49 of 494 questions ranked differently in two passes of the same code).
    for chat in chats:
        await client.call("POST", client.chat_url(chat["chat_id"] + suffix, "/dna/reflect"))


def write_suffix(values: dict) -> str:
    """Chat id suffix of the copies ingested under per-chat overrides."""
    return "#" + ",".join(f"{k}={v}" for k, v in values.items())


async def read_ablations(product, chats: list[dict], *, suffix: str, budget: int, defaults: dict,
                         label: str, variants: dict, details: dict, only: tuple[str, ...] = (),
                         names=tuple(READ_ABLATIONS)) -> None:
    """Each read-path stage of `names` off in turn: a global setting for one pass, then back to its default;
    a named constant with the server restarted under STBME_RECALL_TUNING, then restarted without it."""
    for name in names:
        kind, values = READ_ABLATIONS[name]
        if only and not any(o.lower() in name.lower() for o in only):
            continue
        log(f"ablation{label}: {name}")
        details[name] = {}
        if kind == "both":   # a setting and a constant at once
            settings_values, tuning_values = values
            client = await product.restart(tuning_values)
            await client.put_settings(settings_values)
            try:
                variants[name] = await product_outcomes(client, chats, suffix=suffix, budget=budget,
                                                        details=details[name])
            finally:
                await client.put_settings({k: defaults[k] for k in settings_values})
                await product.restart(None)
        elif kind in ("tuning", "long tuning"):
            client = await product.restart(values)
            try:
                variants[name] = await product_outcomes(client, chats, suffix=suffix, budget=budget,
                                                        details=details[name], long_input=kind == "long tuning")
            finally:
                await product.restart(None)
        elif kind == "query":
            variants[name] = await product_outcomes(product.client, chats, suffix=suffix, budget=budget,
                                                    details=details[name], long_input=True)
        else:
            await product.client.put_settings(values)
            try:
                variants[name] = await product_outcomes(product.client, chats, suffix=suffix, budget=budget,
                                                        details=details[name])
            finally:
                await product.client.put_settings({k: defaults[k] for k in values})


class Product:
    """The server under test, restartable with read-path constants overridden (STBME_RECALL_TUNING)."""

    def __init__(self, data_dir: Path, settings: dict, session):
        self.data_dir, self.settings, self.session = data_dir, settings, session
        self.server = Server(data_dir, settings, data_dir / "eval-server.log")
        self.cpu_before = 0.0
        self.client: Client | None = None

    async def start(self) -> Client:
        await self.server.wait_ready(self.session)
        self.client = Client(self.session, self.server.url)
        return self.client

    async def restart(self, tuning: dict | None) -> Client:
        self.cpu_before += self.server.cpu_seconds()
        self.server.stop()
        env = {"STBME_RECALL_TUNING": json.dumps(tuning)} if tuning else None
        self.server = Server(self.data_dir, self.settings, self.data_dir / "eval-server.log", env=env)
        return await self.start()

    def cpu_seconds(self) -> float:
        return self.cpu_before + self.server.cpu_seconds()


async def run_product(args: dict, chats: list[dict], timings: dict) -> tuple[dict, dict, dict]:
    """The product's passes: defaults, each stage off in turn, and each read stage off on top of
    dna.signals false (with directives first in every recall, most read stages change nothing)."""
    data_dir = args["data_dir"] or Path(tempfile.mkdtemp(prefix="stbme-eval-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    user_settings = {"llm.mode": "none", **STILL_DNA, **args["settings"]}
    variants: dict[str, list] = {}
    on_no_directives: dict[str, list] = {}
    details: dict = {}
    product = None
    try:
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            product = Product(data_dir, user_settings, session)
            client = await product.start()
            touched = {k for kind, values in READ_ABLATIONS.values() if kind in ("settings", "both")
                       for k in (values if kind == "settings" else values[0])} - set(user_settings)
            schema = (await client.call("GET", product.server.url + "/v1/settings/schema"))["settings"]
            defaults = {s["name"]: s["default"] for s in schema if s["name"] in touched}
            await client.put_settings(defaults)  # a kept data dir may hold an aborted ablation
            budget = (await client.settings())["recall.budget_tokens"]
            started = time.monotonic()
            log(f"product: ingesting {len(chats)} chats into {data_dir}")
            await ingest(client, chats)
            timings["product ingest"] = time.monotonic() - started
            timings["server CPU for ingest"] = product.cpu_seconds()
            started = time.monotonic()
            details[PRODUCT] = {}
            variants[PRODUCT] = await product_outcomes(client, chats, suffix="", budget=budget,
                                                       details=details[PRODUCT])
            timings["product recall"] = time.monotonic() - started
            if args["sides"]:
                started = time.monotonic()
                await read_ablations(product, chats, suffix="", budget=budget, defaults=defaults, label="",
                                     variants=variants, details=details, names=SINGLE_SIDES)
                timings["single sides"] = time.monotonic() - started
            if args["ablations"]:
                started = time.monotonic()
                rest = [n for n in READ_ABLATIONS if not (args["sides"] and n in SINGLE_SIDES)]
                await read_ablations(product, args["ablation_chats"], suffix="", budget=budget, defaults=defaults,
                                     label="", variants=variants, details=details, only=args["only"], names=rest)
                timings["read ablations"] = time.monotonic() - started
            if args["ablations"] and args["write_ablations"]:
                client = product.client
                for name, values in WRITE_ABLATIONS.items():
                    log(f"ablation: {name} (ingest again with a per-chat override)")
                    await ingest(client, chats, write_suffix(values), values)
                    details[name] = {}
                    variants[name] = await product_outcomes(client, chats, suffix=write_suffix(values),
                                                            budget=budget, details=details[name])
                on_no_directives[NO_DIRECTIVES] = variants[NO_DIRECTIVES]
                await read_ablations(product, chats, suffix=write_suffix(WRITE_ABLATIONS[NO_DIRECTIVES]),
                                     budget=budget, defaults=defaults, label=" on dna.signals false",
                                     variants=on_no_directives, details=details.setdefault("on no directives", {}),
                                     only=args["only"])
                timings["ablations"] = time.monotonic() - started
    finally:
        if product is not None:
            timings["server CPU"] = product.cpu_seconds()
            product.server.stop()
        if not args["data_dir"] and not args["keep"]:
            shutil.rmtree(data_dir, ignore_errors=True)
        elif args["keep"]:
            log(f"product data kept in {data_dir}")
    return variants, on_no_directives, details


def examples(chats: list[dict], product: list, bm25: list, details: dict, n: int) -> str:
    """Questions plain BM25 answers in its top 5 and the product misses in its top 10, one per language
    and category in turn."""
    by_id = {q["id"]: (chat, q) for chat in chats for q in chat["questions"]}
    lexical = {o.qid: o for o in bm25}
    misses: dict[tuple[str, str], list] = {}
    for o in product:
        base = lexical[o.qid]
        if metrics.recall_at(o.evidence, o.ranked, 10) == 0 and metrics.recall_at(base.evidence, base.ranked, 5) > 0:
            misses.setdefault((o.lang, o.category), []).append((o, base))
    picked = []
    while len(picked) < n and any(misses.values()):
        for group in misses.values():
            if group and len(picked) < n:
                picked.append(group.pop(0))
    lines = []
    for o, base in picked:
        chat, q = by_id[o.qid]
        ev = chat["messages"][q["evidence"][0]]["text"].replace("\n", " ")
        lines.append(f"{q['id']} [{q['category']}] {q['query']!r} -> {q['answer']!r}")
        lines.append(f"   evidence #{q['evidence']}: BM25 rank {metrics.first_hit_rank(o.evidence, base.ranked)},"
                     f" product rank {metrics.first_hit_rank(o.evidence, o.ranked)}; {ev[:200]!r}")
        for m in details.get(o.qid, {}).get("ranking", [])[:5]:
            parts = {k: round(v, 2) for k, v in (m["parts"] or {}).items()}
            lines.append(f"   - {m['type']:<10} {m['seq']} {m['label'][:70]!r} {parts}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--set", "set_path", type=click.Path(exists=True, path_type=Path), default=evalset.DEFAULT_PATH,
              show_default=True, help="The evaluation set (make_eval_set.py writes it).")
@click.option("--public", "public", multiple=True, type=click.Choice(public_sets.SETS),
              help="A public development set of real conversations instead of the generated set (repeatable).")
@click.option("--split", type=click.Choice(("tune", "held", "both")), default="both", show_default=True,
              help="With --public: the part tuned on, the held-out part, or both.")
@click.option("--quick", is_flag=True, help="One chat per language (development).")
@click.option("--chat", "chat_ids", multiple=True, help="Only these chats (repeatable).")
@click.option("--setting", "settings", type=(str, str), multiple=True,
              help="Product setting for the whole run, VALUE as JSON (repeatable), as for `stbme serve`.")
@click.option("--no-ablations", is_flag=True, help="Skip the ablation passes.")
@click.option("--variant", "variants_opt", type=(str, str), multiple=True,
              help="One more read ablation: NAME and the recall/tuning.py constants it sets, as JSON (repeatable; "
                   "runs even with --only, not with --no-ablations; a NAME that starts with 'long input' asks as that "
                   "ablation does).")
@click.option("--no-sides", is_flag=True,
              help="Skip the product's keyword-only and vector-only passes (run on every chat otherwise).")
@click.option("--only", "only", multiple=True, help="Only the ablations whose name contains this (repeatable).")
@click.option("--no-vectors", is_flag=True, help="Skip the e5 baseline and the fusion (no model work here).")
@click.option("--no-bare-vectors", is_flag=True,
              help="Skip the model over bare text (the speaker-attributed one reuses the product's vectors).")
@click.option("--ablation-split", type=click.Choice(("tune", "held", "both")), default="tune", show_default=True,
              help="With --public: the part the ablations run on.")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
              help="Keep the product's data here; a re-run with the same chats skips the ingest.")
@click.option("--keep", is_flag=True, help="Keep the temporary data dir.")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DIR,
              show_default=True, help="Where the baselines' vectors are cached.")
@click.option("--examples", "n_examples", default=10, show_default=True,
              help="Print this many questions BM25 answers and the product misses.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Write every per-question result here.")
def main(set_path, public, split, quick, chat_ids, settings, no_ablations, variants_opt, no_sides, only, no_vectors,
         no_bare_vectors, ablation_split, data_dir, keep, cache_dir, n_examples, json_path):
    """Evaluate recall of the product against baselines on the generated roleplay set or public sets."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` stops the server
    if variants_opt and no_ablations:
        raise click.UsageError("--variant runs with the ablation passes: drop --no-ablations (--only NONE runs "
                               "the variants alone)")
    for name, raw in variants_opt:
        try:   # a name that starts with "long input" asks as that ablation does
            READ_ABLATIONS[name] = ("long tuning" if name.startswith("long input") else "tuning", json.loads(raw))
        except ValueError as exc:
            raise click.BadParameter(f"{name}: {exc}", param_hint="--variant") from None
    only = (*only, *(name for name, _ in variants_opt)) if only else only
    started = time.monotonic()
    categories = evalset.CATEGORIES
    if public:
        try:
            chats = [c for name in public for c in public_sets.load(name)]
        except public_sets.MissingSource as exc:
            raise click.ClickException(str(exc)) from None
        chats = [c for c in chats if split == "both" or c["split"] == split]
        categories = tuple(dict.fromkeys(c for name in public for c in public_sets.CATEGORIES[name]))
        set_path = Path("+".join(public))
    else:
        chats = evalset.load(set_path)["chats"]
    if chat_ids:
        chats = [c for c in chats if c["chat_id"] in chat_ids]
    elif quick:
        chats = [next(c for c in chats if c["lang"] == lang) for lang in ("en", "zh")]
    if not chats:
        raise click.ClickException("no chats selected")
    log(f"{len(chats)} chats, {sum(len(c['questions']) for c in chats)} questions")
    timings: dict[str, float] = {}
    # A write-path ablation ingests every chat again: on the public sets (no directives to switch off) it is left out.
    args = {"data_dir": data_dir, "keep": keep, "settings": parse_settings(settings), "ablations": not no_ablations,
            "sides": not no_sides,
            "write_ablations": not public, "only": only,
            "ablation_chats": [c for c in chats if not public or ablation_split == "both" or c["split"] == ablation_split]}
    variants, on_no_directives, details = asyncio.run(run_product(args, chats, timings))
    t = time.monotonic()
    cache = None if no_vectors else EmbeddingCache(cache_dir)
    if cache is not None and data_dir is not None:
        log(f"baselines: {cache.seed_from_product(data_dir / 'stbme.sqlite3')} vectors the product stored can be reused")
    baselines = baseline_outcomes(chats, cache, vector_forms=("speaker",) if no_bare_vectors else ("bare", "speaker"))
    long_baselines = {}   # the long-input passes against the baselines asked the same long inputs
    if any(name.startswith("long input") for name in variants):
        asked_long = baseline_outcomes(as_long_inputs(args["ablation_chats"]), cache, forms=("speaker",),
                                       vector_forms=("speaker",))
        long_baselines = {f"long input: {name}": outcomes for name, outcomes in asked_long.items()}
    timings["baselines"] = time.monotonic() - t
    systems = {PRODUCT: variants[PRODUCT], **({"prod. signals off": variants[NO_DIRECTIVES]}
                                              if NO_DIRECTIVES in variants else {}), **baselines}
    click.echo(f"\nRecall on {set_path.name} ({len(chats)} chats), product settings:"
               f" {args['settings'] or 'defaults'} (llm.mode none)\n")
    click.echo(metrics.main_table(systems, categories, PRODUCT))
    click.echo("\nR@10 by group (product variants and baselines):\n")
    click.echo(metrics.r10_table({**systems, **{k: v for k, v in variants.items() if k != PRODUCT}, **long_baselines},
                                 categories))
    fusions = {name: outs for name, outs in baselines.items() if name.startswith("RRF ")}
    sides = {name: variants[name] for name in SINGLE_SIDES if name in variants}
    if fusions and len(sides) == len(SINGLE_SIDES):
        click.echo(f"\nThe bar, R@10 per group: the product against each fusion + {metrics.BAR_MARGIN:.2f} and each of its"
                   f" own sides; the margin's interval from {metrics.RESAMPLES} resamples of the group's questions (the"
                   " same draw for every system), and the share of them in which the product reaches the bar:\n")
        click.echo(metrics.bar_table(metrics.bar_cells(variants[PRODUCT], fusions, sides, categories)))
        if any("-" in o.lang for o in variants[PRODUCT]):   # a public set's halves: each set whole as well
            whole = metrics.whole_sets
            click.echo("\nThe same bar, each set whole (its tuned-on and held-out halves together):\n")
            click.echo(metrics.bar_table(metrics.bar_cells(
                whole(variants[PRODUCT]), {n: whole(o) for n, o in fusions.items()},
                {n: whole(o) for n, o in sides.items()}, categories)))
    top40 = metrics.score(variants[PRODUCT]).recall
    in40 = sum(metrics.recall_at(o.evidence, o.ranked, 40) for o in variants[PRODUCT]) / len(variants[PRODUCT])
    click.echo(f"\nproduct: evidence in its first 40 memories (R@40) {in40:.3f}; R@20 {top40[20]:.3f}")
    if len(variants) > 1:
        click.echo("\nAblation (the product with one stage off; same questions):\n")
        click.echo(metrics.ablation_table({**variants, **baselines, **long_baselines}))
        click.echo("\nNo setting to ablate: " + "; ".join(NOT_ABLATABLE))
    if len(on_no_directives) > 1:
        click.echo("\nAblation on top of dna.signals false (the chats ingested without directives; each read"
                   " stage off in turn):\n")
        click.echo(metrics.ablation_table({**on_no_directives, **baselines}))
    if n_examples and "BM25 bare" in baselines:
        for name in (PRODUCT, NO_DIRECTIVES):
            if name in variants:
                click.echo(f"\nBM25 top 5 has the evidence, {name!r} top 10 does not (its first 5 memories shown):")
                click.echo(examples(chats, variants[name], baselines["BM25 bare"], details[name], n_examples))
    if json_path:
        out = {name: [vars(o) for o in outs] for name, outs in {**variants, **baselines, **long_baselines}.items()}
        out.update({f"{name} | on dna.signals false": [vars(o) for o in outs]
                    for name, outs in on_no_directives.items() if name != NO_DIRECTIVES})
        json_path.write_text(json.dumps({"results": out, "details": details}, ensure_ascii=False))
    timings["total"] = time.monotonic() - started
    timings["this process CPU"] = resource.getrusage(resource.RUSAGE_SELF).ru_utime + \
        resource.getrusage(resource.RUSAGE_SELF).ru_stime
    click.echo("\ntime (wall, and CPU where it says so; the machine is shared, so wall time depends on the"
               " load): " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()))


if __name__ == "__main__":
    main()
