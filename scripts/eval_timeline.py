"""Story time on the recall evaluation set: does a date question's resolved day hold its evidence?

For every question of category "date" (scripts/data/recall_eval.json.gz, made by make_eval_set.py):
- query: `query_time(question, the chat's question_send_date)` resolves a span that holds the day the
  evidence event happened (its message's day, or the day before when the message says "yesterday");
- stored: the evidence message's story time (`story_time_of(send_date, text)`: its day and the days it
  mentions) holds that day;
- both: the two meet, so a filter "memories of the asked day" keeps the evidence;
- day only: the same without mentions (the send day alone), what storing no mentions would give;
- msgs/span: how many of the chat's messages such a filter keeps, on average (the chat has 1,000+);
- and how many questions of the other categories (facts, multi-hop…) are read as naming a time.

Anchored questions ("the day after the Herring Fair") need the day of the event: `find_anchor` here is a
stand-in for the lead's search over memories: the day whose messages share the most of the phrase's words
(English) or character pairs (Chinese), weighted by rarity (a message counts when it holds at least half
of the phrase's weight; a day is worth the sum of its messages: an event is talked about on its day,
while a name in passing recurs on many days, once each).

"query+alt" also counts a question whose day is among the less likely readings (`alternatives`: "the
14th" of the two months before; the Thursday a week before "last Thursday").

    .venv/bin/python scripts/eval_timeline.py [--data scripts/data/recall_eval.json.gz] [--misses]
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from stbme.pipeline.timeline import DateSpan, parse_send_date, query_time, story_time_of  # noqa: E402

GROUPS = {"abs": "abs", "yest": "abs (said: yesterday)", "rel": "rel", "fest_a": "anchor", "fest_b": "anchor",
          "storm": "anchor"}
_STOP = set("the a an of to in on at and or is was we i you it my our".split())


def terms(text: str) -> list[str]:
    """English words (lower-case, no stopwords) and Chinese character pairs."""
    words = [w for w in re.findall(r"[a-z0-9']+", text.lower()) if w not in _STOP]
    cjk = re.findall(r"[\u4e00-\u9fff]+", text)
    return words + [run[i:i + 2] for run in cjk for i in range(max(1, len(run) - 1))]


class AnchorSearch:
    """Stand-in for the lead's find_anchor: the best message for a phrase, by rarity-weighted overlap."""

    def __init__(self, messages: list[dict], days: list):
        self.days = days
        self.sets = [set(terms(m["text"])) for m in messages]
        df = collections.Counter(t for s in self.sets for t in s)
        self.idf = {t: math.log((len(self.sets) + 1) / (n + 0.5)) for t, n in df.items()}

    def __call__(self, phrase: str):
        wanted = set(terms(phrase))
        total = sum(self.idf.get(t, 0.0) for t in wanted)
        if not wanted or total <= 0:
            return None
        by_day = collections.Counter()
        for day, s in zip(self.days, self.sets):
            score = sum(self.idf.get(t, 0.0) for t in wanted & s)
            if day is not None and score >= 0.5 * total:
                by_day[day] += score
        return max(by_day, key=lambda d: (by_day[d], d)) if by_day else None


def evaluate(data: dict, show_misses: bool) -> dict:
    rows = collections.defaultdict(lambda: collections.Counter())
    for chat in data["chats"]:
        lang, messages = chat["lang"], chat["messages"]
        now = parse_send_date(chat["question_send_date"])
        days = [parse_send_date(m["send_date"]) for m in messages]
        stored = []
        for m, day in zip(messages, days):
            st = story_time_of(m["send_date"], m["text"])
            spans = [DateSpan.day(day)] + [DateSpan.from_json(s) for s in (st or {}).get("mentions", [])]
            stored.append(spans)
        find_anchor = AnchorSearch(messages, days)
        for q in chat["questions"]:
            if q["category"] != "date":
                qt = query_time(q["query"], now, lang, find_anchor)
                rows[("undated", lang)]["n"] += 1
                rows[("undated", lang)]["dated"] += qt is not None
                if show_misses and qt is not None:
                    print(f"  undated question read as dated: {q['query']!r} -> {qt.expression!r}", file=sys.stderr)
                continue
            mode = q["kind"].split("/")[1]
            (e,) = q["evidence"]
            truth = days[e] if mode != "yest" else days[e].fromordinal(days[e].toordinal() - 1)
            qt = query_time(q["query"], now, lang, find_anchor)
            span = qt.span if qt else None
            hit_query = span is not None and truth in span
            hit_alt = hit_query or any(truth in a for a in (qt.alternatives if qt else ()))
            hit_stored = any(truth in s for s in stored[e])
            hit_both = span is not None and any(s.overlaps(span) for s in stored[e])
            day_only = span is not None and days[e] in span
            kept = sum(1 for spans in stored if span and any(s.overlaps(span) for s in spans)) if span else 0
            for key in ((lang, GROUPS[mode]), (lang, "all"), ("all", "all")):
                row = rows[key]
                row["n"] += 1
                row["query"] += hit_query
                row["alt"] += hit_alt
                row["stored"] += hit_stored
                row["both"] += hit_both
                row["day_only"] += day_only
                row["kept"] += kept
                row["spans"] += span is not None
            if show_misses and not (hit_query and hit_both):
                print(f"  miss {q['id']} [{mode}] {q['query']!r} -> {qt and qt.expression!r} "
                      f"{span and span.to_json()} truth={truth} stored={[s.to_json() for s in stored[e]]}",
                      file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).parent / "data" / "recall_eval.json.gz")
    parser.add_argument("--misses", action="store_true", help="print every question not fully resolved")
    args = parser.parse_args()
    data = json.loads(gzip.open(args.data).read())
    rows = evaluate(data, args.misses)
    print(f"{'lang':5} {'kind':22} {'n':>3} {'query':>6} {'query+alt':>9} {'stored':>6} {'both':>6} {'day only':>8}"
          f" {'msgs/span':>9}")
    for key in sorted((k for k in rows if k[0] != "undated"), key=lambda k: (k[0] == "all", k[0], k[1] == "all", k[1])):
        r = rows[key]
        n = r["n"]
        print(f"{key[0]:5} {key[1]:22} {n:3d} {r['query'] / n:6.2f} {r['alt'] / n:9.2f} {r['stored'] / n:6.2f}"
              f" {r['both'] / n:6.2f}"
              f" {r['day_only'] / n:8.2f} {r['kept'] / max(1, r['spans']):9.1f}")
    for key in sorted(k for k in rows if k[0] == "undated"):
        r = rows[key]
        print(f"{key[1]}: {r['dated']} of {r['n']} questions of other categories read as naming a time")


if __name__ == "__main__":
    main()
