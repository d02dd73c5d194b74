"""Story time: SillyTavern send dates, the days English and Chinese texts mention, the days questions ask
about, and the labels of the block."""

from __future__ import annotations

import datetime as dt
import random

import pytest

from stbme.pipeline.timeline import (
    DateSpan, format_story_date, format_story_span, mentioned_dates, parse_send_date, query_time, story_time_of,
)

D = dt.date
WED = D(2026, 3, 18)  # a Wednesday
assert WED.weekday() == 2


def days(text: str, said_on: dt.date = WED, lang: str | None = None) -> list[list[str]]:
    return [s.to_json() for s in mentioned_dates(text, said_on, lang)]


def one(day: str) -> list[str]:
    return [day, day]


# -- send dates ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    ("June 19, 2023 2:20pm", D(2023, 6, 19)),              # getMessageTimeStamp()
    ("January 1, 2024 12:05am", D(2024, 1, 1)),            # midnight is 12am
    ("December 31, 2023 11:59pm", D(2023, 12, 31)),
    ("February 29, 2024 3:00pm", D(2024, 2, 29)),
    ("march 3, 2026 8:15PM", D(2026, 3, 3)),
    ("2023-7-20 @14h 5m 9s 123ms", D(2023, 7, 20)),        # humanizedDateTime() before Aug 2023, the server's
    ("2024-07-12@01h31m37s", D(2024, 7, 12)),              # humanizedDateTime() since
    # Noon UTC: the same calendar day in every zone from UTC-11 to UTC+11.
    (1718798400000, D(2024, 6, 19)),                       # Date.now()
    ("1718798400000", D(2024, 6, 19)),                     # the same as the extension sends it (String())
    (1718798400000.0, D(2024, 6, 19)),
    (1718798400, D(2024, 6, 19)),                          # epoch seconds
    ("2024-06-19T12:00:00.000Z", D(2024, 6, 19)),          # Date.toISOString()
    ("2024-06-19", D(2024, 6, 19)),
    ("2024-06-19 14:20:00", D(2024, 6, 19)),
    ("Wed Jun 19 2024 14:20:00 GMT+0200 (CEST)", D(2024, 6, 19)),
    ("2026年3月4日 10:00", D(2026, 3, 4)),
    ("  June 19, 2023 2:20pm  ", D(2023, 6, 19)),
])
def test_send_dates_in_every_form_sillytavern_wrote(value, expected):
    assert parse_send_date(value) == expected


@pytest.mark.parametrize("value", [
    None, "", "   ", "garbage", "Smarch 3, 2024 1:00pm", "February 29, 2023 3:00pm", "February 30, 2026 1:00am",
    "2024-13-01", "2024-02-30@01h00m00s", True, False, [], {}, object(), float("nan"), float("inf"), -1, 0, "0",
    "99999999999999999", 10 ** 30, "x" * 10_000, "null", "undefined", "NaN", "2024-06-19T25:00:00",
])
def test_unreadable_send_dates_are_none(value):
    assert parse_send_date(value) is None


