"""SillyTavern's `send_date` format and the date phrases questions use (English and Chinese).

ST stamps each message with `getMessageTimeStamp()` (public/scripts/RossAscends-mods.js):
`month + ' ' + day + ', ' + year + ' ' + hours + ':' + minutes + meridiem`, 12-hour clock without a
leading zero, minutes zero-padded, lowercase am/pm: "March 3, 2026 8:15pm".
"""

from __future__ import annotations

import datetime as dt
import re

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
WEEKDAYS_EN = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
WEEKDAYS_ZH = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")
NUMBERS_EN = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
              "twelve", "thirteen", "fourteen")
NUMBERS_ZH = ("零", "一", "两", "三", "四", "五", "六", "七", "八", "九", "十", "十一", "十二", "十三", "十四")
_ST_DATE = re.compile(r"^(?P<month>[A-Z][a-z]+) (?P<day>\d{1,2}), (?P<year>\d{4}) (?P<hour>\d{1,2}):(?P<minute>\d{2})"
                      r"(?P<meridiem>am|pm)$")


def format_send_date(moment: dt.datetime) -> str:
    """`moment` as ST writes `send_date`."""
    hours = moment.hour
    meridiem = "pm" if hours >= 12 else "am"
    hours = hours - 12 if hours >= 12 else hours
    hours = 12 if hours == 0 else hours
    return f"{MONTHS[moment.month - 1]} {moment.day}, {moment.year} {hours}:{moment.minute:02d}{meridiem}"


def parse_send_date(text: str) -> dt.datetime:
    """The inverse of `format_send_date`; ValueError on anything else."""
    match = _ST_DATE.match(text)
    if not match or match["month"] not in MONTHS:
        raise ValueError(f"not a SillyTavern send_date: {text!r}")
    hour = int(match["hour"]) % 12 + (12 if match["meridiem"] == "pm" else 0)
    return dt.datetime(int(match["year"]), MONTHS.index(match["month"]) + 1, int(match["day"]), hour,
                       int(match["minute"]))


def ordinal(day: int) -> str:
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def absolute_phrase(day: dt.date, lang: str, style: int) -> str:
    """A calendar date as a person would type it in a question ("on March 4", "on the 4th", "3月4日")."""
    if lang == "zh":
        return f"{day.month}月{day.day}日" if style % 2 == 0 else f"{day.month}月{day.day}号"
    return f"on {MONTHS[day.month - 1]} {day.day}" if style % 2 == 0 else f"on the {ordinal(day.day)}"


def relative_phrase(day: dt.date, today: dt.date, lang: str, style: int) -> str | None:
    """`day` relative to `today` ("yesterday", "four days ago", "last Thursday", "上周四"), None when no
    natural phrase fits (more than two weeks back)."""
    gap = (today - day).days
    if gap <= 0 or gap > 14:
        return None
    if lang == "zh":
        if gap == 1:
            return "昨天"
        if gap == 2:
            return "前天"
        if style % 2 == 0 or gap > 6:
            return f"{NUMBERS_ZH[gap]}天前"
        this_week = day.isocalendar()[1] == today.isocalendar()[1]
        return ("这" if this_week else "上") + WEEKDAYS_ZH[day.weekday()]
    if gap == 1:
        return "yesterday"
    if style % 2 == 0 or gap > 6:
        return f"{NUMBERS_EN[gap]} days ago"
    return f"last {WEEKDAYS_EN[day.weekday()]}" if gap > 1 else "yesterday"
