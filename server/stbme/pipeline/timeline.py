"""Story time: the day each message was said, the days its text refers to, and the days a question asks
about, in English and Chinese.

- `parse_send_date`: SillyTavern's `send_date`, in every form it has written, as a calendar day.
- `mentioned_dates`: the days a text names ("yesterday", "last Thursday", "3月4日"), resolved against the
  day it was said. A span of days is a `DateSpan(start, end)`, both ends included; a day is a span of one.
- `story_time_of`: what the write path stores on a memory: `{"date": "2026-03-04", "mentions":
  [["2026-03-03", "2026-03-03"]]}` (mentions other than the day itself; the key is left out when none).
- `query_time`: the days a question asks about, absolute, relative to now, or anchored to an event
  found by a callback ("the day after the Lantern Festival"), and the question without that expression.
- `format_story_date` / `format_story_span`: short, unambiguous labels for the memory block.

The readers of each language live in `timeline_en` and `timeline_zh`; calendar arithmetic in
`timeline_days`. Everything here is a pure function of its arguments (the heuristic stage must replay
exactly), except that a numeric timestamp is read in the machine's time zone, as SillyTavern shows it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from typing import Callable

from . import timeline_en, timeline_zh
from .timeline_days import (MAX_SPAN_DAYS, AnchorFound, DateSpan, Found, days_from, last_weekday, next_weekday,
                            pick_spans, safe_date)

__all__ = ["DateSpan", "QueryTime", "parse_send_date", "mentioned_dates", "story_time_of", "query_time",
           "format_story_date", "format_story_span"]

# getMessageTimeStamp() (RossAscends-mods.js): "June 19, 2023 2:20pm"; also "Jun 19 2023" inside a Date string.
_ST_STAMP = re.compile(r"(?<![A-Za-z])(?P<mon>[A-Za-z]{3,9})\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})"
                       r"(?!\d)")
# humanizedDateTime() before Aug 2023 and the server's humanizedISO8601DateTime(): "2023-7-20 @14h 5m 9s 123ms";
# humanizedDateTime() since: "2024-07-12@01h31m37s". Local times, whatever ST's own parser assumes.
_HUMANIZED = re.compile(r"(?<!\d)(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\s*@\s*\d{1,2}h")
_ZH_STAMP = re.compile(r"(?<!\d)(?P<y>\d{4})年(?P<m>\d{1,2})月(?P<d>\d{1,2})[日号]")
_NUMERIC = re.compile(r"\d{1,16}(?:\.\d+)?")
_ISO_IN_TEXT = re.compile(r"(?<![\d.])(?P<y>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})(?![\d.])")
_EPOCH_MS_FROM = 1e11  # below: seconds (1973-03-03 in ms, a year past 5000 in seconds)
_MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def parse_send_date(value: object) -> dt.date | None:
    """The calendar day of a SillyTavern `send_date`; None for anything unreadable (never raises).

    Forms read: "June 19, 2023 2:20pm" (ST since mid-2023), "2023-7-20 @14h 5m 9s 123ms" and
    "2024-07-12@01h31m37s" (humanized, older ST and chats the server made), epoch milliseconds as a number
    or digits (`Date.now()`: TavernAI, old ST, cloned messages; plain seconds are read too), ISO 8601
    ("2023-06-19T14:20:00.000Z", "2023-06-19") and "2023年6月19日". Epoch numbers and ISO times with a zone
    are read in the local time zone, as ST displays them; the others as written.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _from_epoch(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > 200:
        return None
    if _NUMERIC.fullmatch(text):
        return _from_epoch(float(text))
    m = _HUMANIZED.search(text) or _ZH_STAMP.search(text)
    if m:
        return safe_date(int(m["y"]), int(m["m"]), int(m["d"]))
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        moment = None
    if moment is not None:
        return (moment.astimezone() if moment.tzinfo else moment).date()
    m = _ST_STAMP.search(text)
    if m and m["mon"].lower() in timeline_en.MONTHS:
        return safe_date(int(m["y"]), timeline_en.MONTHS[m["mon"].lower()], int(m["d"]))
    return None


def _from_epoch(number: float) -> dt.date | None:
    if not math.isfinite(number) or number <= 0:
        return None
    seconds = number / 1000 if number >= _EPOCH_MS_FROM else number
    try:
        return dt.datetime.fromtimestamp(seconds).date()
    except (OverflowError, OSError, ValueError):
        return None


_DOTTED_DATE = re.compile(r"(?<![\d.])(?P<d>\d{1,2})\.(?P<m>\d{1,2})\.(?P<y>\d{4})(?![\d.])")
# A date that bounds what is asked ("before December 23rd", "12月23日之前") does not name the day asked about.
_BOUND_BEFORE_DATE = re.compile(r"(?<![\w-])(?:before|after|since|until|till|prior\s+to)\s*$", re.I)
_BOUND_AFTER_DATE = re.compile(r"\s*(?:之前|以前|之后|以后|以来)")


def _bounds(query: str, found: Found) -> bool:
    return bool(_BOUND_BEFORE_DATE.search(query[:found.start]) or _BOUND_AFTER_DATE.match(query, found.end))


# "on Friday before 10.01.2024", "the Monday after March 3rd": a weekday beside a date names a day by that date.
_WEEKDAY_BESIDE_DATE = re.compile(r"(?<![\w-])(?P<wd>" + "|".join(timeline_en.WEEKDAYS) + r")\s+(?P<side>before|after)\s*$",
                                  re.I)


def _weekdays_beside_dates(query: str, found: list[Found]) -> list[Found]:
    out = []
    for date in found:
        m = _WEEKDAY_BESIDE_DATE.search(query[:date.start]) if date.span.days == 1 else None
        if m:
            weekday = timeline_en.WEEKDAYS[m["wd"].lower()]
            step = last_weekday if m["side"].lower() == "before" else next_weekday
            day = step(date.span.start, weekday)
            if day is not None:
                out.append(Found(m.start(), date.end, DateSpan.day(day), "absolute"))
    return out


def _anchors_on_dates(anchors: list[AnchorFound], found: list[Found]) -> list[Found]:
    """An anchor whose event is a date ("the day after March 4", "two days before the end of May") names that
    date moved by its offset: no need to look the event up in the chat."""
    out = []
    for anchor in anchors:
        # The date is the phrase, maybe with the "the" the phrase left out ("the first week of May").
        date = next((f for f in found if f.kind == "absolute" and anchor.start <= f.start <= anchor.phrase_start
                     and anchor.phrase_start < f.end <= anchor.phrase_end + 1), None)
        if date is not None:
            # "the day after the first week of May" (the 1st to the 7th): the 8th.
            day = date.span.end if anchor.offset > 0 else date.span.start
            span = date.span if anchor.offset == 0 else DateSpan.day(days_from(day, anchor.offset) or day)
            out.append(Found(anchor.start, max(anchor.end, date.end), span, "absolute"))
    return out


def _readers(lang: str | None) -> tuple:
    """The language readers for `lang` ("en", "zh"; anything else: both)."""
    code = (lang or "").lower()
    if code.startswith("en"):
        return (timeline_en,)
    if code.startswith("zh"):
        return (timeline_zh,)
    return timeline_en, timeline_zh


def _iso_dates(text: str) -> list[Found]:
    """Numeric dates: ISO 2024-01-10, and dotted 10.01.2024, which is day first wherever it is written
    (slashed dates are left alone: 01/10/2024 is January in the US and October elsewhere)."""
    out = []
    for rx in (_ISO_IN_TEXT, _DOTTED_DATE):
        for m in rx.finditer(text):
            day = safe_date(int(m["y"]), int(m["m"]), int(m["d"]))
            if day:
                out.append(Found(m.start(), m.end(), DateSpan.day(day), "absolute"))
    return out


def _find(text: str, ref: dt.date, lang: str | None, *, query: bool) -> list[Found]:
    found = _iso_dates(text)
    for reader in _readers(lang):
        found += reader.find_dates(text, ref, query=query)
    return pick_spans([f for f in found if f.span.days <= MAX_SPAN_DAYS])


def mentioned_dates(text: str, said_on: dt.date, lang: str | None = None) -> list[DateSpan]:
    """The days `text` refers to, resolved against `said_on`, in order of first mention, each once.
    `lang` ("en", "zh") picks one language's expressions; None reads both."""
    if not isinstance(text, str) or not isinstance(said_on, dt.date) or not text:
        return []
    seen: dict[DateSpan, None] = {}
    for found in _find(text, said_on, lang, query=False):
        seen.setdefault(found.span)
    return list(seen)


def story_time_of(send_date: object, text: str, lang: str | None = None) -> dict | None:
    """A memory's story time: the day its message was said and the other days its text mentions; None when
    the send date is unreadable (nothing to resolve "yesterday" against)."""
    said = parse_send_date(send_date)
    if said is None:
        return None
    own = DateSpan.day(said)
    mentions = [span.to_json() for span in mentioned_dates(text, said, lang) if span != own]
    return {"date": said.isoformat(), **({"mentions": mentions} if mentions else {})}


@dataclasses.dataclass(frozen=True)
class QueryTime:
    """The time a question asks about.

    `span` holds the days asked about; it is None only for an anchor that `find_anchor` did not find.
    `start`/`end` are the character offsets of the whole time expression in the query and `topic` the
    query without it, to search by topic words. For a Chinese anchor only the relation (的第二天) is taken
    out of `topic`: the phrase before it may begin with a name ("萧寒中秋灯会的第二天").
    """

    kind: str                        # "absolute" | "relative" | "anchor"
    span: DateSpan | None
    expression: str
    start: int
    end: int
    topic: str
    anchor: str | None = None        # the event phrase ("Lantern Festival", "大风暴")
    offset: int = 0                  # days from the anchor's day (+1: the day after)
    anchor_day: dt.date | None = None
    # Other readings, less likely, best first: "the 14th" of the two months before, the Thursday a week
    # before "last Thursday". Worth a smaller boost, or a fallback when the span holds no memory.
    alternatives: tuple[DateSpan, ...] = ()


_RANK = {"absolute": 2, "relative": 1}


def query_time(query: str, now: dt.date, lang: str | None = None,
               find_anchor: Callable[[str], dt.date | None] | None = None) -> QueryTime | None:
    """What time `query` asks about, said on `now`; None when it names none.

    A calendar date or a day relative to now wins over an anchor; among several, an absolute date, then
    the last one ("How are you today? What happened six days ago?" asks about six days ago).
    `find_anchor(phrase)` gives the day of the event a phrase names (from the chat's memories), or None.
    """
    if not isinstance(query, str) or not isinstance(now, dt.date) or not query.strip():
        return None
    # "Where is the key today?", "你今天在哪": a question about the present names no day to search;
    # today's messages are the ones still in the prompt.
    every = _find(query, now, lang, query=True)
    anchors = [a for reader in _readers(lang) for a in reader.find_anchors(query)]
    dated = _anchors_on_dates(anchors, every)
    found = [f for f in every if f.span != DateSpan.day(now) and not _bounds(query, f)
             and not any(d.start <= f.start < d.end for d in dated)]
    found += _weekdays_beside_dates(query, every) + dated
    if found:
        best = max(found, key=lambda f: (_RANK[f.kind], f.start))
        return QueryTime(best.kind, best.span, query[best.start:best.end], best.start, best.end,
                         _without(query, best.start, best.end), alternatives=best.alternatives)
    if not anchors:
        return None
    anchor: AnchorFound = max(anchors, key=lambda a: a.start)
    day = find_anchor(anchor.phrase) if find_anchor else None
    target = None
    if isinstance(day, dt.date):
        try:
            target = day + dt.timedelta(days=anchor.offset)
        except OverflowError:
            target = None
    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in anchor.phrase)
    cut_from = anchor.phrase_end if cjk else anchor.start
    return QueryTime("anchor", DateSpan.day(target) if target else None, query[anchor.start:anchor.end],
                     anchor.start, anchor.end, _without(query, cut_from, anchor.end), anchor.phrase,
                     anchor.offset, day if target else None)