# -- English mentions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("Garrick had his boots stolen yesterday.", [one("2026-03-17")]),
    ("We met the day before yesterday.", [one("2026-03-16")]),
    ("It happened the night before last.", [one("2026-03-16")]),
    ("Did you sleep last night?", [one("2026-03-17")]),
    ("Yesterday morning it rained.", [one("2026-03-17")]),
    ("It rained this morning and again tonight.", [one("2026-03-18")]),
    ("Earlier today she left.", [one("2026-03-18")]),
    ("See you tomorrow.", [one("2026-03-19")]),
    ("The day after tomorrow we sail.", [one("2026-03-20")]),
    ("Two days ago it snowed.", [one("2026-03-16")]),
    ("It was 3 days ago.", [one("2026-03-15")]),
    ("twenty-one days ago", [one("2026-02-25")]),
    ("a day ago", [one("2026-03-17")]),
    ("We leave in three days.", [one("2026-03-21")]),
    ("two days from now", [one("2026-03-20")]),
    ("a few days ago", [["2026-03-13", "2026-03-16"]]),
    ("a week ago", [["2026-03-10", "2026-03-12"]]),
    ("Last week was hard.", [["2026-03-09", "2026-03-15"]]),
    ("this week", [["2026-03-16", "2026-03-22"]]),
    ("next week", [["2026-03-23", "2026-03-29"]]),
    ("the week before last", [["2026-03-02", "2026-03-08"]]),
    ("last weekend", [["2026-03-14", "2026-03-15"]]),
    ("last month", [["2026-02-01", "2026-02-28"]]),
    ("next month", [["2026-04-01", "2026-04-30"]]),
    ("a month ago", [["2026-02-01", "2026-02-28"]]),
    ("two months ago", [["2026-01-01", "2026-01-31"]]),
    ("He wrote last Thursday.", [one("2026-03-12")]),
    ("last Wednesday", [one("2026-03-11")]),              # said on a Wednesday: a week back
    ("next Monday", [one("2026-03-23")]),
    ("this Friday", [one("2026-03-20")]),
    ("last Sunday night", [one("2026-03-15")]),
    ("on March 4", [one("2026-03-04")]),
    ("March 20", [one("2025-03-20")]),                    # after the day said: last year's
    ("4 March", [one("2026-03-04")]),
    ("the 4th of March", [one("2026-03-04")]),
    ("on March 4th, 2024", [one("2024-03-04")]),
    ("Mar. 4", [one("2026-03-04")]),
    ("on may 4", [one("2025-05-04")]),
    ("May 4th", [one("2025-05-04")]),
    ("the 14th", [one("2026-03-14")]),
    ("on the 20th", [one("2026-02-20")]),                 # the 20th has not come yet this month
    ("the 31st", [one("2026-01-31")]),                    # February has none
    ("February 29", [one("2024-02-29")]),                 # the latest leap year
    ("2026-03-04", [one("2026-03-04")]),
    ("2026/3/4", [one("2026-03-04")]),
])
def test_english_mentions(text, expected):
    assert days(text) == expected


@pytest.mark.parametrize("text", [
    "the 14th floor", "the 3rd time", "in the 19th century", "you may 4 times", "may 4 people come", "I march 5 miles",
    "She was 3 days late", "on Thursday we ride",         # a bare weekday in a message is as often a plan
    "The store closes in June.",                          # so is a bare month
    "February 30", "April 31", "version 1.2.3", "it costs 2026", "at 10:30", "the other day", "days ago",
    "Today's special", "the dayafter tomorrowland",
])
def test_english_non_dates(text):
    result = days(text)
    assert result == [] or text.startswith("Today"), result


def test_mentions_are_in_order_each_once_and_longest_wins():
    text = "Yesterday? No, the day before yesterday. Yesterday, I said. And March 4, 2026, not March 4."
    assert days(text) == [one("2026-03-17"), one("2026-03-16"), one("2026-03-04")]


def test_year_and_month_boundaries():
    new_year = D(2026, 1, 2)  # a Friday
    assert days("yesterday", new_year) == [one("2026-01-01")]
    assert days("the day before yesterday", new_year) == [one("2025-12-31")]
    assert days("last week", new_year) == [["2025-12-22", "2025-12-28"]]
    assert days("last month", new_year) == [["2025-12-01", "2025-12-31"]]
    assert days("December 31", new_year) == [one("2025-12-31")]
    assert days("the 31st", new_year) == [one("2025-12-31")]
    assert days("tomorrow", D(2025, 12, 31)) == [one("2026-01-01")]
    assert days("next month", D(2025, 12, 31)) == [["2026-01-01", "2026-01-31"]]
    assert days("yesterday", D(2026, 3, 1)) == [one("2026-02-28")]
    assert days("yesterday", D(2024, 3, 1)) == [one("2024-02-29")]
    assert days("上个月", new_year) == [["2025-12-01", "2025-12-31"]]
    assert days("上周四", new_year) == [one("2025-12-25")]
    assert days("前天", new_year) == [one("2025-12-31")]
    assert days("12月31号", new_year) == [one("2025-12-31")]


