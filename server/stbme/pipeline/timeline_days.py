"""Calendar arithmetic for story time: day spans, weeks, months, and the nearest past occurrence of a date
written without its year or month. The English and Chinese expression readers (`timeline_en`,
`timeline_zh`) build on these; `timeline` is the API.

Weeks run Monday to Sunday (ISO), in both languages: "上周四" is the Thursday of the previous such week.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import re

# A span longer than this is too vague to place a memory ("last year"); readers do not produce one.
MAX_SPAN_DAYS = 31
_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclasses.dataclass(frozen=True, order=True)
class DateSpan:
    """Consecutive days, both ends included. A single day is `DateSpan(d, d)`; its JSON form is
    `["2026-03-04", "2026-03-04"]`."""

    start: dt.date
    end: dt.date

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"span ends before it starts: {self.start} > {self.end}")

    @classmethod
    def day(cls, day: dt.date) -> DateSpan:
        return cls(day, day)

    @classmethod
    def from_json(cls, value: object) -> DateSpan | None:
        """A span from its JSON form (two ISO days); None for anything else."""
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            return None
        days = [parse_iso_day(v) for v in value]
        if None in days or days[1] < days[0]:
            return None
        return cls(days[0], days[1])

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1

    def __contains__(self, day: object) -> bool:
        return isinstance(day, dt.date) and self.start <= day <= self.end

    def overlaps(self, other: DateSpan) -> bool:
        return self.start <= other.end and other.start <= self.end

    def shift(self, days: int) -> DateSpan:
        step = dt.timedelta(days=days)
        return DateSpan(self.start + step, self.end + step)

    def to_json(self) -> list[str]:
        return [self.start.isoformat(), self.end.isoformat()]


@dataclasses.dataclass(frozen=True)
class Found:
    """A time expression found in a text: where it is (character offsets) and the days it names."""

    start: int
    end: int
    span: DateSpan
    kind: str  # "absolute" | "relative"
    alternatives: tuple[DateSpan, ...] = ()  # other readings, less likely ("the 14th" of an earlier month)


def scan(rx: re.Pattern, text: str, worth_it: bool):
    """`rx.finditer(text)`, or nothing when a cheap test (a word the pattern needs) says it cannot match:
    most patterns start with a group, which the regex engine cannot skip ahead to."""
    return rx.finditer(text) if worth_it else ()


def has_any(text: str, words: tuple[str, ...]) -> bool:
    return any(w in text for w in words)


def parse_iso_day(value: object) -> dt.date | None:
    """A `YYYY-MM-DD` string as a date; None for anything else."""
    if not isinstance(value, str) or not _ISO_DAY.match(value):
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        return None


def days_from(day: dt.date, offset: int) -> dt.date | None:
    """`day` moved by `offset` days; None past the calendar's ends."""
    try:
        return day + dt.timedelta(days=offset)
    except OverflowError:
        return None


def safe_date(year: int, month: int, day: int) -> dt.date | None:
    try:
        return dt.date(year, month, day)
    except (ValueError, OverflowError):
        return None


def day_span(day: dt.date, offset: int) -> DateSpan | None:
    """The single day `offset` days from `day` ("two days ago": -2)."""
    found = days_from(day, offset)
    return DateSpan.day(found) if found else None


def few_days_ago(day: dt.date) -> DateSpan | None:
    """"a few days ago" / 前几天: two to five days back."""
    start, end = days_from(day, -5), days_from(day, -2)
    return DateSpan(start, end) if start and end else None


def weeks_ago(day: dt.date, weeks: int) -> DateSpan | None:
    """"two weeks ago" / 两周前: the day that many weeks back, give or take a day; None past a year."""
    middle = days_from(day, -7 * weeks) if 0 <= weeks <= 52 else None
    start, end = middle and days_from(middle, -1), middle and days_from(middle, 1)
    return DateSpan(start, end) if start and end else None


def weekend_of(day: dt.date, weeks: int = 0) -> DateSpan | None:
    """Saturday and Sunday of the week holding `day`, moved by `weeks`."""
    week = week_of(day, weeks)
    return week and DateSpan(week.end - dt.timedelta(days=1), week.end)


def week_of(day: dt.date, weeks: int = 0) -> DateSpan | None:
    """Monday to Sunday of the week holding `day`, moved by `weeks`."""
    monday = days_from(day, -day.weekday() + 7 * weeks)
    sunday = monday and days_from(monday, 6)
    return DateSpan(monday, sunday) if sunday else None


def weekday_in_week(day: dt.date, weekday: int, weeks: int = 0) -> dt.date | None:
    """The given weekday (0 = Monday) of the week holding `day`, moved by `weeks`."""
    week = week_of(day, weeks)
    return week and days_from(week.start, weekday)


def last_weekday(day: dt.date, weekday: int) -> dt.date | None:
    """The latest such weekday strictly before `day` (one to seven days back)."""
    back = (day.weekday() - weekday) % 7 or 7
    return days_from(day, -back)


