"""Story time for the DNA windows: when a message was said, from SillyTavern's `send_date`.

The plan's windows (a duplicate within an hour, a repair loop within 7 days) are measured between the
messages that carried the signals, not by the clock at ingest: a month-old chat brought in at once must
not look like one hour of instructions. A message without a readable `send_date` falls back to the wall
clock (its directive's `created_at`).

`send_date_seconds` reads the forms ST has written, with the time of day (the window is an hour):
"June 19, 2023 2:20pm" (`getMessageTimeStamp()`), "2024-07-12@01h31m37s" and "2023-7-20 @14h 5m 9s
123ms" (humanized), epoch milliseconds or seconds, ISO 8601. Times without a zone are the machine's
local time, as ST shows them; only differences between them matter here.
"""

from __future__ import annotations

import datetime as dt
import re

_MONTHS = {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                           "nov", "dec"))}
_ST_STAMP = re.compile(r"^(?P<mon>[A-Za-z]{3,9})\.?\s+(?P<d>\d{1,2}),?\s+(?P<y>\d{4})"
                       r"(?:\s+(?P<h>\d{1,2}):(?P<min>\d{2})(?::(?P<s>\d{2}))?\s*(?P<ap>[ap]m)?)?", re.I)
_HUMANIZED = re.compile(r"^(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})\s*@\s*(?P<h>\d{1,2})h\s*(?P<min>\d{1,2})m"
                        r"\s*(?P<s>\d{1,2})s")
_NUMBER = re.compile(r"\d{1,16}(?:\.\d+)?")
_EPOCH_MS_FROM = 1e11  # below: seconds


def send_date_seconds(value: object) -> float | None:
    """Seconds since the epoch of a SillyTavern `send_date`; None when it cannot be read."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if not text or len(text) > 100:
        return None
    try:
        if _NUMBER.fullmatch(text):
            number = float(text)  # at most 16 digits: finite
            return (number / 1000 if number >= _EPOCH_MS_FROM else number) if number > 0 else None
        if m := _HUMANIZED.match(text):
            moment = dt.datetime(int(m["y"]), int(m["m"]), int(m["d"]), int(m["h"]), int(m["min"]), int(m["s"]))
        elif (m := _ST_STAMP.match(text)) and m["mon"][:3].lower() in _MONTHS:
            hour = int(m["h"] or 0)
            if m["ap"]:
                hour = hour % 12 + (12 if m["ap"].lower() == "pm" else 0)
            moment = dt.datetime(int(m["y"]), _MONTHS[m["mon"][:3].lower()], int(m["d"]), hour, int(m["min"] or 0),
                                 int(m["s"] or 0))
        else:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        return moment.timestamp()
    except (ValueError, OverflowError, OSError):
        return None