# -- Chinese mentions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, expected", [
    ("江离昨天在醉仙楼跟人打架掉了颗牙。", [one("2026-03-17")]),
    ("昨晚你睡了吗？", [one("2026-03-17")]),
    ("前天下午", [one("2026-03-16")]),
    ("大前天", [one("2026-03-15")]),
    ("今天早上", [one("2026-03-18")]),
    ("明天见", [one("2026-03-19")]),
    ("后天出发", [one("2026-03-20")]),
    ("大后天", [one("2026-03-21")]),
    ("三天前", [one("2026-03-15")]),
    ("3天前", [one("2026-03-15")]),
    ("十天以前", [one("2026-03-08")]),
    ("二十一天前", [one("2026-02-25")]),
    ("两天后", [one("2026-03-20")]),
    ("过三天", [one("2026-03-21")]),
    ("前几天", [["2026-03-13", "2026-03-16"]]),
    ("两周前", [["2026-03-03", "2026-03-05"]]),
    ("上周四", [one("2026-03-12")]),
    ("上周日", [one("2026-03-15")]),
    ("上个礼拜天", [one("2026-03-15")]),
    ("上星期三", [one("2026-03-11")]),
    ("这周五", [one("2026-03-20")]),
    ("下周一", [one("2026-03-23")]),
    ("上周", [["2026-03-09", "2026-03-15"]]),
    ("上个星期", [["2026-03-09", "2026-03-15"]]),
    ("上周末", [["2026-03-14", "2026-03-15"]]),
    ("本周", [["2026-03-16", "2026-03-22"]]),
    ("上个月", [["2026-02-01", "2026-02-28"]]),
    ("两个月前", [["2026-01-01", "2026-01-31"]]),
    ("3月4日", [one("2026-03-04")]),
    ("三月四号", [one("2026-03-04")]),
    ("十二月二十五日", [one("2025-12-25")]),
    ("2024年2月29日", [one("2024-02-29")]),
    ("去年12月31号", [one("2025-12-31")]),
    ("上个月14号", [one("2026-02-14")]),
    ("14号那天", [one("2026-03-14")]),
    ("20号", [one("2026-02-20")]),
    ("十五日晚上", [one("2026-03-15")]),
])
def test_chinese_mentions(text, expected):
    assert days(text) == expected


@pytest.mark.parametrize("text", [
    "然后天亮了", "目前天气不错", "以后天天见", "这周围都是山", "这周一直在下雨", "5号线", "3号楼", "一日三餐", "三日游",
    "周四我们去", "3月份", "二月三十日", "第三天前", "星期", "生日快乐", "光明日报",
])
def test_chinese_non_dates(text):
    assert days(text) == []


def test_language_hint_picks_the_readers():
    text = "yesterday 昨天"
    assert days(text, lang="en") == [one("2026-03-17")]
    assert days(text, lang="zh") == [one("2026-03-17")]
    assert days("yesterday, 前天") == [one("2026-03-17"), one("2026-03-16")]
    assert days("yesterday", lang="zh") == [] and days("前天", lang="en") == []


def test_garbage_text_never_raises():
    rng = random.Random(5)
    alphabet = "0123456789 -/.:年月日号天前后周上下这本个的第 thedayafterlastweekMarchmay14th昨今明"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        for span in mentioned_dates(text, WED):
            assert span.days <= 31
        query_time(text, WED, None, lambda phrase: WED)
    for bad in (None, 12, b"yesterday", ["yesterday"]):
        assert mentioned_dates(bad, WED) == []
        assert query_time(bad, WED) is None
    assert mentioned_dates("yesterday", "2026-03-18") == []
    assert mentioned_dates("yesterday", D(1, 1, 1)) == []       # the calendar's first day has no yesterday
    assert mentioned_dates("tomorrow", D(9999, 12, 31)) == []
    assert mentioned_dates("yesterday " * 20_000, WED) == [DateSpan(D(2026, 3, 17), D(2026, 3, 17))]


# -- story time (what the write path stores) -----------------------------------------------------------
def test_story_time_holds_the_day_and_the_other_days_mentioned():
    text = "Garrick had his boots stolen yesterday. I only heard about it this morning."
    assert story_time_of("March 18, 2026 7:29pm", text) == {"date": "2026-03-18", "mentions": [one("2026-03-17")]}
    assert story_time_of("March 18, 2026 7:29pm", "Nothing dated here, today.") == {"date": "2026-03-18"}
    assert story_time_of("2026-3-18 @19h 29m 0s 0ms", "宋嫂昨天生火的时候把眉毛燎没了，上周四也是。") == {
        "date": "2026-03-18", "mentions": [one("2026-03-17"), one("2026-03-12")]}
    assert story_time_of("", "yesterday") is None
    assert story_time_of(None, "yesterday") is None


