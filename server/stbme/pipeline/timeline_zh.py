"""Chinese time expressions: the days a text names, resolved against the day it was said.

Relative (昨天, 前天, 大前天, 昨晚, 三天前, 前几天, 上周四, 上个星期, 下个月, 明天, 后天…), absolute (3月4日,
2026年3月4日, 去年12月31号, 上个月14号, 14号) and, for questions, months and their parts (3月份, 3月初, 去年12月
下旬, 上个月底, 1月第一周) and anchored ones (元宵节的第二天, 大风暴前一天, 中秋后三天, 元宵节那天). A date
without a year is its nearest past occurrence; 上周四 is the Thursday of the previous Monday-to-Sunday week.

Lunar days (初三, 正月十五) are not read: the stories' calendars rarely follow the real lunar one, and 初三
is as often the last year of junior school. Festivals are found as anchors, by what the chat says of them.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Iterator

from .timeline_days import (
    AnchorFound, DateSpan, Found, day_span, few_days_ago, last_weekday, month_day, month_part,
    month_span, nearest_past_day_of_month, nearest_past_month, nearest_past_month_day, nth_week, safe_date,
    same_day_earlier_months, week_of, weekday_in_week, weekend_of, weeks_ago, has_any, scan,
)

_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")} | {"〇": 0, "两": 2}
_NUM = r"(?:\d{1,3}|[零〇一二两三四五六七八九十]{1,4})"
_WEEKDAY = {c: i for i, c in enumerate("一二三四五六")} | {"日": 6, "天": 6, "七": 6} | {
    str(i + 1): i for i in range(7)}
_WEEK_WORD = r"(?:个)?(?:周|星期|礼拜)"
_WHICH = {"上上": -2, "上": -1, "这": 0, "本": 0, "下": 1, "下下": 2}
_YEAR_WORD = {"今年": 0, "去年": -1, "前年": -2, "明年": 1}
# Characters before 前天 / 明天 / 后天 that make them part of another word (目前天气, 说明天, 然后天亮).
_NOT_BEFORE_QIANTIAN = set("目以之此提先事空眼面跟门战生睡饭当年月向往早午")
_NOT_BEFORE_MINGTIAN = set("聪光证表声透分清英文发简鲜失照阐标查")
_NOT_BEFORE_HOUTIAN = set("以之然最午落先背身随前今往日其此过稍饭事而善退向殿皇王太")
# "3号楼" or "5号线" is not a day of the month.
_NOT_AFTER_HAO = set("楼房线车门球位桌院馆店床机码台窗柜场口包箱选技公病队座舱厅室仓街路巷弄字人员手种子样品货罐瓶盒袋")
_AFTER_RI = set("那当晚早上下中夜凌傍的这，。？！、,.?!;； ") | {""}
_PUNCT = "，。？！、；：“”‘’「」『』（）()*,.?!;:\"'…—~[]<>《》\n\t "
_ANCHOR_LEAD = ("问你个事", "突然想起来", "你还记得", "还记得", "记得", "我想问", "请问", "等等", "话说", "对了",
                "那个", "这个", "就是", "我们", "咱们", "你们", "他们", "她们", "大家", "我", "你", "在", "是")
_ANCHOR_TAIL = ("结束以后", "结束之后", "结束后", "过后", "之后", "以后", "以前", "之前", "的")


def number(text: str) -> int | None:
    """A count in digits or Chinese numerals up to 99 ("14", "十四", "二十一", "两")."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, units = text.partition("十")
        if "十" in units or len(tens) > 1 or len(units) > 1:
            return None
        t = _DIGITS.get(tens, None) if tens else 1
        u = _DIGITS.get(units, None) if units else 0
        return None if t is None or u is None else 10 * t + u
    if len(text) == 1:
        return _DIGITS.get(text)
    return None


def _fixed(pattern: str, offset: int, not_before: set[str] = frozenset()) -> tuple[re.Pattern, int, set[str]]:
    return re.compile(pattern), offset, not_before


