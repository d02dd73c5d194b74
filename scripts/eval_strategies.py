#!/usr/bin/env python
"""How directive weights move under each DNA evolution strategy over a long chat (issue 22 item 6).

One generated 1,000-message roleplay (scripts/evalkit/chatgen.py: evening sessions on 32 of 42 story days,
SillyTavern send_dates, its own 16 OOC instructions, OOC chatter and in-character look-alikes) with three
instructions added to the user's messages:
  R  one OOC line repeated in 68 user messages all through the chat (issue 21's case);
  E  one emphasised instruction ("always ... remember that"), said once in the first session;
  W  one instruction said once in each session of the first week, then never again;
and O, the chat's first own OOC instruction (said once, in the first days).

The chat is played as SillyTavern plays it, through the real product in-process (the local embedding model,
SQLite, the pipeline, recall, the DNA scheduler): each message is synced and processed when it is sent,
recall runs before every reply (and reinforces what it injects, as the interceptor's call does), and the DNA
scheduler ticks at every message (decay at most daily, reflection every 30 minutes or after 20 new
memories). The one thing simulated is the clock: `time.time` follows the messages' send_dates (it advances
in real time between them), so 42 days of play take minutes.

The vectors are the bundled model's (`LocalEmbedder`), computed once and kept in `.eval-cache/` (git-ignored):
a first pass ingests the chat in bulk to fill the cache, so the four runs (and a rerun) embed little. The
runs' vectors are the model's own either way; only their cost is saved.

The first week is played under the default strategy (balanced) in every run, so every strategy starts from
the same memories; from day 7 each run switches the chat to its strategy (`dna.evolution_strategy`).
Printed: per strategy, at the end of each week, the weight of R, E, W and O ("-" not made, "x" archived,
"*" pinned), the directives made, active and archived; then what moved the weights (repeats, directive
accesses, reflection draws, decay passes).

    .venv/bin/python scripts/eval_strategies.py            # 4 runs of 5 minutes on a busy 2-core machine, once
                                                           # the cache is filled (the first time: 30 more)
    .venv/bin/python scripts/eval_strategies.py --strategies balanced,cleanup
"""

from __future__ import annotations

import time as _time

# The simulated clock goes in before the product is imported, so every `time.time` the product holds
# (module calls and dataclass defaults alike) reads it.
_real_monotonic = _time.monotonic


class SimClock:
    """Story time that moves forward in real time between jumps (so waits with a deadline still end)."""

    def __init__(self) -> None:
        self.base, self.at = _time.time(), _real_monotonic()

    def time(self) -> float:
        return self.base + (_real_monotonic() - self.at)

    def start_at(self, moment: float) -> None:
        """Where the story's clock starts (in the past: the chat's first send_date)."""
        self.base, self.at = moment, _real_monotonic()

    def jump_to(self, moment: float) -> None:
        """On to the next message's send_date; never back (processing may have run past it)."""
        if moment > self.time():
            self.base, self.at = moment, _real_monotonic()


CLOCK = SimClock()
_time.time = CLOCK.time

import argparse  # noqa: E402
import asyncio  # noqa: E402
import hashlib  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import orjson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evalkit.chatgen import generate_chat  # noqa: E402
from evalkit.sidecar import anchor_indexes, chains  # noqa: E402
from evalkit.worlds_en import WORLDS_EN  # noqa: E402
from stbme.api.bodies import parse_recall, parse_sync_request  # noqa: E402
from stbme.dna.story_clock import send_date_seconds  # noqa: E402
from stbme.embed.base import Embedder  # noqa: E402
from stbme.embed.local import LocalEmbedder  # noqa: E402
from stbme.services import Services  # noqa: E402

DAY = 86400.0
STRATEGIES = ("balanced", "aggressive", "conservative", "cleanup")
SWITCH_DAY = 7
REPEATED = "(OOC: keep your replies under three paragraphs, please.)"
EMPHASISED = "(OOC: always write Elena's thoughts in italics, remember that.)"
FIRST_WEEK = "(OOC: please open each new scene with the weather.)"
RECENT = 4          # the extension's recall: the last four messages as context
CHAT_ID = "strategy-run"
CACHE = Path(__file__).resolve().parent.parent / ".eval-cache" / "strategy-vectors.sqlite"