def _without(text: str, start: int, end: int) -> str:
    """`text` without [start, end): a space stays between two words, none before punctuation."""
    before, after = text[:start].rstrip(), text[end:].lstrip()
    joined = before + (" " if before and after and before[-1].isalnum() and after[0].isalnum()
                       and before[-1].isascii() and after[0].isascii() else "") + after
    return re.sub(r"\s+([,.?!;:])", r"\1", re.sub(r"\s{2,}", " ", joined)).strip()


def format_story_date(day: dt.date, lang: str | None, today: dt.date | None) -> str:
    """A short label for a memory's day: "Mar 4" / "3月4日", with the year when it is not `today`'s year
    (the chat's latest message): "Mar 4, 2025" / "2025年3月4日"."""
    with_year = today is None or day.year != today.year
    if (lang or "").lower().startswith("zh"):
        return f"{day.year}年{day.month}月{day.day}日" if with_year else f"{day.month}月{day.day}日"
    label = f"{_MONTH_ABBR[day.month - 1]} {day.day}"
    return f"{label}, {day.year}" if with_year else label


def format_story_span(span: DateSpan, lang: str | None, today: dt.date | None) -> str:
    """A short label for a span: "Mar 2–8", "Feb 27–Mar 5", "3月2日–8日"; one day as `format_story_date`."""
    if span.start == span.end:
        return format_story_date(span.start, lang, today)
    start = format_story_date(span.start, lang, today if span.end.year == span.start.year else None)
    zh = (lang or "").lower().startswith("zh")
    same_month = (span.start.year, span.start.month) == (span.end.year, span.end.month)
    if same_month:
        if zh:
            return f"{start}–{span.end.day}日"
        label = f"{_MONTH_ABBR[span.start.month - 1]} {span.start.day}–{span.end.day}"
        return label if today is not None and span.start.year == today.year else f"{label}, {span.start.year}"
    end = format_story_date(span.end, lang, today)
    return f"{start}–{end}"