_FIXED = [
    _fixed(r"大前(?:天|日|儿|晚)", -3),
    _fixed(r"前(?:天|日|儿|晚|夜)", -2, _NOT_BEFORE_QIANTIAN),
    _fixed(r"昨(?:天|日|儿|晚|夜|早|个)", -1),
    _fixed(r"今(?:天|日|儿|早|晨|晚|夜|个)", 0),
    _fixed(r"明(?:天|日|儿|早|晚|晨)", 1, _NOT_BEFORE_MINGTIAN),
    _fixed(r"(?<!大)后(?:天|日)", 2, _NOT_BEFORE_HOUTIAN),
    _fixed(r"大后(?:天|日)", 3),
]
_DAYS_AGO = re.compile(r"(?<![第\d零〇一二两三四五六七八九十])(?P<n>" + _NUM + r")(?:天|日)(?P<dir>以前|之前|前|以后|之后|后)")
_IN_DAYS = re.compile(r"过(?P<n>" + _NUM + r")天")
_FEW_DAYS_AGO = re.compile(r"前几天|(?:好)?几天(?:以前|之前|前)")
_WEEKS_AGO = re.compile(r"(?<![第\d零〇一二两三四五六七八九十])(?P<n>" + _NUM + r")" + _WEEK_WORD + r"(?:以前|之前|前)")
_MONTHS_AGO = re.compile(r"(?<![第\d零〇一二两三四五六七八九十])(?P<n>" + _NUM + r")个月(?:以前|之前|前)")
# 这周一直 is "all this week", 这周围 "around here": not a weekday, not a week.
_NAMED_WEEKDAY = re.compile(r"(?P<which>上上|下下|上|这|本|下)" + _WEEK_WORD + r"(?P<wd>[一二三四五六日天七1-7])"
                            r"(?![直样般定切些])")
_BARE_WEEKDAY = re.compile(r"(?:周|星期|礼拜)(?P<wd>[一二三四五六日天1-7])(?![直样般定切些])")
_WEEK = re.compile(r"(?P<which>上上|下下|上|这|本|下)" + _WEEK_WORD + r"(?P<end>末)?(?![围边到全期年岁遭一二三四五六日天七1-7])")
_MONTH_REL = re.compile(r"(?P<which>上|这|本|下)(?:个)?月(?![份底初中])")
_FULL_DATE = re.compile(r"(?:(?P<y>\d{4})年|(?P<yw>今年|去年|前年|明年))?(?P<m>" + _NUM + r")月(?P<d>" + _NUM
                        + r")(?:日|号)")
_MONTH_REL_DAY = re.compile(r"(?P<which>上|这|本|下)(?:个)?月(?P<d>" + _NUM + r")(?:日|号)")
_BARE_DAY = re.compile(r"(?<![月\d零〇一二两三四五六七八九十第年])(?P<d>" + _NUM + r")(?P<unit>号|日)")
_MONTH_NAMED = re.compile(r"(?:(?P<y>\d{4})年|(?P<yw>今年|去年|前年|明年))?(?<![\d零〇一二两三四五六七八九十第个])"
                          r"(?P<m>" + _NUM + r")月份")
# 3月初 / 3月上旬, 月中 / 中旬, 月底 / 月末 / 下旬; of a month named (3月, 去年12月) or counted from now (上个月).
_PART_WORD = {"初": "early", "上旬": "early", "中旬": "mid", "中": "mid", "底": "late", "末": "late", "下旬": "late"}
_MONTH_OF = (r"(?:(?:(?P<y>\d{4})年|(?P<yw>今年|去年|前年|明年))?(?<![\d零〇一二两三四五六七八九十第个])(?P<m>" + _NUM
             + r")月(?:份)?|(?P<which>上|这|本|下)(?:个)?月)")