def test_date_span():
    span = DateSpan(D(2026, 3, 2), D(2026, 3, 8))
    assert D(2026, 3, 2) in span and D(2026, 3, 8) in span and D(2026, 3, 9) not in span and "x" not in span
    assert span.days == 7 and span.shift(7) == DateSpan(D(2026, 3, 9), D(2026, 3, 15))
    assert span.overlaps(DateSpan.day(D(2026, 3, 8))) and not span.overlaps(DateSpan.day(D(2026, 3, 9)))
    assert DateSpan.from_json(span.to_json()) == span
    for bad in (None, "2026-03-02", ["2026-03-08", "2026-03-02"], ["2026-03-02"], [1, 2], ["2026-02-30"] * 2):
        assert DateSpan.from_json(bad) is None
    with pytest.raises(ValueError):
        DateSpan(D(2026, 3, 8), D(2026, 3, 2))


# -- questions ---------------------------------------------------------------------------------------------
class Anchors:
    """find_anchor for tests: known events, and the phrases asked for."""

    def __init__(self, **known: dt.date):
        self.known = known
        self.asked: list[str] = []

    def __call__(self, phrase: str) -> dt.date | None:
        self.asked.append(phrase)
        return self.known.get(phrase)


def test_query_absolute_date():
    qt = query_time("What happened on March 4?", WED)
    assert (qt.kind, qt.span, qt.expression, qt.topic) == ("absolute", DateSpan.day(D(2026, 3, 4)), "on March 4",
                                                          "What happened?")
    assert query_time("3月14日那天江离怎么了？", WED).span == DateSpan.day(D(2026, 3, 14))
    assert query_time("江离3月14日遇上什么倒霉事了？", WED).topic == "江离遇上什么倒霉事了？"


def test_query_numeric_dates_dotted_day_first_slashed_left_alone():
    qt = query_time("What did Kevin do on 14.01.2024?", WED)
    assert (qt.kind, qt.span) == ("absolute", DateSpan.day(D(2024, 1, 14)))
    assert query_time("What happened on 2024-01-14?", WED).span == DateSpan.day(D(2024, 1, 14))
    assert query_time("When did Akib start to read 11/22/63 by Stephen King?", WED) is None   # a title, or US/EU
    assert query_time("What happened on 32.01.2024 or 3.14.2024?", WED) is None   # no such days


def test_query_day_of_month_offers_earlier_months():
    qt = query_time("Ilse had a bad day on the 14th. What happened?", WED)
    assert qt.span == DateSpan.day(D(2026, 3, 14))
    assert qt.alternatives == (DateSpan.day(D(2026, 2, 14)), DateSpan.day(D(2026, 1, 14)))
    assert query_time("14号出了什么事？", WED).alternatives[0] == DateSpan.day(D(2026, 2, 14))
    assert query_time("the 30th", D(2026, 3, 31)).alternatives == (DateSpan.day(D(2026, 1, 30)),
                                                                   DateSpan.day(D(2025, 12, 30)))


def test_query_relative_days():
    qt = query_time('*I look out the window.* "Jory had a bad day six days ago. What happened?"', WED)
    assert (qt.kind, qt.span) == ("relative", DateSpan.day(D(2026, 3, 12)))
    assert qt.topic == '*I look out the window.* "Jory had a bad day. What happened?"'
    qt = query_time("What did Corvin write to us about last Thursday?", WED)
    assert qt.span == DateSpan.day(D(2026, 3, 12)) and qt.alternatives == (DateSpan.day(D(2026, 3, 5)),)
    assert query_time("What happened on Thursday?", WED).span == DateSpan.day(D(2026, 3, 12))
    assert query_time("林晚，上周六方泽怎么了？", WED).span == DateSpan.day(D(2026, 3, 14))
    assert query_time("六天前杜娘子怎么了？", WED).span == DateSpan.day(D(2026, 3, 12))
    assert query_time("周四那天发生了什么？", WED).span == DateSpan.day(D(2026, 3, 12))
    assert query_time("What did we do last week?", WED).span == DateSpan(D(2026, 3, 9), D(2026, 3, 15))
    assert query_time("What happened in March?", WED).span == DateSpan(D(2026, 3, 1), D(2026, 3, 31))
    assert query_time("3月份发生了什么？", D(2026, 1, 5)).span == DateSpan(D(2025, 3, 1), D(2025, 3, 31))


def test_query_prefers_the_date_asked_about():
    qt = query_time("How are you today? What happened six days ago?", WED)
    assert qt.expression == "six days ago"
    qt = query_time("Yesterday you said something about March 4. What was it?", WED)
    assert qt.expression == "March 4"
    assert query_time("Where is the key?", WED) is None
    assert query_time("钥匙在哪儿？", WED) is None