class CachedEmbedder(Embedder):
    """The bundled model's vectors, each text embedded once (kept on disk between runs)."""

    def __init__(self, inner: Embedder, path: Path = CACHE):
        self.inner, self.id, self.dim = inner, inner.id, inner.dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT, kind TEXT, hash TEXT, vec BLOB,"
                        " PRIMARY KEY (model, kind, hash))")
        self.computed = 0

    def _lookup(self, kind: str, texts: list[str]) -> dict[str, np.ndarray]:
        keys = list(dict.fromkeys(hashlib.sha256(t.encode()).hexdigest() for t in texts))
        found = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            found.update({h: np.frombuffer(v, dtype=np.float32) for h, v in self.db.execute(
                f"SELECT hash, vec FROM vectors WHERE model = ? AND kind = ? AND hash IN ({','.join('?' * len(part))})",
                [self.id, kind, *part])})
        return found

    def _store(self, kind: str, texts: list[str], vectors: np.ndarray) -> None:
        self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?, ?)", [
            (self.id, kind, hashlib.sha256(t.encode()).hexdigest(), np.asarray(v, np.float32).tobytes())
            for t, v in zip(texts, vectors)])
        self.db.commit()
        self.computed += len(texts)

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        found = self._lookup("passage", texts)
        missing = list(dict.fromkeys(t for t in texts if hashlib.sha256(t.encode()).hexdigest() not in found))
        if missing:
            vectors = await self.inner.embed_passages(missing)
            self._store("passage", missing, vectors)
            found.update(self._lookup("passage", missing))
        return np.vstack([found[hashlib.sha256(t.encode()).hexdigest()] for t in texts]) if texts else \
            np.zeros((0, self.dim), np.float32)

    async def embed_query(self, text: str) -> np.ndarray:
        found = self._lookup("query", [text])
        if not found:
            vector = await self.inner.embed_query(text)
            self._store("query", [text], [vector])
            return np.asarray(vector, np.float32)
        return next(iter(found.values()))

    async def close(self) -> None:
        """Each run's sidecar closes its embedder; this one outlives them (main closes the model)."""


def inner(ooc: str) -> str:
    """The directive's content: the OOC line without its markers."""
    return ooc[len("(OOC: "):-1]


