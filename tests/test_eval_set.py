"""The generated recall evaluation set (scripts/make_eval_set.py): deterministic, committed as generated,
and each question's evidence really says what the question asks. No model."""

from __future__ import annotations

import collections
import datetime as dt
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from evalkit import evalset  # noqa: E402
from evalkit.langpack import LANGS, fill, template_slots  # noqa: E402
from evalkit.stdate import absolute_phrase, format_send_date, parse_send_date, relative_phrase  # noqa: E402


@pytest.fixture(scope="module")
def data():
    return evalset.generate()


def test_send_date_is_sillytaverns_format():
    assert format_send_date(dt.datetime(2026, 3, 3, 20, 15)) == "March 3, 2026 8:15pm"
    assert format_send_date(dt.datetime(2026, 3, 3, 0, 5)) == "March 3, 2026 12:05am"
    assert format_send_date(dt.datetime(2026, 12, 31, 12, 0)) == "December 31, 2026 12:00pm"
    for moment in (dt.datetime(2026, 1, 9, 0, 0), dt.datetime(2026, 7, 4, 12, 59), dt.datetime(2026, 7, 4, 23, 1)):
        assert parse_send_date(format_send_date(moment)) == moment
    with pytest.raises(ValueError):
        parse_send_date("2026-03-03T20:15:00Z")


def test_date_phrases():
    today = dt.date(2026, 3, 15)  # a Sunday
    assert relative_phrase(dt.date(2026, 3, 14), today, "en", 0) == "yesterday"
    assert relative_phrase(dt.date(2026, 3, 11), today, "en", 0) == "four days ago"
    assert relative_phrase(dt.date(2026, 3, 12), today, "en", 1) == "last Thursday"
    assert relative_phrase(dt.date(2026, 3, 13), today, "zh", 0) == "前天"
    assert relative_phrase(dt.date(2026, 3, 10), today, "zh", 1) == "这周二"
    assert relative_phrase(dt.date(2026, 2, 1), today, "en", 0) is None
    assert absolute_phrase(dt.date(2026, 3, 4), "en", 0) == "on March 4"
    assert absolute_phrase(dt.date(2026, 3, 22), "en", 1) == "on the 22nd"
    assert absolute_phrase(dt.date(2026, 3, 4), "zh", 0) == "3月4日"


def test_the_committed_set_is_what_the_seed_generates(data):
    assert evalset.DEFAULT_PATH.read_bytes() == evalset.to_bytes(data), "run scripts/make_eval_set.py"


def test_sizes_and_categories(data):
    assert {c["lang"] for c in data["chats"]} == {"en", "zh"}
    assert collections.Counter(c["lang"] for c in data["chats"]) == {"en": 3, "zh": 3}
    for chat in data["chats"]:
        assert len(chat["messages"]) >= 1000
        assert chat["messages"][-1]["role"] == "assistant"
        assert {q["category"] for q in chat["questions"]} == set(evalset.CATEGORIES)
        assert len({q["id"] for q in chat["questions"]}) == len(chat["questions"])
        dates = [parse_send_date(m["send_date"]) for m in chat["messages"]]
        assert dates == sorted(dates)
        assert (dates[-1] - dates[0]).days >= 30
    assert evalset.check(data) == []


def _text(chat, i):
    return chat["messages"][i]["text"].casefold()


def test_evidence_says_the_answer_and_stale_messages_the_old_value(data):
    for chat in data["chats"]:
        for q in chat["questions"]:
            if q["category"] in ("fact", "update"):
                assert q["answer"].casefold() in _text(chat, q["evidence"][0]), q["id"]
            if q["category"] == "update":
                assert q["stale_answer"].casefold() in _text(chat, q["stale"][0]), q["id"]
                assert q["stale_answer"] != q["answer"], q["id"]
                assert q["stale"][0] < q["evidence"][0], q["id"]
            if q["category"] == "context":
                ask, reply = q["evidence"]
                assert reply == ask + 1 and chat["messages"][ask]["role"] == "user", q["id"]
                assert q["answer"].casefold() in _text(chat, reply), q["id"]
            if q["category"] == "multihop":
                assert len(q["evidence"]) >= 2, q["id"]


def test_dated_questions_point_at_the_day_of_their_evidence(data):
    for chat in data["chats"]:
        lang = chat["lang"]
        for q in (q for q in chat["questions"] if q["category"] == "date"):
            mode = q["kind"].split("/")[1]
            i = q["evidence"][0]
            sent = parse_send_date(chat["messages"][i]["send_date"]).date()
            said_yesterday = "yesterday" in _text(chat, i) or "昨天" in _text(chat, i)
            day = sent - dt.timedelta(days=1 if said_yesterday else 0)
            if mode in ("abs", "yest"):
                assert any(absolute_phrase(day, lang, s) in q["question"] for s in (0, 1)), q["id"]
                assert said_yesterday == (mode == "yest"), q["id"]
            elif mode == "rel":
                today = parse_send_date(chat["question_send_date"]).date()
                assert any(relative_phrase(day, today, lang, s) in q["question"] for s in (0, 1)), q["id"]


def test_questions_do_not_copy_the_statement(data):
    """Paraphrase: the words a fact question shares with its evidence sentence are the names and the
    key nouns, not the predicate (checked on English facts, where words are easy to cut)."""
    shared_verbs = re.compile(r"\b(hid|tucked|grew up|born|terrified|scared|combination is|called|named|owes|"
                              r"borrowed|lent|works as|working as)\b")
    for chat in (c for c in data["chats"] if c["lang"] == "en"):
        for q in (q for q in chat["questions"] if q["category"] == "fact"):
            assert not shared_verbs.search(q["question"].lower()), q["id"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_template_fills(lang):
    """A slot name mistyped in a pool would only show up in some seeds: fill every template once."""
    pack = LANGS[lang]
    pools = pack.pools
    for name in ("CHAR_ACTIONS", "CHAR_LINES", "USER_LINES", "USER_ACTIONS", "AMBIENT", "SESSION_OPEN_CHAR",
                 "USER_OPEN", "OOC_CHATTER", "IC_LOOKALIKES"):
        for template in getattr(pools, name):
            assert template_slots(template) <= KNOWN_SLOTS, (name, template)
    for spec in pack.facts.FACTS.values():
        for template in spec["state"] + spec["ask"] + spec["near"]:
            assert template_slots(template) <= KNOWN_SLOTS, template
    assert fill("{X_cap} and {X}", _slots(X="the festival")) == "The festival and the festival"


KNOWN_SLOTS = {"C", "cs", "cp", "co", "cself", "Cs", "Cp", "ct", "N", "ns", "np", "no", "nself", "Ns", "Np", "nt",
               "M", "ms", "mp", "mo", "mself", "Ms", "Mp", "mt", "K", "ks", "kp", "Ks", "kt", "U", "P", "P2", "P3", "O",
               "O2", "T", "T2", "F", "F2", "D", "W", "L", "L2", "J", "J2", "X", "X2", "A", "Name", "Name2", "AMT",
               "AMT2", "NUM", "NUM2"}


def _slots(**values):
    from evalkit.langpack import Slots

    return Slots(values)