def test_a_date_that_bounds_the_question_is_not_the_day_asked_about():
    # "before December 23rd" asks about any day before it: the 23rd's memories are no answer.
    assert query_time("Did Vanessa take the test before December 23rd, 2023?", WED) is None
    assert query_time("What was Kate watching shortly before 7 Jan 2024?", WED) is None
    assert query_time("What has Mara done since March 4?", WED) is None
    assert query_time("12月23日之前他去了哪里？", WED) is None
    assert query_time("What did Mara do on March 4, before the storm?", WED).span == DateSpan.day(D(2026, 3, 4))
    # "the night of 10.01.2024" names a date, not an event to look up.
    qt = query_time("What did Kevin watch on the night of 10.01.2024?", WED, "en", lambda phrase: WED)
    assert (qt.kind, qt.span) == ("absolute", DateSpan.day(D(2024, 1, 10)))


def test_a_weekday_beside_a_date_is_that_weekday_before_or_after_it():
    # "on Friday before 10.01.2024" is the Friday before January 10, not last Friday.
    qt = query_time("What did Paola make for her mom's birthday on Friday before 10.01.2024?", WED, "en")
    assert (qt.kind, qt.span, qt.expression) == ("absolute", DateSpan.day(D(2024, 1, 5)), "Friday before 10.01.2024")
    qt = query_time("Where did we eat the Monday after March 4?", WED, "en")
    assert qt.span == DateSpan.day(D(2026, 3, 9))
    assert query_time("What did Mara do on Friday?", WED, "en").kind == "relative"


def test_query_anchored_to_an_event_english():
    find = Anchors(**{"Lantern Festival": D(2026, 2, 14), "big storm": D(2026, 3, 6)})
    qt = query_time("What did we come home with from the fish market the day after the Lantern Festival?", WED,
                    "en", find)
    assert (qt.kind, qt.anchor, qt.offset, qt.anchor_day) == ("anchor", "Lantern Festival", 1, D(2026, 2, 14))
    assert qt.span == DateSpan.day(D(2026, 2, 15))
    assert qt.topic == "What did we come home with from the fish market?"
    qt = query_time("What went wrong for Ilse the day before the big storm?", WED, None, find)
    assert (qt.offset, qt.span, qt.topic) == (-1, DateSpan.day(D(2026, 3, 5)), "What went wrong for Ilse?")
    assert query_time("three days after the big storm, what did Mara say?", WED, "en", find).span == \
        DateSpan.day(D(2026, 3, 9))
    assert query_time("Where were we on the night of the big storm?", WED, "en", find).offset == 0
    assert query_time("the morning after the big storm", WED, "en", find).offset == 1
    assert find.asked == ["Lantern Festival", "big storm", "big storm", "big storm", "big storm"]


def test_query_anchor_not_found_or_not_searched():
    qt = query_time("What happened the day after the harvest dance?", WED, "en", Anchors())
    assert (qt.kind, qt.anchor, qt.span, qt.anchor_day) == ("anchor", "harvest dance", None, None)
    assert query_time("What happened the day after the harvest dance?", WED).span is None
    assert query_time("What happened the day after the dance?", WED, None, lambda p: "2026-03-01").span is None
    # Not anchors: relative days, and pronouns that point at an earlier turn.
    assert query_time("What are we doing the day after tomorrow?", WED).kind == "relative"
    assert query_time("What happened the day after that?", WED) is None


def test_query_anchored_to_an_event_chinese():
    find = Anchors(元宵节=D(2026, 2, 14), 大风暴=D(2026, 3, 6), 端午龙舟赛=D(2026, 3, 16), 上元灯会=D(2026, 2, 28))
    qt = query_time("元宵节的第二天我们买了什么？", WED, "zh", find)
    assert (qt.kind, qt.anchor, qt.offset, qt.span) == ("anchor", "元宵节", 1, DateSpan.day(D(2026, 2, 15)))
    assert query_time("大风暴前一天江离怎么了？", WED, "zh", find).span == DateSpan.day(D(2026, 3, 5))
    qt = query_time("问你个事，端午龙舟赛的第二天杜娘子怎么了？", WED, None, find)
    assert (qt.anchor, qt.span) == ("端午龙舟赛", DateSpan.day(D(2026, 3, 17)))
    assert qt.topic == "问你个事，端午龙舟赛杜娘子怎么了？"   # the phrase stays: it may hold a name
    assert query_time("*我斜眼看着她。*“我们上元灯会的第二天在东市买了什么？”", WED, None, find).anchor == "上元灯会"
    assert query_time("元宵节后三天", WED, None, find).offset == 3
    assert query_time("元宵节之后的第三天", WED, None, find).offset == 2
    assert query_time("元宵节前两天", WED, None, find).offset == -2
    assert query_time("元宵节那天发生了什么？", WED, None, find).offset == 0
    assert query_time("元宵节前夕", WED, None, find).offset == -1
    assert query_time("萧寒中秋灯会的第二天出了什么事？", WED, None, find).anchor == "萧寒中秋灯会"


