#!/usr/bin/env python
"""Generate the bilingual recall evaluation set (scripts/data/recall_eval.json.gz).

Six long roleplay chats (three English, three Chinese), each over 1,000 messages with SillyTavern
send_dates, planted facts with distractors that share their names and words, dated events, corrections,
multi-hop chains, two-turn exchanges and out-of-character lines; plus the questions asked at the end of
each chat and the message indexes that answer them. Deterministic: the same seed writes the same bytes.

    .venv/bin/python scripts/make_eval_set.py                 # write the committed file
    .venv/bin/python scripts/make_eval_set.py --check         # fail if the committed file is stale
    .venv/bin/python scripts/make_eval_set.py --sample 3      # print a few messages and questions
"""

from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evalkit import evalset  # noqa: E402


def summary(data: dict) -> str:
    """Sizes per chat and category, and mean tokens per message (cl100k, the product's tokenizer)."""
    from stbme.tokens import count_tokens

    lines = [f"{'chat':<22} {'msgs':>5} {'days':>5} {'tok/msg':>8} {'user':>5} {'asst':>5}  questions"]
    for chat in data["chats"]:
        tokens = collections.defaultdict(list)
        for m in chat["messages"]:
            tokens[m["role"]].append(count_tokens(m["text"]))
        every = tokens["user"] + tokens["assistant"]
        days = len({m["send_date"].rsplit(" ", 1)[0] for m in chat["messages"]})
        cats = collections.Counter(q["category"] for q in chat["questions"])
        lines.append(f"{chat['chat_id']:<22} {len(chat['messages']):>5} {days:>5} {statistics.mean(every):>8.0f}"
                     f" {statistics.mean(tokens['user']):>5.0f} {statistics.mean(tokens['assistant']):>5.0f}  "
                     + " ".join(f"{c}={cats[c]}" for c in evalset.CATEGORIES))
    return "\n".join(lines)


def sample(data: dict, n: int) -> str:
    out = []
    for chat in data["chats"]:
        out.append(f"== {chat['chat_id']} ==")
        for q in chat["questions"][::max(1, len(chat["questions"]) // n)][:n]:
            out.append(f"Q [{q['category']}/{q['kind']}] {q['query']}  -> {q['answer']}")
            for i in q["evidence"]:
                m = chat["messages"][i]
                out.append(f"   #{i} {m['role']} {m['send_date']}: {m['text'][:300]!r}")
    return "\n".join(out)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--seed", default=7, show_default=True, help="Random seed of the set.")
@click.option("--min-messages", default=1000, show_default=True, help="Messages per chat, at least.")
@click.option("--out", type=click.Path(path_type=Path), default=evalset.DEFAULT_PATH, show_default=True,
              help="Where to write the set.")
@click.option("--check", is_flag=True, help="Do not write; exit 1 if --out differs from a fresh generation.")
@click.option("--sample", "n_sample", type=int, default=0, help="Print this many questions per chat with evidence.")
def main(seed: int, min_messages: int, out: Path, check: bool, n_sample: int) -> None:
    """Generate the recall evaluation set."""
    data = evalset.generate(seed, min_messages)
    problems = evalset.check(data)
    if problems:
        raise click.ClickException("generated set is unsound:\n" + "\n".join(problems[:20]))
    blob = evalset.to_bytes(data)
    if check:
        if not out.exists() or out.read_bytes() != blob:
            raise click.ClickException(f"{out} is not what seed {seed} generates; run scripts/make_eval_set.py")
        click.echo(f"{out} is current", err=True)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(blob)
        click.echo(f"wrote {out} ({len(blob) / 1e6:.1f} MB)", err=True)
    click.echo(summary(data))
    if n_sample:
        click.echo(sample(data, n_sample))


if __name__ == "__main__":
    main()
