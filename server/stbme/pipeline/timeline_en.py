"""English time expressions: the days a text names, resolved against the day it was said.

Relative ("yesterday", "the day before yesterday", "last night", "two days ago", "last Thursday", "last
week", "a month ago"), absolute ("March 4", "4th of March", "the 14th") and, for questions, months and their
parts ("in March", "early March", "the end of March", "the first week of 2024") and anchored ones ("the day
after the Lantern Festival"). A date without a year is its nearest past occurrence. "last Thursday" is the
latest Thursday strictly before the day (a week back when said on a Thursday); "next Thursday" the first one
after it; "last week" the previous Monday-to-Sunday week.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Iterator

from .timeline_days import (
    AnchorFound, DateSpan, Found, day_span, few_days_ago, last_weekday, month_part, month_span,
    nearest_past_day_of_month, nearest_past_month, nearest_past_month_day, next_weekday, nth_week, safe_date,
    same_day_earlier_months, week_earlier, week_of, weekday_in_week, weekend_of, weeks_ago, year_span, has_any, scan,
)

MONTHS = {name: i + 1 for i, name in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"))}
MONTHS.update({"jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
               "oct": 10, "nov": 11, "dec": 12})
WEEKDAYS = {name: i for i, name in enumerate(
    ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"))}
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = {"twenty": 20, "thirty": 30}
_MONTH = r"(?P<mon>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_WEEKDAY = r"(?P<wd>" + "|".join(WEEKDAYS) + r")"
_NUM = (r"(?P<n>\d{1,3}|a\s+couple(?:\s+of)?|an?|(?:twenty|thirty)(?:[\s-](?:" + "|".join(_UNITS[1:10])
        + r"))?|" + "|".join(sorted(_UNITS[1:], key=len, reverse=True)) + r")")
_PART = r"(?:\s+(?:morning|afternoon|evening|night))?"
# Words that, right after "the 14th", show it is not a day of the month ("the 14th floor" is).
_DAY_FOLLOWERS = frozenset("""
of and or at in on when was is were we i you he she they it that this so but to before after around about
then last next morning afternoon evening night
""".split())
# Months that are also common words: written lower-case, they count only after "on" or before an ordinal.
_AMBIGUOUS_MONTHS = {"may", "march", "jan", "mar", "sep", "dec", "oct"}
_NOT_A_DAY_AFTER = re.compile(r"\s*(?::\d|\d|%|\.\d|(?:miles?|km|hours?|minutes?|mins?|times|people|men|steps"
                              r"|feet|yards|metres|meters|years?)\b)", re.I)
# A clause word ends an anchor phrase: "the day after the fair | what did we buy".
_ANCHOR_STOP = frozenset("""
what when where who whom why how which whose did do does was were is are had has have happen happened
and but so then i we you he she they me us him her them again can could would will
""".split())
_ANCHOR_LEAD = frozenset("the a an our my your his her their that this".split())
_NOT_ANCHORS = frozenset("tomorrow yesterday last next that it this then now today tonight".split())


def number(text: str) -> int | None:
    """A small count written in digits or words ("3", "three", "a", "a couple of", "twenty-one")."""
    words = re.sub(r"[\s-]+", " ", text.lower()).strip()
    if words.isdigit():
        return int(words)
    if words in ("a", "an"):
        return 1
    if words.startswith("a couple"):
        return 2
    parts = words.split()
    if parts[0] in _TENS:
        return _TENS[parts[0]] + (_UNITS.index(parts[1]) if len(parts) > 1 else 0)
    return _UNITS.index(words) if words in _UNITS else None


def _rx(pattern: str) -> re.Pattern:
    return re.compile(r"(?<![\w-])" + pattern + r"(?![\w-])", re.I)


_FIXED = [(_rx(p), offset, hints) for p, offset, hints in (  # hints: words the text must hold (lower-case)
    (r"the\s+day\s+before\s+yesterday", -2, ("yesterday",)), (r"the\s+night\s+before\s+last", -2, ("last",)),
    (r"the\s+day\s+after\s+tomorrow", 2, ("tomorrow",)), (r"yesterday" + _PART, -1, ("yesterday",)),
    (r"last\s+night", -1, ("night",)),
    (r"(?:earlier\s+)?today|tonight|this\s+(?:morning|afternoon|evening)", 0, ("today", "tonight", "this")),
    (r"tomorrow" + _PART, 1, ("tomorrow",)),
)]
_MONTH_HINTS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DIGIT = re.compile(r"\d")
_DAYS_AGO = _rx(_NUM + r"\s+days?\s+(?:ago|back)")
_IN_DAYS = _rx(r"(?:in\s+" + _NUM + r"\s+days?(?:\s+time)?|" + _NUM.replace("<n>", "<n2>")
               + r"\s+days?\s+from\s+(?:now|today))")
_FEW_DAYS_AGO = _rx(r"(?:a\s+few|several)\s+days\s+(?:ago|back)")
_WEEKS_AGO = _rx(_NUM + r"\s+weeks?\s+ago")
_MONTHS_AGO = _rx(_NUM + r"\s+months?\s+ago")
_WEEK = _rx(r"(?P<which>last|this|next)\s+week|the\s+week\s+before\s+last")
_WEEKEND = _rx(r"(?P<which>last|this|next)\s+weekend")
_MONTH_REL = _rx(r"(?P<which>last|this|next)\s+month")
_NAMED_WEEKDAY = _rx(r"(?P<which>last|this|next|on)\s+" + _WEEKDAY + _PART)
_BARE_WEEKDAY = _rx(_WEEKDAY + r"\s+(?:morning|afternoon|evening|night)")
_MONTH_FIRST = _rx(r"(?P<on>on\s+)?" + _MONTH + r"\s+(?:the\s+)?(?P<d>\d{1,2})(?P<ord>st|nd|rd|th)?"
                   r"(?:,?\s+(?P<y>\d{4}))?")
_DAY_FIRST = _rx(r"(?P<on>on\s+)?(?:the\s+)?(?P<d>\d{1,2})(?P<ord>st|nd|rd|th)?\s+(?P<of>of\s+)?" + _MONTH
                 + r"(?:,?\s+(?P<y>\d{4}))?")
_THE_NTH = _rx(r"(?:on\s+)?the\s+(?P<d>\d{1,2})(?:st|nd|rd|th)")
_IN_MONTH = _rx(r"in\s+" + _MONTH + r"(?:\s+(?P<y>\d{4}))?")
_EDGE_PART = {"beginning": "early", "start": "early", "middle": "mid", "end": "late"}
_MONTH_PART = _rx(r"(?:(?:in|during|by|at)\s+)?(?:the\s+)?(?:(?P<part>early|mid|late)[\s-]+"
                  r"|(?P<edge>beginning|start|middle|end)\s+of\s+)" + _MONTH + r"(?:,?\s+(?P<y>\d{4}))?")
_NTHS = {"first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3, "last": -1}
_NTH_WEEK = _rx(r"(?:(?:in|during)\s+)?the\s+(?P<nth>" + "|".join(_NTHS) + r")\s+week\s+of\s+(?:the\s+year\s+)?(?:"
                + _MONTH + r"(?:,?\s+(?P<y>\d{4}))?|(?P<year>\d{4}))")
_ANCHOR = _rx(r"(?:on\s+)?(?:the\s+(?P<part>day|morning|afternoon|evening|night)\s+(?P<dir>after|before)"
              r"|" + _NUM + r"\s+days?\s+(?P<dir2>after|before)"
              r"|the\s+(?:very\s+)?(?:same\s+)?(?:day|night|evening|morning)\s+of)"
              r"\s+(?P<rest>[^.?!,;:\n\"“”*()\[\]]+)")


def _month_ok(m: re.Match) -> bool:
    """A lower-case "may 4" is not a date; "on may 4" and "may 4th" are."""
    word = m["mon"]
    if word.lower() not in _AMBIGUOUS_MONTHS or word[0].isupper():
        return True
    return bool(m.groupdict().get("on") or m.groupdict().get("ord") or m.groupdict().get("of"))


def _absolute(ref: dt.date, month: int, day: int, year: str | None) -> DateSpan | None:
    found = safe_date(int(year), month, day) if year else nearest_past_month_day(ref, month, day)
    return DateSpan.day(found) if found else None


def _spans(text: str, ref: dt.date, query: bool) -> Iterator[tuple]:
    """(match, span or a false value, kind[, alternatives]) for every expression."""
    low = text.lower()
    for rx, offset, hints in _FIXED:
        for m in scan(rx, text, has_any(low, hints)):
            yield m, day_span(ref, offset), "relative"
    ago = has_any(low, ("ago", "back"))
    for m in scan(_DAYS_AGO, text, ago):
        n = number(m["n"])
        yield m, n is not None and day_span(ref, -n), "relative"
    for m in scan(_IN_DAYS, text, " day" in low):
        n = number(m["n"] or m["n2"])
        yield m, n is not None and day_span(ref, n), "relative"
    for m in scan(_FEW_DAYS_AGO, text, ago):
        yield m, few_days_ago(ref), "relative"
    for m in scan(_WEEKS_AGO, text, ago):
        n = number(m["n"])
        yield m, n is not None and weeks_ago(ref, n), "relative"
    for m in scan(_MONTHS_AGO, text, ago):
        n = number(m["n"])
        yield m, n is not None and n <= 24 and month_span(ref.year, ref.month - n), "relative"
    for m in scan(_WEEK, text, "week" in low):
        which = m["which"].lower() if m["which"] else "before last"
        yield m, week_of(ref, {"last": -1, "this": 0, "next": 1, "before last": -2}[which]), "relative"
    for m in scan(_WEEKEND, text, "weekend" in low):
        yield m, weekend_of(ref, {"last": -1, "this": 0, "next": 1}[m["which"].lower()]), "relative"
    for m in scan(_MONTH_REL, text, "month" in low):
        yield m, month_span(ref.year, ref.month + {"last": -1, "this": 0, "next": 1}[m["which"].lower()]), \
            "relative"
    weekday = has_any(low, tuple(WEEKDAYS))
    for m in scan(_NAMED_WEEKDAY, text, weekday):
        which, wd = m["which"].lower(), WEEKDAYS[m["wd"].lower()]
        if which == "on" and not query:
            continue  # "on Friday" in a message is as often a plan as a memory
        day = (next_weekday(ref, wd) if which == "next" else weekday_in_week(ref, wd) if which == "this"
               else last_weekday(ref, wd))
        yield m, day and DateSpan.day(day), "relative", week_earlier(day) if day and which in ("last", "on") else ()
    if query:
        for m in scan(_BARE_WEEKDAY, text, weekday):
            day = last_weekday(ref, WEEKDAYS[m["wd"].lower()])
            yield m, day and DateSpan.day(day), "relative", week_earlier(day) if day else ()
    names_month = has_any(low, _MONTH_HINTS)
    digit = _DIGIT.search(text) is not None
    for rx in (_MONTH_FIRST, _DAY_FIRST):
        for m in scan(rx, text, names_month and digit):
            if not _month_ok(m) or (not m["y"] and _NOT_A_DAY_AFTER.match(text, m.end())):
                continue
            yield m, _absolute(ref, MONTHS[m["mon"].lower()], int(m["d"]), m["y"]), "absolute"
    for m in scan(_THE_NTH, text, digit):
        after = re.match(r"\s*([A-Za-z]+)", text[m.end():])
        if after and after.group(1).lower() not in _DAY_FOLLOWERS:
            continue
        day = nearest_past_day_of_month(ref, int(m["d"]))
        yield m, day and DateSpan.day(day), "absolute", same_day_earlier_months(day) if day else ()
    if not query:
        return   # below, what in a message is as often ahead as behind: "closing in June", "in early May"
    for m in scan(_IN_MONTH, text, names_month):
        if _month_ok(m):
            month = MONTHS[m["mon"].lower()]
            yield m, month_span(int(m["y"]) if m["y"] else nearest_past_month(ref, month), month), "absolute"
    for m in scan(_MONTH_PART, text, names_month):
        month = MONTHS[m["mon"].lower()]
        year = int(m["y"]) if m["y"] else nearest_past_month(ref, month)
        yield m, month_part(year, month, m["part"].lower() if m["part"] else _EDGE_PART[m["edge"].lower()]), "absolute"
    for m in scan(_NTH_WEEK, text, "week" in low):
        if m["year"]:
            period = year_span(int(m["year"]))
        else:
            month = MONTHS[m["mon"].lower()]
            period = month_span(int(m["y"]) if m["y"] else nearest_past_month(ref, month), month)
        yield m, period and nth_week(period, _NTHS[m["nth"].lower()]), "absolute"


def find_dates(text: str, ref: dt.date, *, query: bool = False) -> list[Found]:
    """Every English time expression in `text` with the days it names, said on `ref`. `query=True`
    also reads bare weekdays ("on Thursday") and months ("in March"), which in a message are as often
    plans."""
    return [Found(m.start(), m.end(), span, kind, *alts) for m, span, kind, *alts in _spans(text, ref, query)
            if span]


def find_anchors(text: str) -> list[AnchorFound]:
    """Days named after an event: "the day after X" (+1), "the night before X" (-1), "three days after X"
    (+3), "the day of X" (0). X runs to the end of its clause, at most eight words."""
    out = []
    low = text.lower()
    for m in scan(_ANCHOR, text, has_any(low, ("after", "before", " of "))):
        words = list(re.finditer(r"[\w'’-]+", m["rest"]))
        kept = []
        for w in words[:8]:
            if w.group(0).lower() in _ANCHOR_STOP:
                break
            kept.append(w)
        while kept and kept[0].group(0).lower() in _ANCHOR_LEAD:
            kept.pop(0)
        if not kept or kept[0].group(0).lower() in _NOT_ANCHORS or kept[0].group(0)[0].isdigit():
            continue   # "the night of 10.01.2024" names a date, not an event
        base = m.start("rest")
        phrase_start, phrase_end = base + kept[0].start(), base + kept[-1].end()
        direction = (m["dir"] or m["dir2"] or "").lower()
        n = number(m["n"]) if m["n"] else (1 if direction else 0)
        if n is None:
            continue
        out.append(AnchorFound(m.start(), phrase_end, text[phrase_start:phrase_end], phrase_start, phrase_end,
                               -n if direction == "before" else n))
    return out