# -- labels --------------------------------------------------------------------------------------------------
def test_format_story_date():
    assert format_story_date(D(2026, 3, 4), "en", WED) == "Mar 4"
    assert format_story_date(D(2025, 12, 31), "en", WED) == "Dec 31, 2025"
    assert format_story_date(D(2026, 3, 4), "zh", WED) == "3月4日"
    assert format_story_date(D(2025, 3, 4), "zh-CN", WED) == "2025年3月4日"
    assert format_story_date(D(2026, 3, 4), None, None) == "Mar 4, 2026"
    assert format_story_span(DateSpan(D(2026, 3, 2), D(2026, 3, 8)), "en", WED) == "Mar 2–8"
    assert format_story_span(DateSpan(D(2026, 2, 27), D(2026, 3, 5)), "en", WED) == "Feb 27–Mar 5"
    assert format_story_span(DateSpan(D(2026, 3, 2), D(2026, 3, 8)), "zh", WED) == "3月2日–8日"
    assert format_story_span(DateSpan(D(2025, 12, 29), D(2026, 1, 4)), "en", WED) == "Dec 29, 2025–Jan 4"
    assert format_story_span(DateSpan.day(D(2026, 3, 4)), "zh", WED) == "3月4日"


@pytest.mark.parametrize("question, now, span", [
    ("Where was Mara in early March?", WED, (D(2026, 3, 1), D(2026, 3, 10))),
    ("What did we do in mid-January 2024?", WED, (D(2024, 1, 11), D(2024, 1, 20))),
    ("What happened in late February?", D(2026, 2, 27), (D(2026, 2, 21), D(2026, 2, 28))),
    ("What did Corvin say at the end of December?", WED, (D(2025, 12, 21), D(2025, 12, 31))),
    ("And at the beginning of March?", WED, (D(2026, 3, 1), D(2026, 3, 10))),
    ("Which place did Elise visit in the first week of 2024?", WED, (D(2024, 1, 1), D(2024, 1, 7))),
    ("What happened in the last week of February?", WED, (D(2026, 2, 22), D(2026, 2, 28))),
    # A date as an anchor's event: the day after it, not the date itself.
    ("What happened the day after March 4?", WED, (D(2026, 3, 5), D(2026, 3, 5))),
    ("And the day after the first week of March?", WED, (D(2026, 3, 8), D(2026, 3, 8))),
    ("What did Mara do two days before March 4?", WED, (D(2026, 3, 2), D(2026, 3, 2))),
    ("3月初他去了哪里？", WED, (D(2026, 3, 1), D(2026, 3, 10))),
    ("去年12月下旬发生了什么？", WED, (D(2025, 12, 21), D(2025, 12, 31))),
    ("上个月底她在干什么？", WED, (D(2026, 2, 21), D(2026, 2, 28))),
    ("1月第一周他做了什么？", WED, (D(2026, 1, 1), D(2026, 1, 7))),
    ("12月的最后一周呢？", WED, (D(2025, 12, 25), D(2025, 12, 31))),
    ("零月5日，3月初他在哪？", WED, (D(2026, 3, 1), D(2026, 3, 10))),   # a month that is none before it
])
def test_query_parts_of_months_and_weeks_of_a_month(question, now, span):
    qt = query_time(question, now, None, lambda phrase: None)
    assert qt is not None and qt.span == DateSpan(*span), question
    assert qt.kind == "absolute"


def test_parts_of_months_in_a_message_name_no_day():
    # Said in a message, they are as often ahead as behind ("rent is due at the end of March"): no day is placed.
    for text in ("Rent is due at the end of March.", "We fly out in early May.", "See you the first week of June.",
                 "月底交房租。", "3月初出发。", "6月第一周见。"):
        assert days(text) == [], text
    assert query_time("What happened on the day of the fair?", WED, "en", lambda phrase: D(2026, 3, 1)).kind == "anchor"