_MONTH_PART = re.compile(_MONTH_OF + r"(?:的)?(?P<part>上旬|中旬|下旬|初|中(?![午旬间心国文])|底|末)")
_NTH_WEEK = re.compile(_MONTH_OF + r"(?:的)?(?P<nth>第[一二三四1-4]|最后一)(?:个)?(?:周|星期|礼拜)")
_ANCHOR = re.compile(
    r"(?P<rel>(?:的)?(?:(?P<plus1>第二天|第二日|次日|隔天|隔日|翌日|后一天|后一日|转天)"
    r"|(?P<minus1>前一天|前一日|前一晚|前一夜|头一天|前夕)"
    r"|(?P<dir>之前|之后|以前|以后|前|后)(?P<n>" + _NUM + r")天"
    r"|第(?P<nth>" + _NUM + r")天"
    r"|(?P<same>那天|当天|那一天|那日|当日)))")


def _spans(text: str, ref: dt.date, query: bool) -> Iterator[tuple]:
    """(match, span or a false value, kind[, alternatives]) for every expression."""
    for rx, offset, not_before in _FIXED:
        for m in rx.finditer(text):
            if not (m.start() and text[m.start() - 1] in not_before):
                yield m, day_span(ref, offset), "relative"
    ago = "前" in text or "后" in text
    week = has_any(text, ("周", "星期", "礼拜"))
    for m in scan(_DAYS_AGO, text, ago and ("天" in text or "日" in text)):
        n = number(m["n"])
        yield m, n is not None and day_span(ref, -n if "前" in m["dir"] else n), "relative"
    for m in scan(_IN_DAYS, text, "过" in text):
        n = number(m["n"])
        yield m, n is not None and day_span(ref, n), "relative"
    for m in scan(_FEW_DAYS_AGO, text, "几天" in text):
        yield m, few_days_ago(ref), "relative"
    for m in scan(_WEEKS_AGO, text, ago and week):
        n = number(m["n"])
        yield m, n is not None and weeks_ago(ref, n), "relative"
    for m in scan(_MONTHS_AGO, text, "个月" in text):
        n = number(m["n"])
        if n is not None and n <= 24:
            yield m, month_span(ref.year, ref.month - n), "relative"
    for m in scan(_NAMED_WEEKDAY, text, week):
        day = weekday_in_week(ref, _WEEKDAY[m["wd"]], _WHICH[m["which"]])
        yield m, day and DateSpan.day(day), "relative"
    if query:
        for m in scan(_BARE_WEEKDAY, text, week):
            day = last_weekday(ref, _WEEKDAY[m["wd"]])
            yield m, day and DateSpan.day(day), "relative"
    for m in scan(_WEEK, text, week):
        offset = _WHICH[m["which"]]
        yield m, weekend_of(ref, offset) if m["end"] else week_of(ref, offset), "relative"
    month = "月" in text
    for m in scan(_MONTH_REL, text, month):
        yield m, month_span(ref.year, ref.month + _WHICH[m["which"]]), "relative"
    for m in scan(_FULL_DATE, text, month):
        month, day = number(m["m"]), number(m["d"])
        if month is None or day is None:
            continue
        if m["y"] or m["yw"]:
            year = int(m["y"]) if m["y"] else ref.year + _YEAR_WORD[m["yw"]]
            found = safe_date(year, month, day)
        else:
            found = nearest_past_month_day(ref, month, day)
        yield m, found and DateSpan.day(found), "absolute"
    for m in scan(_MONTH_REL_DAY, text, month):
        day = number(m["d"])
        found = day is not None and month_day(ref, _WHICH[m["which"]], day)
        yield m, found and DateSpan.day(found), "absolute"
    for m in scan(_BARE_DAY, text, "号" in text or "日" in text):
        after = text[m.end():m.end() + 1]
        if (m["unit"] == "号" and after in _NOT_AFTER_HAO) or (m["unit"] == "日" and after not in _AFTER_RI):
            continue
        day = number(m["d"])
        found = day is not None and nearest_past_day_of_month(ref, day)
        yield m, found and DateSpan.day(found), "absolute", same_day_earlier_months(found) if found else ()
    for m in scan(_MONTH_NAMED, text, query and "月份" in text):  # in a message, as often ahead as behind
        month = number(m["m"])
        if month is None or not 1 <= month <= 12:
            continue
        yield m, month_span(_year_of(m, ref, month), month), "absolute"
    if not query:
        return   # below, what in a message is as often ahead as behind: 月底交房租, 3月初出发
    for m in scan(_MONTH_PART, text, "月" in text):
        whole = _month_named(m, ref)
        yield m, whole and month_part(whole.start.year, whole.start.month, _PART_WORD[m["part"]]), "absolute"
    for m in scan(_NTH_WEEK, text, "月" in text):
        whole = _month_named(m, ref)
        nth = -1 if m["nth"] == "最后一" else number(m["nth"][1:]) - 1
        yield m, whole and nth_week(whole, nth), "absolute"