def build_chat(seed: int) -> tuple[list[dict], dict[str, object]]:
    """The generated chat with R, E and W added; which messages carry what."""
    chat = generate_chat(WORLDS_EN[0], seed=seed, min_messages=1000)
    messages = [dict(m) for m in chat["messages"]]
    labels = chat["labels"]
    planted = {i for i, _ in labels["ooc_instructions"]} | set(labels["ooc_chatter"]) | set(labels["lookalikes"])
    free = [i for i, m in enumerate(messages) if m["role"] == "user" and i not in planted]
    start = send_date_seconds(messages[0]["send_date"])
    day_of = {i: int((send_date_seconds(m["send_date"]) - start) // DAY) for i, m in enumerate(messages)}
    rng = random.Random(seed)
    repeated = sorted(rng.sample(free[2:], 68))
    first_session = [i for i in free if day_of[i] == 0 and i not in repeated]
    emphasised = first_session[1]
    week_days = sorted({day_of[i] for i in free if day_of[i] < SWITCH_DAY})
    week = [next(i for i in free if day_of[i] == d and i not in repeated and i != emphasised) for d in week_days]
    for i in repeated:
        messages[i]["text"] += "\n" + REPEATED
    messages[emphasised]["text"] += "\n" + EMPHASISED
    for i in week:
        messages[i]["text"] += "\n" + FIRST_WEEK
    once = min(i for i, _ in labels["ooc_instructions"])
    return messages, {"R": repeated, "E": [emphasised], "W": week, "O": [once], "day_of": day_of, "start": start}


class Player:
    """Plays the chat into one sidecar as SillyTavern would: sync per message, recall before each reply."""

    def __init__(self, sc: Services, messages: list[dict]):
        self.sc, self.messages = sc, messages
        self.chain = chains(messages)

    async def sync(self, upto: int, start: int) -> None:
        """Messages 0..upto, the new ones from `start`, with the extension's chain anchors."""
        n = upto + 1
        while True:
            body = {"length": n, "messages": [{"index": i, "swipe_id": 0, **self.messages[i]} for i in range(start, n)],
                    "anchors": [{"index": i, "chain": self.chain[i]} for i in anchor_indexes(n, start)]}
            req = parse_sync_request(body, max_messages=self.sc.settings["server.max_sync_messages"],
                                     max_chars=self.sc.settings["server.max_message_chars"])
            result = await self.sc.sync.sync(CHAT_ID, req)
            if result["status"] == "synced":
                return
            start = result["need_from"]

    async def recall(self, index: int) -> None:
        recent = [{"role": m["role"], "name": m["name"], "text": m["text"]}
                  for m in self.messages[max(0, index - RECENT):index]]
        body = {"query": self.messages[index]["text"], "recent": recent}
        await self.sc.recall.recall(CHAT_ID, parse_recall(body, max_chars=self.sc.settings["server.max_message_chars"]))


async def directive_rows(sc: Services) -> list[dict]:
    rows = await sc.store.read(lambda conn: conn.execute(
        "SELECT id, type, fields, weight, archived, pinned, seq_from, access_count FROM nodes"
        " WHERE chat_id = ? AND source = 'dna'", (CHAT_ID,)).fetchall())
    return [{**dict(r), "content": orjson.loads(r["fields"]).get("content", "")} for r in rows]


def cell(row: dict | None) -> str:
    if row is None:
        return "-"
    if row["archived"]:
        return "x"
    return f"{row['weight']:.2f}" + ("*" if row["pinned"] else "")


async def fill_cache(messages: list[dict], data_dir: Path, embedder: CachedEmbedder) -> None:
    """Ingest the whole chat at once (the product embeds in large batches then), so the runs find the
    vectors of their memories in the cache."""
    sc = Services.open(data_dir, embedder=embedder)
    try:
        await Player(sc, messages).sync(len(messages) - 1, 0)
        await sc.processor.process_chat(CHAT_ID)
    finally:
        await sc.close()


async def run(strategy: str, messages: list[dict], marks: dict, data_dir: Path, embedder: Embedder) -> dict:
    CLOCK.start_at(send_date_seconds(messages[0]["send_date"]) - 60)   # every run plays the same days
    sc = Services.open(data_dir, embedder=embedder)
    try:
        await sc.dna_assets.install_builtins()
        await sc.settings_service.update_chat(CHAT_ID, {"dna.evolution_strategy": "balanced"})
        player = Player(sc, messages)
        tracked = {"R": inner(REPEATED), "E": inner(EMPHASISED), "W": inner(FIRST_WEEK)}
        o_index = marks["O"][0]
        day_of = marks["day_of"]
        last_day = day_of[len(messages) - 1]
        samples, switched, synced = [], False, 0
        checkpoints = sorted({*range(0, last_day + 1, 7), last_day})
        recalls = 0
        for i, m in enumerate(messages):
            CLOCK.jump_to(send_date_seconds(m["send_date"]))
            if not switched and day_of[i] >= SWITCH_DAY:
                await sc.settings_service.update_chat(CHAT_ID, {"dna.evolution_strategy": strategy})
                switched = True
            await player.sync(i, synced)
            synced = i + 1
            await sc.processor.process_chat(CHAT_ID)
            if m["role"] == "user":
                await player.recall(i)   # the interceptor asks before the reply is generated
                recalls += 1
            await sc.dna_scheduler.run_due(CLOCK.time())
            session_end = i + 1 == len(messages) or day_of[i + 1] != day_of[i]
            if session_end:
                print(f"\r  {strategy}: day {day_of[i]}/{last_day}, message {i + 1}/{len(messages)}  ", end="",
                      file=sys.stderr, flush=True)
            if session_end and checkpoints and day_of[i] >= checkpoints[0]:
                while checkpoints and day_of[i] >= checkpoints[0]:
                    checkpoints.pop(0)
                rows = await directive_rows(sc)
                by_content = {r["content"]: r for r in rows}
                once = next((r for r in rows if r["seq_from"] == o_index), None)
                samples.append({"day": day_of[i], **{k: cell(by_content.get(v)) for k, v in tracked.items()},
                                "O": cell(once), "made": len(rows), "active": sum(not r["archived"] for r in rows),
                                "archived": sum(bool(r["archived"]) for r in rows)})
                print(f"\n  {strategy}: day {day_of[i]}: {samples[-1]}", file=sys.stderr, flush=True)
        kinds = await sc.store.read(lambda conn: conn.execute(
            "SELECT kind, data FROM events WHERE chat_id = ?", (CHAT_ID,)).fetchall())
        ids = {r["id"] for r in await directive_rows(sc)}
        moved = Counter()
        for row in kinds:
            data = orjson.loads(row["data"])
            if row["kind"] == "reinforce" and data.get("node_id") in ids:
                moved["repeats"] += 1
            elif row["kind"] == "reflect":
                moved["reflection draws (any memory)"] += data.get("reinforced", 0)
            elif row["kind"] == "decay":
                moved["decay passes"] += 1
            elif row["kind"] == "archive" and data.get("node_id") in ids:
                moved["directives archived"] += 1
        injected = await sc.store.read(lambda conn: conn.execute(
            "SELECT coalesce(sum(access_count), 0) FROM nodes WHERE chat_id = ? AND source = 'dna'",
            (CHAT_ID,)).fetchone()[0])
        moved["directive accesses (access_count)"] = injected
        moved["recalls"] = recalls
        return {"samples": samples, "moved": dict(moved)}
    finally:
        await sc.close()


def table(results: dict[str, dict]) -> str:
    head = f"{'strategy':<13}{'day':>4}  {'R 68x':>7}{'E once!':>9}{'W wk 1':>8}{'O once':>8}{'made':>6}{'active':>7}{'arch.':>6}"
    out = [head, "-" * len(head)]
    for name, result in results.items():
        for s in result["samples"]:
            out.append(f"{name:<13}{s['day']:>4}  {s['R']:>7}{s['E']:>9}{s['W']:>8}{s['O']:>8}{s['made']:>6}"
                       f"{s['active']:>7}{s['archived']:>6}")
        out.append("")
    out.append("R: one OOC line in 68 user messages; E: an emphasised instruction said once on day 0; W: said once in "
               "each session of the first week; O: the chat's first own instruction, said once. Weights 0-1; "
               "- not made, x archived (forgotten), * pinned. Days 0-6 under balanced in every run, then the strategy.")
    out.append("")
    for name, result in results.items():
        out.append(f"{name:<13}" + ", ".join(f"{k} {v}" for k, v in result["moved"].items()))
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--messages", type=int, default=None, help="Play only the first N messages (a quick look).")
    args = parser.parse_args()
    messages, marks = build_chat(args.seed)
    messages = messages[:args.messages] if args.messages else messages
    CLOCK.start_at(send_date_seconds(messages[0]["send_date"]) - 60)
    print(f"chat: {len(messages)} messages over {marks['day_of'][len(messages) - 1] + 1} story days; "
          f"R in {len(marks['R'])} messages, W in {len(marks['W'])}", file=sys.stderr)
    local = LocalEmbedder()
    embedder = CachedEmbedder(local)
    results = {}
    try:
        with tempfile.TemporaryDirectory(prefix="stbme-strategies-") as tmp:
            started = _real_monotonic()
            await fill_cache(messages, Path(tmp) / "cache-fill", embedder)
            print(f"  vectors: {embedder.computed} computed, {_real_monotonic() - started:.0f} s", file=sys.stderr)
            for name in args.strategies.split(","):
                started, computed = _real_monotonic(), embedder.computed
                results[name] = await run(name, messages, marks, Path(tmp) / name, embedder)
                print(f"  {name}: {_real_monotonic() - started:.0f} s ({embedder.computed - computed} new vectors)",
                      file=sys.stderr)
    finally:
        await local.close()
    print(table(results))


if __name__ == "__main__":
    asyncio.run(main())
