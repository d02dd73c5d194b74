#!/usr/bin/env python
"""The bundled model's engines side by side, in one process: the numpy engine the product had before
(read from a git revision, `main` by default) and the ONNX Runtime engine, float32 and int8.

For each: query embedding time (recall-set questions, as the extension sends them, one at a time) and
passage throughput (recall-set messages clipped to 128 tokens, in the product's bulk slices of about
256 tokens, one thread), as wall time and as the calling thread's CPU time (which a busy machine
disturbs less), and the cosine of its vectors to the baseline's. Engines take turns round by round, so
load from other programs falls on all of them alike.

    .venv/bin/python scripts/bench_embed.py                 # baseline: the numpy engine on main
    .venv/bin/python scripts/bench_embed.py --baseline HEAD~3 --rounds 5
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "server"))

from stbme.embed import e5_file, e5_graph  # noqa: E402
from stbme.embed.e5_engine import E5Engine  # noqa: E402
from stbme.embed.local import BULK_SLICE_TOKENS, LocalEmbedder, _single_threaded_blas, model_file  # noqa: E402

BASELINE_FILES = ("server/stbme/embed/e5_file.py", "server/stbme/embed/e5_engine.py")


def baseline_engine(revision: str, path: Path):
    """The numpy engine as it was at `revision`, imported from a scratch package."""
    scratch = Path(tempfile.mkdtemp(prefix="stbme-bench-embed-"))
    package = scratch / "baseline_e5"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in BASELINE_FILES:
        source = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:{name}"], capture_output=True,
                                text=True, check=True).stdout
        (package / Path(name).name).write_text(source)
    sys.path.insert(0, str(scratch))
    module = importlib.import_module("baseline_e5.e5_engine")
    if not hasattr(module.E5Engine, "_forward") or not hasattr(module, "_gelu"):
        raise click.ClickException(f"{revision} has no numpy engine in {BASELINE_FILES[1]}")
    try:
        return module.E5Engine(path)
    except ModuleNotFoundError as exc:   # the numpy engine read its tokenizer with HF `tokenizers`
        raise click.ClickException(f"the baseline engine at {revision} needs the {exc.name!r} package, which "
                                   f"the sidecar no longer uses: .venv/bin/pip install {exc.name}") from exc


def recall_set_texts(n_passages: int, n_queries: int) -> tuple[list[str], list[str]]:
    data = json.loads(gzip.open(ROOT / "scripts" / "data" / "recall_eval.json.gz").read())
    messages, questions = [], []
    for chat in data["chats"]:
        messages += [m["text"] for m in chat["messages"]]
        questions += [q["query"] for q in chat["questions"]]
    rng = np.random.default_rng(5)
    return ([messages[i] for i in rng.permutation(len(messages))[:n_passages]],
            [questions[i] for i in rng.permutation(len(questions))[:n_queries]])


def timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


@click.command()
@click.option("--baseline", default="main", show_default=True, help="Git revision with the numpy engine.")
@click.option("--passages", "n_passages", default=192, show_default=True)
@click.option("--queries", "n_queries", default=40, show_default=True)
@click.option("--rounds", default=3, show_default=True, help="Rounds over the passages and queries.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
def main(baseline: str, n_passages: int, n_queries: int, rounds: int, json_path: Path | None) -> None:
    _single_threaded_blas()
    path = model_file()
    weights = e5_file.load(path)
    started = time.perf_counter()
    engines = {"numpy (baseline)": baseline_engine(baseline, path)}
    load_s = {"numpy (baseline)": time.perf_counter() - started}
    for kind in e5_graph.WEIGHT_KINDS:
        started = time.perf_counter()
        engines[f"onnxruntime {kind}"] = E5Engine(weights, e5_graph.build(weights, kind).SerializeToString(), kind)
        load_s[f"onnxruntime {kind}"] = time.perf_counter() - started
    passages, queries = recall_set_texts(n_passages, n_queries)
    reference = engines["numpy (baseline)"]
    product = LocalEmbedder()            # its clip (128 tokens) and bulk slices, on the reference engine
    product._model = reference
    passages = [product.clip(t) for t in passages]
    tokens = [reference.token_count(t) for t in passages]
    groups = product._slices(passages)
    print(f"{len(passages)} passages (mean {np.mean(tokens):.0f} tokens, {len(groups)} slices of ~"
          f"{BULK_SLICE_TOKENS} tokens), {len(queries)} queries (mean "
          f"{np.mean([reference.token_count(q, True) for q in queries]):.0f} tokens); load average "
          f"{os.getloadavg()[0]:.1f} at start; {rounds} rounds, engines in turn")

    vectors = {name: (np.vstack([e.embed(g) for g in groups]), np.vstack([e.embed([q], True) for q in queries]))
               for name, e in engines.items()}
    query_wall = {name: [] for name in engines}
    query_cpu = {name: [] for name in engines}
    passage_wall = {name: [] for name in engines}
    passage_cpu = {name: [] for name in engines}
    for _ in range(rounds):
        for q in queries:
            for name, e in engines.items():
                wall, cpu = timed(lambda: e.embed([q], True))
                query_wall[name].append(wall)
                query_cpu[name].append(cpu)
        for name, e in engines.items():
            wall, cpu = timed(lambda: [e.embed(g) for g in groups])
            passage_wall[name].append(wall)
            passage_cpu[name].append(cpu)

    base = "numpy (baseline)"
    rows = {}
    for name in engines:
        p_vec, q_vec = vectors[name]
        rows[name] = {
            "load_s": load_s[name],
            "query_p50_ms": pct(query_wall[name], 50) * 1e3, "query_p95_ms": pct(query_wall[name], 95) * 1e3,
            "query_cpu_p50_ms": pct(query_cpu[name], 50) * 1e3,
            "passages_per_s": len(passages) / min(passage_wall[name]),
            "passages_per_cpu_s": len(passages) / min(passage_cpu[name]),
            "cosine_min": float(min((p_vec * vectors[base][0]).sum(1).min(), (q_vec * vectors[base][1]).sum(1).min())),
            "cosine_mean": float(np.concatenate([(p_vec * vectors[base][0]).sum(1),
                                                 (q_vec * vectors[base][1]).sum(1)]).mean()),
        }
    print(f"\n{'engine':20} {'query p50':>10} {'p95':>8} {'cpu p50':>8} {'x base':>7} {'passages/s':>11} "
          f"{'/cpu-s':>7} {'x base':>7} {'cos min':>8} {'cos mean':>9} {'load':>6}")
    for name, r in rows.items():
        print(f"{name:20} {r['query_p50_ms']:8.1f}ms {r['query_p95_ms']:6.1f}ms {r['query_cpu_p50_ms']:6.1f}ms "
              f"{r['query_p50_ms'] / rows[base]['query_p50_ms']:7.2f} {r['passages_per_s']:11.1f} "
              f"{r['passages_per_cpu_s']:7.1f} {r['passages_per_s'] / rows[base]['passages_per_s']:7.2f} "
              f"{r['cosine_min']:8.5f} {r['cosine_mean']:9.6f} {r['load_s']:5.1f}s")
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end. 'x base': wall-time ratio to the numpy engine "
          f"(query p50: lower is better; passages/s: higher is better); cosines to the numpy engine's vectors.")
    if json_path:
        json_path.write_text(json.dumps({"rows": rows, "passages": len(passages), "queries": len(queries),
                                         "rounds": rounds, "baseline": baseline}, indent=1))


if __name__ == "__main__":
    main()