def next_weekday(day: dt.date, weekday: int) -> dt.date | None:
    """The first such weekday strictly after `day` (one to seven days ahead)."""
    ahead = (weekday - day.weekday()) % 7 or 7
    return days_from(day, ahead)


def month_span(year: int, month: int) -> DateSpan | None:
    """The whole month; `month` may run past 1..12 (month 0 is the previous year's December)."""
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    first = safe_date(year, month, 1)
    if first is None:
        return None
    following = safe_date(year + month // 12, month % 12 + 1, 1)
    return DateSpan(first, following - dt.timedelta(days=1)) if following else None


# Thirds of a month: "early March" / 3月上旬 (the 1st to the 10th), "mid-March" / 中旬, "late March" / 下旬.
MONTH_PARTS = {"early": (1, 10), "mid": (11, 20), "late": (21, 31)}


def month_part(year: int, month: int, part: str) -> DateSpan | None:
    """A third of the month (MONTH_PARTS); "late" runs to the month's last day."""
    whole = month_span(year, month)
    if whole is None:
        return None
    first, last = MONTH_PARTS[part]
    return DateSpan(whole.start + dt.timedelta(days=first - 1),
                    min(whole.end, whole.start + dt.timedelta(days=last - 1)))


def nth_week(period: DateSpan, nth: int) -> DateSpan | None:
    """The `nth` seven days of a month or year counted from its first day ("the first week of June": the 1st
    to the 7th; nth 0 is the first); nth -1 is its last seven days."""
    if nth < 0:
        return DateSpan(period.end - dt.timedelta(days=6), period.end)
    start = period.start + dt.timedelta(days=7 * nth)
    return DateSpan(start, min(period.end, start + dt.timedelta(days=6))) if start <= period.end else None


def year_span(year: int) -> DateSpan | None:
    first, last = safe_date(year, 1, 1), safe_date(year, 12, 31)
    return DateSpan(first, last) if first and last else None


def nearest_past_month(ref: dt.date, month: int) -> int:
    """The year of the latest `month` that began on or before `ref` ("in March" asked in January: last year's)."""
    return ref.year - (month > ref.month)


def nearest_past_month_day(ref: dt.date, month: int, day: int) -> dt.date | None:
    """`month`/`day` in the latest year that puts it on or before `ref` (29 February: the latest leap year).
    None for a day the month never has."""
    if safe_date(2000, month, day) is None:  # 2000 is a leap year: any real month/day exists in it
        return None
    year = ref.year if (month, day) <= (ref.month, ref.day) else ref.year - 1
    for y in range(year, year - 8, -1):
        found = safe_date(y, month, day)
        if found is not None:
            return found
    return None


def nearest_past_day_of_month(ref: dt.date, day: int) -> dt.date | None:
    """Day `day` of the latest month that puts it on or before `ref`, skipping months too short for it
    ("the 31st" asked in April is 31 March)."""
    if not 1 <= day <= 31:
        return None
    month = ref.month if day <= ref.day else ref.month - 1
    for back in range(12):
        found = safe_date(ref.year + (month - back - 1) // 12, (month - back - 1) % 12 + 1, day)
        if found is not None:
            return found
    return None


def same_day_earlier_months(day: dt.date, count: int = 2) -> tuple[DateSpan, ...]:
    """The same day of the month in the `count` months before `day`'s that have it: the other readings of
    "the 14th" when the latest one is not meant."""
    out = []
    month = day.month
    for _ in range(12):
        if len(out) == count:
            break
        month -= 1
        found = safe_date(day.year + (month - 1) // 12, (month - 1) % 12 + 1, day.day)
        if found:
            out.append(DateSpan.day(found))
    return tuple(out)


def week_earlier(day: dt.date) -> tuple[DateSpan, ...]:
    """The day a week before: the other reading of "last Thursday" (the previous week's)."""
    found = days_from(day, -7)
    return (DateSpan.day(found),) if found else ()


def month_day(ref: dt.date, months: int, day: int) -> dt.date | None:
    """Day `day` of the month `months` away from `ref`'s ("上个月14号": months=-1)."""
    month = ref.month + months
    return safe_date(ref.year + (month - 1) // 12, (month - 1) % 12 + 1, day)


def pick_spans(found: list[Found]) -> list[Found]:
    """The longest of overlapping expressions wins ("the day before yesterday" over "yesterday"), then
    the earliest; the result is in text order."""
    starts: list[int] = []          # the chosen expressions, kept in text order (they never overlap)
    chosen: list[Found] = []
    for item in sorted(found, key=lambda f: (-(f.end - f.start), f.start)):
        i = bisect.bisect_left(starts, item.start)
        if (i < len(chosen) and chosen[i].start < item.end) or (i and chosen[i - 1].end > item.start):
            continue
        starts.insert(i, item.start)
        chosen.insert(i, item)
    return chosen


@dataclasses.dataclass(frozen=True)
class AnchorFound:
    """A day named by its distance from an event ("the day after the Lantern Festival"): the whole
    expression's offsets, the event phrase and its offsets, and the distance in days."""

    start: int
    end: int
    phrase: str
    phrase_start: int
    phrase_end: int
    offset: int