def _year_of(m: re.Match, ref: dt.date, month: int) -> int:
    """The year a month is of: written (2024年, 去年), else the latest that began on or before `ref`."""
    if m["y"]:
        return int(m["y"])
    return ref.year + _YEAR_WORD[m["yw"]] if m["yw"] else nearest_past_month(ref, month)


def _month_named(m: re.Match, ref: dt.date) -> DateSpan | None:
    """The month a _MONTH_OF match names (3月, 去年12月, 上个月)."""
    if m["which"]:
        return month_span(ref.year, ref.month + _WHICH[m["which"]])
    month = number(m["m"])
    return month_span(_year_of(m, ref, month), month) if month and 1 <= month <= 12 else None


def find_dates(text: str, ref: dt.date, *, query: bool = False) -> list[Found]:
    """Every Chinese time expression in `text` with the days it names, said on `ref`. `query=True` also
    reads bare weekdays (周四) and months (3月份), which in a message are as often plans."""
    return [Found(m.start(), m.end(), span, kind, *alts) for m, span, kind, *alts in _spans(text, ref, query)
            if span]


def _phrase_bounds(text: str, end: int) -> tuple[int, int]:
    """The event phrase ending at `end`: back to punctuation, at most twelve characters, without a leading
    filler (我们, 问你个事) or a trailing 的 / 之后."""
    start = end
    while start > 0 and text[start - 1] not in _PUNCT and end - start < 12:
        start -= 1
    changed = True
    while changed:
        changed = False
        for tail in _ANCHOR_TAIL:
            if text.endswith(tail, start, end) and end - start > len(tail):
                end -= len(tail)
                changed = True
        for lead in _ANCHOR_LEAD:
            if text.startswith(lead, start, end) and end - start > len(lead):
                start += len(lead)
                changed = True
    return start, end


def find_anchors(text: str) -> list[AnchorFound]:
    """Days named after an event: X的第二天 (+1), X前一天 (-1), X后三天 (+3), X的第三天 (+2), X那天 (0).
    X is the text before, back to punctuation: it may start with a name ("萧寒中秋灯会")."""
    out = []
    for m in _ANCHOR.finditer(text):
        start, end = _phrase_bounds(text, m.start())
        phrase = text[start:end]
        if len(phrase) < 2 or find_dates(phrase, dt.date(2000, 1, 1)):
            continue
        if m["plus1"]:
            offset = 1
        elif m["minus1"]:
            offset = -1
        elif m["same"]:
            offset = 0
        elif m["nth"]:
            nth = number(m["nth"])
            if nth is None or nth < 1:
                continue
            offset = nth - 1
        else:
            n = number(m["n"])
            if n is None:
                continue
            offset = -n if "前" in m["dir"] else n
        out.append(AnchorFound(start, m.end(), phrase, start, end, offset))
    return out
