"""The rebuilt read path, stage by stage: the query plan (recall/query.py), fusion and order
(recall/ranking.py), and through a real store the candidates the days, the graph and the exchange add
(recall/candidates.py via Services.recall)."""

from __future__ import annotations

import datetime as dt

import pytest

from conftest import full_sync, recall, settle
from stbme.graph.model import Node
from stbme.index.lexical import tokenize
from stbme.recall import read_path, tuning
from stbme.recall.candidates import Ranking
from stbme.recall.query import clean_input, plan_query, refers_back, split_parts
from stbme.recall.ranking import (asks, found_by_search, fuse, lift_neighbours, lower_askers, lower_other_speakers,
                                   may_show, only_asks, order, relevant, score_rows)
from stbme.recall.snippet import focus, sentences
from stbme.tokens import count_tokens

WED = dt.date(2026, 3, 18)


# -- the query -------------------------------------------------------------------------------------
def test_actions_and_quote_marks_are_cut_from_the_input():
    assert clean_input('*I lean on the rail.* "Where did Elena hide the key?"') == "Where did Elena hide the key?"
    assert clean_input("*她把茶杯放下。*“钥匙藏在哪儿了？”") == "钥匙藏在哪儿了？"
    assert clean_input("*nods*") == "*nods*"  # nothing else is left: the action is the input


def test_a_question_in_several_parts_is_split_in_english_and_chinese():
    assert split_parts("Where is the key? And who took the boat?") == ["Where is the key?", "And who took the boat?"]
    assert split_parts("Tell me about the key, and what did Mara say about the boat") == [
        "Tell me about the key", "what did Mara say about the boat"]
    assert split_parts("钥匙在哪儿？还有船是谁拿走的？") == ["钥匙在哪儿？", "船是谁拿走的？"]
    assert split_parts("Where is it?") == ["Where is it?"]  # one part: the input itself
    assert split_parts("Hm? Where is the old key kept?") == ["Hm? Where is the old key kept?"]  # too short a part


def test_recent_turns_lend_names_only_to_an_input_that_refers_back():
    recent = ['"Corvin left the harbour with Mara at dawn."']
    plan = plan_query("What did she say about it?", recent, now=WED, lang="en")
    assert refers_back("What did she say about it?") and plan.borrowed_names == ["Corvin", "Mara"]
    assert plan.parts == ["What did she say about it?"]  # the input is searched as it is ...
    assert plan.reference == "What did she say about it? Corvin Mara"  # ... and with the names, apart
    plan = plan_query("What did Elena say about the boat?", recent, now=WED, lang="en")
    assert plan.borrowed_names == [] and plan.reference is None


def test_a_transliterated_chinese_name_is_one_name_and_is_lent_whole():
    recent = ["主演有卢卡斯·哈斯、安德鲁·普利文等。"]
    plan = plan_query("他后来还演过什么？", recent, now=WED, lang="zh")
    assert plan.borrowed_names == ["卢卡斯·哈斯", "安德鲁·普利文"]   # not "主演有卢卡斯" nor "普利文等"
    assert not refers_back("他和莱昂纳多·迪卡普里奥合作过吗？")   # names someone itself


def test_the_time_asked_about_is_read_apart_but_today_is_no_filter():
    plan = plan_query('*I yawn.* "What happened six days ago at the docks?"', [], now=WED, lang="en")
    assert plan.time.expression == "six days ago" and plan.topic == "What happened at the docks?"
    assert plan_query("Where would I find the hard drive today?", [], now=WED, lang="en").time is None
    assert plan_query("你今天在哪儿干活？", [], now=WED, lang="zh").time is None
    assert plan_query("六天前杜娘子怎么了？", [], now=WED, lang="zh").time.span.start == dt.date(2026, 3, 12)
    # Searched with its time words or without (recall/tuning.SEARCH_TIME_WORDS): the days are read apart either way.
    plan = plan_query("Where was Elise on 31 Dec 2023?", [], now=WED, lang="en", search_time_words=True)
    assert plan.parts == ["Where was Elise on 31 Dec 2023?"] and plan.topic == "Where was Elise?"
    assert plan.time.span.start == dt.date(2023, 12, 31)
    assert plan_query("Where was Elise on 31 Dec 2023?", [], now=WED, lang="en").parts == ["Where was Elise?"]


# -- fusion and order ------------------------------------------------------------------------------
def test_fusion_is_one_for_first_in_every_list_and_weights_count():
    fused = fuse([Ranking("lex0", 2.0, ["a", "b"], {}), Ranking("vec0", 1.0, ["a", "c"], {})])
    assert fused["a"] == 1.0
    assert fused["b"] > fused["c"]  # second in the heavier list beats second in the lighter one


def test_only_what_the_search_finds_seeds_the_rest():
    lex = Ranking("lex0", 2.0, ["strong", "weak"], {"strong": 4.0, "weak": 0.5})
    vec = Ranking("vec0", 1.0, ["close", "far"] + [f"x{i}" for i in range(5)],
                  {"close": 0.9, "far": 0.7, **{f"x{i}": 0.7 for i in range(5)}})
    days = Ranking("time", 3.0, ["that day"], {"that day": 0.1})
    found = found_by_search([lex, vec, days], min_similarity=0.78, vector_margin=0.04, min_bm25=1.0)
    assert found == {"strong", "close", "that day"}
    scores = {n: (0.5, {"lexical": 0.0, "vector": 0.5}) for n in ("strong", "weak", "graph hit", "graph miss", "nb")}
    scores["graph hit"] = (0.5, {"lexical": 2.0, "vector": 0.5, "graph": 0.1})   # shares a word with the question
    scores["graph miss"] = (0.5, {"lexical": 0.0, "vector": 0.5, "graph": 0.1})  # reached, but off topic
    scores["nb"] = (0.5, {"lexical": 0.0, "vector": 0.5, "neighbour": 0.2})
    assert set(relevant(scores, found, 0.78)) == {"strong", "graph hit", "nb"}


def test_rows_are_read_only_for_what_may_be_shown():
    """may_show (before the rows are read) keeps everything relevant (after scoring) would keep."""
    lex = Ranking("lex0", 2.0, ["strong", "weak", "graph hit"], {"strong": 4.0, "weak": 0.5, "graph hit": 0.3})
    vec = Ranking("vec0", 1.0, ["close", "far", "graph near"], {"close": 0.9, "far": 0.7, "graph near": 0.8})
    graph = Ranking("graph", 1.0, ["graph hit", "graph near", "graph miss"],
                    {"graph hit": 0.2, "graph near": 0.2, "graph miss": 0.2})
    before_graph = fuse([lex, vec])
    rankings = [lex, vec, graph]
    fused = {**fuse(rankings), "nb": 0.0}
    found = {"strong", "close"}
    members = ["graph hit", "graph near", "graph miss"]
    wanted = may_show(before_graph, found, {"nb": "strong"}, members, [lex, vec], 0.78)
    assert set(wanted) == {"strong", "close", "nb", "graph hit", "graph near"}
    rows = {n: {"pinned": 0, "seq_from": i, "seq_to": i, "type": "event", "importance": 5, "weight": 1.0}
            for i, n in enumerate(fused)}
    scores = score_rows(fused, rows, rankings, length=100, skip_from=100, skip_before=0,
                        importance_weight=0.15, recency_weight=0.1)
    lift_neighbours(scores, {"nb": "strong"}, 0.8)
    assert set(relevant(scores, found, 0.78)) <= set(wanted)


def test_a_neighbour_rises_to_its_share_of_the_hit():
    scores = {"hit": (1.0, {}), "reply": (0.1, {}), "high": (0.9, {})}
    lift_neighbours(scores, {"reply": "hit", "high": "hit"}, 0.8)
    assert scores["reply"][0] == 0.8 and scores["reply"][1]["neighbour"] == 0.7
    assert scores["high"] == (0.9, {})  # already above its share: unchanged


def test_an_input_asks_when_its_last_sentence_is_a_question_and_a_message_only_asks_when_every_one_is():
    assert asks("I saw it. Did you?") and not only_asks("I saw it. Did you?")
    assert only_asks("What about you? Any plans for the holidays?") and only_asks('"Do you know?"')
    assert only_asks("知道他有哪些作品吗？") and not only_asks("我看过。你呢？")
    assert not only_asks('*She tilts her head.* "Do you know?"')   # the narration tells something
    assert not asks("Tell me about the harbour.") and not only_asks("")


def _message_rows(*ids: str, extracted: tuple[str, ...] = ()) -> dict:
    """Ranking rows: a message's own memory for each id, an extraction for those in `extracted`."""
    return {n: {"type": "fact" if n in extracted else "event", "source": "llm" if n in extracted else "heuristic",
                "seq_from": i, "seq_to": i} for i, n in enumerate(ids)}


def test_a_message_that_only_asks_keeps_its_share_before_its_reply_rises_from_it():
    scores = {"question": (1.0, {}), "its reply": (0.1, {}), "answer": (0.7, {})}
    rows = _message_rows(*scores)
    lift_from = lower_askers(scores, rows, lambda ids: {n: "Where?" for n in ids if n == "question"}, 0.5, window=3)
    lift_neighbours(scores, {"its reply": "question"}, 0.8, lift_from)
    assert scores["question"] == (0.5, {"asking": 0.5}) and scores["its reply"][0] == pytest.approx(0.4)
    assert max(scores, key=lambda n: scores[n][0]) == "answer" and lift_from == {}


def test_the_reply_to_a_question_on_the_inputs_topic_rises_from_its_unlowered_score():
    # Two questions lowered alike; the one that names the topic gives its reply the share of its full score.
    scores = {"on topic": (1.0, {}), "its reply": (0.1, {}), "off topic": (0.9, {}), "other reply": (0.1, {})}
    rows = _message_rows(*scores)
    texts = {"on topic": "Have you been to Aldershot?", "off topic": "Have you been to the market?"}
    lift_from = lower_askers(scores, rows, lambda ids: {n: texts[n] for n in ids if n in texts}, 0.5, window=4,
                             names_topic=lambda text: "Aldershot" in text)
    lift_neighbours(scores, {"its reply": "on topic", "other reply": "off topic"}, 0.8, lift_from)
    assert lift_from == {"on topic": 1.0} and scores["on topic"][0] == 0.5
    assert scores["its reply"][0] == pytest.approx(0.8) and scores["other reply"][0] == pytest.approx(0.36)


def test_a_question_names_the_topic_by_what_the_input_borrows_or_else_by_its_rarest_term():
    from stbme.index.lexical import LexicalIndex
    from stbme.recall.read_path import names_the_topic

    lexical = LexicalIndex()
    said = ["Have you been to Aldershot Cross?", "Have you been to the market?", "We went to the market.",
            "《色戒》是李安导演的。", "知道《色戒》的主演是谁吗？", "知道他是哪年出生的吗？", "知道她是哪年出生的吗？"]
    for i, text in enumerate(said):
        lexical.upsert(f"m{i}", text)
    own = plan_query("Have you been to Aldershot Cross?", [], now=WED, lang="en", weights=lexical.term_weights)
    names = names_the_topic(own, lexical)
    assert names("Have you been to Aldershot Cross?") and not names("Have you been to the market?")
    # "他" leans on the last turn: the question is about the film it names, not about its own rarest words,
    # which every "哪年出生" question shares.
    leaning = plan_query("知道他是哪年出生的吗？", ["《色戒》是李安导演的。"], now=WED, lang="zh",
                         weights=lexical.term_weights, borrow_terms=True)
    names = names_the_topic(leaning, lexical)
    assert leaning.borrowed_names and names("知道《色戒》的主演是谁吗？") and not names("知道她是哪年出生的吗？")
    assert names_the_topic(plan_query("Is Sam asleep?", [], now=WED, lang="en",
                                      weights=lexical.term_weights), lexical) is None   # no term in the chat


def test_questions_below_the_window_are_checked_once_lowering_the_first_lets_them_rise():
    # Six questions above the answer, a window of two: each round lowers two, the next two rise into the
    # window and are checked in turn, until the window holds the answer and the extraction, both checked
    # or not a message's own.
    questions = [f"q{i}" for i in range(6)]
    scores = {**{q: (1.0 - i / 100, {}) for i, q in enumerate(questions)}, "answer": (0.8, {}), "fact": (0.79, {})}
    rows = _message_rows(*scores, extracted=("fact",))
    asked: list[list[str]] = []

    def only_asking(ids):
        asked.append(list(ids))
        return {n: "?" for n in ids if n in questions}
    lower_askers(scores, rows, only_asking, 0.5, window=2)
    assert sorted(scores, key=lambda n: -scores[n][0])[:2] == ["answer", "fact"]
    assert all(scores[q][1] == {"asking": 0.5} for q in questions)
    assert asked == [["q0", "q1"], ["q2", "q3"], ["q4", "q5"], ["answer"]]   # each read once, "fact" never


def test_the_other_speakers_memories_keep_their_share_after_the_lift():
    # The reply a hit brings (the other speaker's) is lowered after it rose; an extraction is no message's own.
    scores = {"hers": (1.0, {}), "his reply": (0.9, {}), "his": (0.95, {}), "fact": (0.5, {})}
    rows = _message_rows(*scores, extracted=("fact",))
    lift_neighbours(scores, {"his reply": "hers"}, 0.8)
    asked: list[list[str]] = []

    def said_by_others(ids):
        asked.append(sorted(ids))
        return {n: None for n in ids if n.startswith("his")}
    lower_other_speakers(scores, rows, said_by_others, 0.5, window=2)
    assert scores["hers"] == (1.0, {}) and scores["his"] == (0.475, {"speaker": 0.5})
    assert scores["his reply"][0] == pytest.approx(0.45) and scores["his reply"][1]["speaker"] == 0.5
    assert asked == [["hers", "his"], ["his reply"]] and scores["fact"] == (0.5, {})
    lower_other_speakers(scores, rows, said_by_others, 1.0, window=2)   # 1: off, nothing read
    assert len(asked) == 2


def test_the_speaker_an_input_asks_about_is_named_not_addressed_in_english_and_chinese():
    import sqlite3

    from stbme.recall.candidates import speaker_asked_about

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE messages (chat_id TEXT, idx INTEGER, name TEXT)")
    conn.executemany("INSERT INTO messages VALUES ('c', ?, ?)",
                     enumerate(["林晓", "周然", "Kate", "Tom", "Kate", "Will", "Hope", "Fahim Khan"]))
    assert speaker_asked_about(conn, "c", "How did Fahim spend New Year's Eve?") == "Fahim Khan"
    assert speaker_asked_about(conn, "c", "How did Fahim and Kate spend New Year's Eve?") is None
    conn.execute("INSERT INTO messages VALUES ('c', 9, ' Irene ')")   # as stored: the messages are found by it
    assert speaker_asked_about(conn, "c", "What did Irene bake?") == " Irene "
    assert speaker_asked_about(conn, "c", "When did Kate visit Art Basel?") == "Kate"
    assert speaker_asked_about(conn, "c", "when did kate visit art basel?") == "Kate"
    assert speaker_asked_about(conn, "c", "周然去过哪些地方？") == "周然"
    # A name that is also a common word names its speaker only as written, inside a sentence.
    assert speaker_asked_about(conn, "c", "Will you tell me when Kate visited Art Basel? I hope so.") == "Kate"
    assert speaker_asked_about(conn, "c", "When did Will visit Art Basel?") == "Will"
    for text in ("Kate, when did you visit Art Basel?", "周然，你去过哪些地方？", "Did Kate and Tom visit Art Basel?",
                 "When did we visit Art Basel?", "katenka?", "Will you visit Art Basel? Hope so.",
                 "will we ever see art basel?"):
        assert speaker_asked_about(conn, "c", text) is None, text


async def test_a_question_about_one_speaker_ranks_what_that_speaker_said_first(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    chat[11] = {"role": "user", "name": "Alex",
                "text": "The lighthouse at Carrow Point! I hear the lighthouse at Carrow Point is lovely."}
    chat[25] = {"role": "assistant", "name": "Elena", "text": "I climbed the old lighthouse at Carrow Point today."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    question = "When did Elena see the lighthouse at Carrow Point?"
    monkeypatch.setattr(tuning, "SPEAKER_SHARE", 1.0)   # without it, Alex's words match the question best
    memories = await _recalled(sidecar, question, [])
    assert _place(memories, 11) < _place(memories, 25)
    monkeypatch.setattr(tuning, "SPEAKER_SHARE", 0.5)
    memories = await _recalled(sidecar, question, [])
    assert _place(memories, 25) < _place(memories, 11) and memories[_place(memories, 11)]["score_parts"]["speaker"] == 0.5
    assert "speaker" not in memories[_place(memories, 25)]["score_parts"]
    # Addressed, Elena is not what the input is about; named with Alex, neither speaker is.
    for other in ("Elena, when did you see the lighthouse at Carrow Point?",
                  "When did Elena and Alex talk about the lighthouse at Carrow Point?"):
        assert not any("speaker" in m["score_parts"] for m in await _recalled(sidecar, other, []))


async def test_a_question_finds_the_statement_that_answers_it_over_a_message_that_only_asks_it(sidecar,
                                                                                                monkeypatch):
    chat = _quiet_chat(40)
    chat[10] = {"role": "user", "name": "Alex", "text": "Who built the old lighthouse on the cliff?"}
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Nobody in the village remembers, I am afraid."}
    chat[20] = {"role": "assistant", "name": "Elena", "text": "Corvin built that lighthouse on the cliff, stone by stone."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")

    question = "Who built the old lighthouse on the cliff?"
    assert (await _memories(sidecar, question))[0]["seq_range"][0] == 20
    # Said, not asked: nothing is lowered, and the message said in the same words leads.
    said = (await _memories(sidecar, "I keep thinking about who built the old lighthouse on the cliff."))[0]
    assert said["seq_range"][0] == 10 and "asking" not in said["score_parts"]
    monkeypatch.setattr(tuning, "ASKING_SHARE", 1.0)
    assert (await _memories(sidecar, question))[0]["seq_range"][0] == 10


async def test_the_reply_to_a_question_on_the_inputs_topic_rises_from_what_the_question_scored(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    chat[10] = {"role": "user", "name": "Alex", "text": "Have you ever been to Aldershot Cross?"}
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Only once, for my sister's wedding by the old mill."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")

    async def asked_and_reply():
        by_message = {m["seq_range"][0]: m for m in await _memories(sidecar, "What happened at Aldershot Cross?")}
        return by_message[10], by_message[11]
    asked, reply = await asked_and_reply()
    assert asked["score_parts"]["asking"] == tuning.ASKING_SHARE   # the question itself is lowered ...
    # ... but it names what the input asks about, so its reply rises from its full score
    assert reply["score"] == pytest.approx(tuning.NEIGHBOUR_SHARE * asked["score"] / tuning.ASKING_SHARE, abs=2e-3)
    monkeypatch.setattr(tuning, "ASKING_TOPIC_LIFT", False)
    asked, reply = await asked_and_reply()
    # Without the lift it keeps the higher of its own score and the share of the lowered one, far below the above.
    assert reply["score"] >= tuning.NEIGHBOUR_SHARE * asked["score"] - 2e-3
    assert reply["score"] < tuning.NEIGHBOUR_SHARE * asked["score"] / tuning.ASKING_SHARE - 0.1


async def _memories(sidecar, question: str) -> list[dict]:
    """The memories recalled for this input, best first (chat "c", an 800-token budget)."""
    return (await recall(sidecar, "c", {"query": question, "budget_tokens": 800}))["memories"]


def _row(node_id, seq, *, source="heuristic"):
    return {"id": node_id, "chat_id": "c", "type": "event", "fields": '{"summary": "x"}', "tags": "[]",
            "importance": 5.0, "seq_from": seq, "seq_to": seq, "source": source, "pinned": 0, "archived": 0,
            "locked": 0, "weight": 1.0, "access_count": 0, "last_access": None, "created_at": 0.0,
            "updated_at": 0.0, "rev": 1, "story_time": None, "embedding": None}


def test_one_memory_per_message_and_ties_by_id(monkeypatch):
    import stbme.recall.ranking as ranking

    monkeypatch.setattr(ranking, "node_from_row", lambda row: Node(id=row["id"], chat_id="c", type="event",
                                                                   fields={}, seq_from=row["seq_from"]))
    rows = {"b": _row("b", 3), "a": _row("a", 5), "a2": _row("a2", 5), "c": _row("c", 7)}
    scores = {"b": (0.5, {}), "a": (0.5, {}), "a2": (0.9, {}), "c": (0.5, {})}
    picked = [s.node.id for s in order(scores, rows, limit=10)]
    assert picked == ["a2", "b", "c"]  # a2 speaks for message 5 (a is left out); b and c tie: by id


def test_order_reads_the_texts_of_the_memories_it_chose_only(monkeypatch):
    import stbme.recall.ranking as ranking

    monkeypatch.setattr(ranking, "node_from_row", lambda row: Node(id=row["id"], chat_id="c", type="event",
                                                                   fields={"summary": row["fields"]}))
    light = {n: {**_row(n, seq), "fields": None} for n, seq in (("a", 1), ("b", 2), ("c", 3), ("gone", 4))}
    scores = {"a": (0.9, {}), "gone": (0.8, {}), "b": (0.7, {}), "c": (0.1, {})}
    asked = []

    def node_rows(ids):
        asked.append(list(ids))
        return {n: {"id": n, "fields": f"text of {n}"} for n in ids if n != "gone"}   # archived meanwhile

    picked = order(scores, light, limit=3, node_rows=node_rows)
    assert asked == [["a", "gone", "b"]]                      # one read, of the chosen only
    assert [(s.node.id, s.node.fields["summary"]) for s in picked] == [("a", "text of a"), ("b", "text of b")]


# -- through the store -----------------------------------------------------------------------------
def _day(offset: int) -> str:
    return (dt.datetime(2026, 3, 1, 12, 0) + dt.timedelta(days=offset)).strftime("%B %d, %Y %I:%M%p")


def _dated_chat() -> list[dict]:
    """A chat over 30 days, two messages a day; day 10 holds the one about the lantern."""
    chat = []
    for day in range(30):
        chat.append({"role": "user", "name": "Alex", "text": f"Morning, day {day}. Any news from the harbour?",
                     "send_date": _day(day)})
        news = ("Elena says the old lantern cracked in the storm and Tomas mended it." if day == 10
                else f"Elena talks about the nets and the weather on day {day}.")
        chat.append({"role": "assistant", "name": "Elena", "text": news, "send_date": _day(day)})
    return chat


async def test_a_question_about_a_day_finds_that_days_memories(sidecar):
    await full_sync(sidecar, "c", _dated_chat())
    await settle(sidecar, "c")
    result = await recall(sidecar, "c", {"query": "What happened nineteen days ago?", "budget_tokens": 400})
    assert result["query"]["time"] == "nineteen days ago"
    first = result["memories"][0]
    assert first["seq_range"][0] in (20, 21) and first["score_parts"]["time"] > 0  # day 10 of 29
    assert "[Mar 11]" in result["text"]  # the story date is shown


async def test_of_the_day_asked_about_only_what_the_question_is_about_counts_as_that_day(sidecar):
    await full_sync(sidecar, "c", _dated_chat())
    await settle(sidecar, "c")

    def time_listed(result):
        return {m["seq_range"][0] for m in result["memories"] if "time" in m["score_parts"]}

    about = await recall(sidecar, "c", {"query": "What cracked in the storm nineteen days ago?", "budget_tokens": 800})
    assert time_listed(about) == {21}   # day 10's lantern, not its small talk (message 20)
    only_the_day = await recall(sidecar, "c", {"query": "What happened nineteen days ago?", "budget_tokens": 800})
    assert time_listed(only_the_day) == {20, 21}   # nothing but the day asked: the whole day


async def test_what_happened_on_a_date_may_be_told_the_day_after(sidecar, monkeypatch):
    chat = _dated_chat()
    chat[23] = dict(chat[23], text="Elena: the fiddler played at the harbour until dawn, what a party that was.")
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    ask = {"query": "Who played the fiddler on March 11?", "budget_tokens": 800}   # day 10

    def time_listed(result):
        return {m["seq_range"][0] for m in result["memories"] if "time" in m["score_parts"]}

    assert time_listed(await recall(sidecar, "c", ask)) == {23}   # said on day 11, about the night of day 10
    # A day reckoned from now keeps to its day; so does a date asked about with nothing else.
    assert 23 not in time_listed(await recall(sidecar, "c", {"query": "Who played the fiddler nineteen days ago?"}))
    assert time_listed(await recall(sidecar, "c", {"query": "What happened on March 11?"})) == {20, 21}
    monkeypatch.setattr(tuning, "DAYS_TOLD_AFTER", 0)
    assert 23 not in time_listed(await recall(sidecar, "c", ask))


async def test_an_input_that_leans_on_the_last_turn_is_also_searched_by_that_turns_stored_vector(sidecar, monkeypatch):
    import numpy as np

    from stbme.index.hnsw import ChatIndex

    monkeypatch.setattr(tuning, "VECTOR_REFERENCE", True)
    chat = _quiet_chat(40)
    chat[38] = {"role": "user", "name": "Alex", "text": "Tell me about the lighthouse keeper on the cliffs."}
    chat[39] = {"role": "assistant", "name": "Elena", "text": "Corvin keeps the lighthouse now; he swings Dawnbreaker."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    searched = []
    real_query = ChatIndex.query
    monkeypatch.setattr(ChatIndex, "query", lambda self, vector, k: searched.append(vector) or real_query(self, vector, k))
    recent = [{"role": m["role"], "name": m["name"], "text": m["text"]} for m in chat[-4:]]
    ask = {"query": "And what did he make with his own hands?", "recent": recent, "budget_tokens": 800}
    await recall(sidecar, "c", ask)
    index = await sidecar.indexes.vectors.get("c")
    turn = [n for n, in sidecar.store.read_sync(
        lambda conn: conn.execute("SELECT id FROM nodes WHERE chat_id = 'c' AND seq_from = 39").fetchall())]
    turn_vector = index.vectors(turn)[0]
    assert len(searched) == 2   # the input, then the input leaning on the last turn's stored vector (nothing embedded)
    assert float(np.dot(searched[1], turn_vector)) > float(np.dot(searched[0], turn_vector)) + 0.1
    # A last turn the chat does not hold (edited since, never synced): no second search, and no error.
    searched.clear()
    edited = [*recent[:-1], dict(recent[-1], text="Corvin keeps the lighthouse.")]
    await recall(sidecar, "c", {**ask, "recent": edited})
    assert len(searched) == 1


async def test_recall_reads_its_candidates_ranking_columns_through_the_ranking_index(sidecar):
    from stbme.store.queries import RANKING_INDEX

    await full_sync(sidecar, "c", _quiet_chat(30))
    await settle(sidecar, "c")
    statements = []
    conn = sidecar.store._reader()   # this thread's connection: the one the recall's inline reads use
    conn.set_trace_callback(statements.append)
    try:
        result = await recall(sidecar, "c", {"query": "small talk number 7", "budget_tokens": 800})
    finally:
        conn.set_trace_callback(None)
    assert result["memories"]
    assert any(f"INDEXED BY {RANKING_INDEX}" in sql for sql in statements), statements


async def test_the_other_half_of_an_exchange_comes_with_a_hit(sidecar, monkeypatch):
    monkeypatch.setattr(tuning, "NEIGHBOUR_KINDS", ("exchange",))
    chat = [{"role": "user", "name": "Alex", "text": f"Small talk number {i} about nothing much."}
            if i % 2 == 0 else {"role": "assistant", "name": "Elena", "text": f"A plain answer, number {i}."}
            for i in range(40)]
    chat[10] = {"role": "user", "name": "Alex", "text": "How did you get the scar on your collarbone?"}
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Broken glass. I put my hand through a window."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    result = await recall(sidecar, "c", {"query": "the scar on your collarbone", "budget_tokens": 400})
    by_seq = {m["seq_range"][0]: m for m in result["memories"]}
    assert 10 in by_seq and 11 in by_seq and "neighbour" in by_seq[11]["score_parts"]
    assert 9 not in by_seq  # the message before the question belongs to another exchange


def _quiet_chat(n: int) -> list[dict]:
    """Small talk that matches no question, for planting the few messages a test is about."""
    return [{"role": "user", "name": "Alex", "text": f"Tell me more, turn {i}."} if i % 2 == 0 else
            {"role": "assistant", "name": "Elena", "text": f"The tide was calm again on turn {i}."} for i in range(n)]


async def test_the_graph_lifts_the_memories_of_a_less_common_name_of_the_first_hit(sidecar):
    chat = _quiet_chat(60)
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Corvin pulled you out of the river that spring."}
    for i in (21, 25, 41, 45):  # other swords, each said more often than the one asked about
        chat[i] = {"role": "assistant", "name": "Elena", "text": f"The sword, the old sword of Tomas, rusts ({i})."}
    chat[31] = {"role": "assistant", "name": "Elena", "text": "Corvin forged that sword himself and calls it Dawnbreaker."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    query = {"query": "Who pulled me out of the river? What is the name of his sword?", "budget_tokens": 800}
    memories = (await recall(sidecar, "c", query))["memories"]
    rank = {m["seq_range"][0]: i for i, m in enumerate(memories)}
    # Corvin is the first hit's less common name: his sword outranks the swords said more often
    assert 11 in rank and 31 in rank and all(rank[31] < rank.get(i, 99) for i in (21, 25, 41, 45))
    assert memories[rank[31]]["score_parts"]["graph"] > 0


# Stage: the block shows a long memory by its answering sentences (recall/snippet.py)
LONG_REPLY = (
    '*Elena tosses you an apple.* "Jory lent me the net needle. I\'m supposed to give it back tomorrow, so '
    'remind me." *Elena smiles despite herself, almost gently.* "If anyone asks, we were here all evening. '
    'I\'m fine. Really. Stop hovering." "Mara moved out of the room above the tannery. She\'s staying near '
    'the north quay now." *She props her chin on her hand.* "Give me a minute. I need to think. People keep '
    'asking me about you. I keep saying nothing. It\'s driving them mad."')


def test_a_long_text_is_cut_to_the_sentences_that_share_the_rarer_words():
    shown = focus(LONG_REPLY, {"mara": 2.0, "living": 3.0}, 40)
    assert "north quay" in shown  # the sentence after the one that names her comes with it
    assert "net needle" not in shown and shown.startswith("…") and shown.endswith("…")
    assert count_tokens(shown) < count_tokens(LONG_REPLY) // 2
    assert focus(LONG_REPLY, {"lighthouse": 1.0}, 40) == LONG_REPLY  # nothing shared: the caller cuts it
    assert focus("Short.", {"short": 1.0}, 40) == "Short."
    assert sentences('*She nods.* "Yes. Go." 好的。走吧！') == ['*She nods.*', '"Yes.', 'Go."', '好的。', '走吧！']


def test_a_long_text_is_cut_by_terms_whose_stem_is_not_a_part_of_the_word():
    # The block's weights are the index's terms, and a stem is not always a part of its word: "Jory" is "jori".
    weights = {term: 2.0 for term in tokenize("And Jory?")}
    assert list(weights) == ["jori"]
    shown = focus(LONG_REPLY, weights, 40)
    assert "net needle" in shown and "north quay" not in shown


def test_the_block_tokenizes_each_new_line_about_once_and_never_a_whole_long_memory(monkeypatch):
    # Most of a recall's memories are new to the token counts' cache, each with a snippet made for this
    # question: rendering counts a line as the block holds it (with its line break), so the block's exact
    # count finds it counted, and whether a long text needs a snippet is estimated, not tokenized (these
    # have fewer words than the limit, 85, and more tokens, 125: no word count can tell).
    from stbme import tokens
    from stbme.recall.render import render_block

    def long_memories(tag):
        return [Node(id=f"{tag}{i}", chat_id="c", type="event", seq_from=i,
                     fields={"speaker": "Elena", "summary": LONG_REPLY.replace("Mara", f"Mara{tag}{i}")})
                for i in range(6)]

    weights = {"mara": 2.0, "living": 3.0, "quay": 2.5}
    render_block([], 800, "en", evidence=long_memories("warm"), query_weights=weights, line_tokens=100)
    encoded: list[str] = []
    real = tokens._encoding()

    class Counting:
        def encode(self, text, **kwargs):
            encoded.append(text)
            return real.encode(text, **kwargs)
    monkeypatch.setattr(tokens, "_encoding", lambda: Counting())
    memories = long_memories("new")
    text, shown, used = render_block([], 800, "en", evidence=memories, query_weights=weights, line_tokens=100)
    assert len(shown) == 6 and used == len(real.encode(text)) and "north quay" in text
    assert not any(m.fields["summary"] in t for m in memories for t in encoded)
    longest = max(len(line) for line in text.splitlines())
    # Each of the six lines once, the block's last line again (it has no line break after it), the title.
    assert sum(map(len, encoded)) <= len(text) + 2 * longest, encoded


async def test_the_block_shows_a_long_memory_by_its_answer_and_fits_more(sidecar):
    chat = [{"role": "user", "name": "Alex", "text": f"Turn {i}, tell me about the harbour."} if i % 2 == 0
            else {"role": "assistant", "name": "Elena", "text": LONG_REPLY.replace("Mara", f"Mara{i}")}
            for i in range(30)]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    query = {"query": "Where is Mara7 living now?", "budget_tokens": 300}
    text = (await recall(sidecar, "c", query))["text"]
    assert "Mara7 moved out" in text and "north quay" in text and "net needle" not in text
    await sidecar.settings_service.update_chat("c", {"recall.line_tokens": 0})
    whole = (await recall(sidecar, "c", query))["text"]
    assert "net needle" in whole


# Stage: for a question about now, the memories that say the subject changed (recall/current.py)
def test_a_question_about_now_and_a_sentence_that_states_a_change():
    from stbme.recall.current import asks_about_now, states_a_change
    assert asks_about_now("Where is Mara living now?") and asks_about_now("江离如今的相好是谁？")
    assert asks_about_now("What does Harlan do for work these days?")
    assert not asks_about_now("Where did Mara live in the spring?") and not asks_about_now("江离以前跟谁好过？")
    assert states_a_change("Lovely weather. Mara packed up and left the tannery. Tea?", ["mara"])
    assert states_a_change("“何川不在市图书馆干了，现在去人民医院当录音师了。”", ["何川"])
    assert states_a_change("(OOC: small fix, Corvin's eyes are green, not grey.)", ["corvin"])
    assert not states_a_change("Mara rents the little room above the tannery.", ["mara"])
    assert not states_a_change("Mara is fine. Harlan moved to the quay.", ["mara"])  # the change is someone else's


def test_a_change_is_found_as_whole_words_in_any_case():
    from stbme.recall.current import field_words, names_any, states_a_change
    # The English phrases are grouped by first letter for speed: each must still be found whole, in any case.
    said = ["MARA MOVED OUT OF THE TANNERY.", "Nowadays Mara sleeps till noon.", "Mara is leaving at dawn.",
            "Lately Mara hums.", "Mara took the lamp and put it on the sill.", "It's Mara here, NOT Tobin."]
    assert [t for t in said if not states_a_change(t, ["mara"])] == []
    inside = ["Mara knows the tannery.", "Mara's leftovers are cold.", "Mara fixes nets.", "Mara is nowhere near."]
    assert [t for t in inside if states_a_change(t, ["mara"])] == []
    # A memory's names lists are read for its subject, and so are values that are no list of names.
    assert names_any(field_words({"summary": "Rain.", "participants": ["Mara", "Tobin"]}), ["tobin"])
    assert names_any(field_words({"summary": "Rain.", "where": {"room": ["attic", 3]}}), ["attic"])
    assert not names_any(field_words({"summary": "Rain.", "participants": ["Mara"]}), ["tobin"])


def test_every_change_phrase_holds_a_cue_word():
    # _latest skips a memory whose fields hold no cue (current._CHANGE_CUES) before building its spoken text: a
    # phrase added to the change patterns without its cue would never be found. One instance of each phrase.
    import re

    from stbme.recall import current
    english = ["now", "instead", "any more", "anymore", "no longer", "not any more", "these days", "nowadays",
               "lately", "since", "ever since", "moved", "moving", "move in", "moves out", "moved in", "relocated",
               "quit", "left", "leaving", "gave up", "change", "changed", "switched", "swapped", "replaced",
               "packed up", "walked out", "broke off", "broke it off", "broken up", "split up", "finished",
               "over between", "is over", "took the lamp and put", "found a place", "found a new job", "new home",
               "got a job", "got a new job", "started working", "correction", "fix", "rather", "actually"]
    # Each phrase of the patterns has its instance here: one added without one fails.
    assert [p for p in current._CHANGE_WORDS if not any(re.fullmatch(p, t) for t in english)] == []
    chinese = ["现在", "如今", "目前", "最近", "后来", "改", "换", "搬", "挪", "转行", "不再", "已经", "早就", "不干了", "不在",
               "散了", "断了", "分手", "分开", "分道扬镳", "离开", "走了", "辞了", "不是铁匠，而是", "更正", "修正", "纠正", "其实"]
    assert [p for p in current._CHANGE_ZH_PHRASES if not any(re.fullmatch(p, t) for t in chinese)] == []
    for phrase in english + [", not grey"] + chinese:
        text = f"mara {phrase} today." if phrase.isascii() else f"何川{phrase}了。"
        assert current._says_a_change(text), phrase   # an instance the patterns match ...
        assert current.may_say_a_change(text), phrase  # ... holds a cue
    assert not current.may_say_a_change("mara knows the tannery; she fixes nets. 何川在镖局。")


def test_a_memory_without_a_cue_cannot_say_a_change_once_its_vocatives_are_cut():
    # Cutting a vocative never joins two words or two Chinese characters, so the spoken text holds no cue
    # the fields do not.
    import random

    from stbme.recall.current import _says_a_change, field_words, may_say_a_change, spoken_text

    words = ["Thanks", ",", "Irene", "!", "hey", "Tom", "gave", "up", "no", "w", "now", " ", "  ", "Mara", "moved",
             "不", "是", "不是", "谢谢你", "，", "艾琳", "。", "张先生", "其", "实", "现", "在", "?", "\n", "Bob Smith",
             "…", "any", "more", "not", "grey"]
    rng = random.Random(23)
    found = 0
    for _ in range(4000):
        text = "".join(rng.choice(words) + rng.choice(["", " ", ", "]) for _ in range(rng.randrange(1, 14)))
        fields = {"summary": text, "speaker": rng.choice(["Tom", "Irene", "艾琳", ""]),
                  "addressed": rng.choice([[], ["艾琳"]])}
        if _says_a_change(spoken_text(fields).lower()):
            found += 1
            assert may_say_a_change(field_words(fields)), fields
    assert found > 500   # the words make many changes, so the check above is no empty one


async def test_a_change_names_its_subject_by_a_stem_that_is_not_a_part_of_the_word(sidecar):
    from stbme.recall.current import states_a_change
    subject = tokenize("Dagny")   # ["dagni"]: the term the question's subject is searched by
    said = "Some news. Dagny and Aldric are finished. She's walking out with Pell instead."
    assert states_a_change(said, subject)
    chat = _quiet_chat(60)
    for i in (9, 15, 21):  # the old word, said more often and in the question's own words
        chat[i] = {"role": "assistant", "name": "Isolde", "text": f"Dagny is seeing Aldric, seeing him for months ({i})."}
    chat[41] = {"role": "assistant", "name": "Isolde", "text": said}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    first = (await recall(sidecar, "c", {"query": "Who is Dagny seeing now?", "budget_tokens": 800}))["memories"][0]
    assert first["seq_range"][0] == 41 and first["score_parts"]["latest"] > 0


async def test_the_subject_of_a_question_about_now_is_the_name_it_asks_about_not_its_rarest_word(sidecar):
    from stbme.recall.current import subject_terms
    chat = _quiet_chat(60)
    for i in range(3, 40, 4):  # Dagny is in many messages, so her name is a common term of this chat ...
        chat[i] = {"role": "assistant", "name": "Isolde", "text": f"Dagny sang by the fire on turn {i}."}
    chat[7] = {"role": "assistant", "name": "Isolde", "text": "Dagny is seeing Aldric, and has been for months."}
    chat[50] = {"role": "user", "name": "Kit", "text": "Wait for me at the gate."}   # ... and "wait" a rare one
    chat[43] = {"role": "assistant", "name": "Isolde",
                "text": "Some news. Dagny and Aldric are finished. She's walking out with Pell instead."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    question = "Wait. Who is Dagny seeing these days?"
    lexical = await sidecar.indexes.lexical.get("c")
    assert "dagni" not in subject_terms(lexical, question)   # by rarity alone: "see" and "wait"
    assert subject_terms(lexical, question, ["Dagny"])[0] == "dagni"
    first = (await recall(sidecar, "c", {"query": question, "budget_tokens": 800}))["memories"][0]
    assert first["seq_range"][0] == 43 and first["score_parts"]["latest"] > 0


async def test_a_speakers_own_chatter_with_a_now_is_no_change_of_that_speaker(sidecar):
    chat = _quiet_chat(60)
    chat[21] = {"role": "user", "name": "Alex", "text": "Akib quit the observatory and builds boats instead."}
    for i in (31, 35, 39, 43, 47, 51):  # newer, and each says "now", "actually" or "changed"
        chat[i] = {"role": "assistant", "name": "Akib",
                   "text": f"I'm sitting in my room right now, turn {i}. Actually my phone changed a word again."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    memories = (await recall(sidecar, "c", {"query": "What does Akib do for work these days?",
                                            "budget_tokens": 800}))["memories"]
    latest = [m["seq_range"][0] for m in memories if m["score_parts"].get("latest")]
    assert latest == [21]   # Akib's "Akib: ..." opening names who speaks, not what changed
    assert memories[0]["seq_range"][0] == 21


async def test_for_a_question_about_now_the_last_change_beats_the_older_word(sidecar, monkeypatch):
    chat = _quiet_chat(60)
    for i in (9, 15, 21):  # the old lodging, said more often and in the question's own words
        chat[i] = {"role": "assistant", "name": "Elena",
                   "text": f"Mara is living in the room above the tannery, living there for years ({i})."}
    chat[41] = {"role": "assistant", "name": "Elena",
                "text": "Some news. Mara packed up and left the tannery. She found a place by the north quay."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    query = {"query": "Where is Mara living now?", "budget_tokens": 800}
    first = (await recall(sidecar, "c", query))["memories"][0]
    assert first["seq_range"][0] == 41 and first["score_parts"]["latest"] > 0
    monkeypatch.setattr(tuning, "LATEST_WEIGHT", 0.0)
    first = (await recall(sidecar, "c", query))["memories"][0]
    assert first["seq_range"][0] != 41  # without the stage the older, wordier memory wins


def test_changes_said_in_words_the_recall_set_never_uses():
    from stbme.recall.current import states_a_change
    # Phrasings written apart from the evaluation set's templates: every one states a change.
    changes = [("Mara's been bunking at the lighthouse ever since the fire.", "mara"),
               ("These days Tobin sleeps in the boathouse.", "tobin"),
               ("Harlan got a new job hauling nets for the Drevins.", "harlan"),
               ("He gave up the smithy, Corvin did.", "corvin"),
               ("Osric relocated the ledger to the cellar.", "ledger"),
               ("白露后来搬去了城东。", "白露"), ("周掌柜早就不在镖局了。", "周掌柜"),
               ("阿梨转行当了郎中。", "阿梨"), ("方泽和白露分道扬镳了。", "方泽")]
    assert [t for t, subject in changes if not states_a_change(t, [subject])] == []
    steady = [("Mara rents the room above the tannery.", "mara"), ("Tobin likes the boathouse.", "tobin"),
              ("阿梨在回春堂当学徒。", "阿梨")]
    assert [t for t, subject in steady if states_a_change(t, [subject])] == []


# Stage: a long input is searched by its parts with the chat's rarer words (recall/query.py)
def test_a_long_input_is_searched_by_its_salient_windows_not_its_first_sentence():
    from stbme.recall.query import LONG_WINDOWS, salient_windows

    filler = " ".join(f"We talked about the weather and the road for a while, part {i}." for i in range(30))
    pasted = filler + " Then Corvin said he buried the silver compass under the old mill."
    plan = plan_query(pasted, [], now=WED, lang="en",
                      weights=lambda text: {"corvin": 5.0, "compass": 5.0} if "Corvin" in text else {"weather": 0.1})
    assert 1 < len(plan.parts) <= LONG_WINDOWS
    assert any("silver compass" in part for part in plan.parts)   # the end of the paste is searched too
    assert salient_windows("Short. Input.", None) == ["Short. Input."]


def test_a_long_inputs_last_line_leads_and_the_rest_weighs_less():
    from stbme.recall.query import LONG_WINDOWS, long_input_parts

    history = "\n".join(f"Line {i}: the ferry to the resort island was late and the buffet cost a fortune again."
                         for i in range(12))
    pasted = history + "\n*I look up.* Where did Corvin bury the silver compass?"
    plan = plan_query(pasted, [], now=WED, lang="en", long_rest_weight=0.25, weights=lambda text: {"ferry": 3.0})
    assert plan.parts[-1] == "Where did Corvin bury the silver compass?"   # its own part, its action cut
    assert len(plan.parts) == LONG_WINDOWS and plan.part_weights == [0.25] * (LONG_WINDOWS - 1) + [1.0]
    assert plan_query(pasted, [], now=WED, lang="en").part_weights == [1.0] * LONG_WINDOWS   # no lead: alike
    # A roleplay message that ends with an action: the last line that says something leads.
    acted = history + '\n"Where did Corvin bury the silver compass?"\n*I lean closer, waiting.*\n'
    plan = plan_query(acted, [], now=WED, lang="en", long_rest_weight=0.25)
    assert plan.parts[-1] == "Where did Corvin bury the silver compass?" and plan.part_weights[-2:] == [0.25, 1.0]
    # A last line too short to be searched alone ("Well?") leads nothing: the windows stay alike.
    parts, weights = long_input_parts(history + " Well?", "Well?", None, 0.25)
    assert weights == [1.0] * len(parts)


async def test_a_question_after_pasted_history_finds_its_answer_over_what_the_history_repeats(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Corvin buried the silver compass under the old mill."}
    chat[21] = {"role": "assistant", "name": "Elena",
                "text": "The ferry to the resort island was late, the resort buffet was dear, and island hopping costs."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    history = "\n".join(f"Day {i}: the ferry to the resort island ran late, the buffet at the resort was dear, and "
                         f"island hopping by ferry costs a fortune." for i in range(8))
    query = {"query": history + "\nWhere did Corvin bury the compass?", "budget_tokens": 800}
    assert (await recall(sidecar, "c", query))["memories"][0]["seq_range"][0] == 11
    monkeypatch.setattr(tuning, "LONG_REST_WEIGHT", None)   # every window alike: the history's repeats win
    assert (await recall(sidecar, "c", query))["memories"][0]["seq_range"][0] == 21


# Stage: the messages next to a hit (recall/candidates.py, message_neighbours)
async def test_the_same_speakers_next_message_comes_along_when_that_kind_is_on(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    chat[20] = {"role": "user", "name": "Alex", "text": "I finally took up pottery last spring."}
    chat[21] = {"role": "user", "name": "Alex", "text": "The classes are at the studio on Birch Street."}
    chat[22] = {"role": "assistant", "name": "Elena", "text": "That sounds lovely."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    query = {"query": "When did Alex take up pottery?", "budget_tokens": 800}
    monkeypatch.setattr(tuning, "NEIGHBOUR_KINDS", ("exchange",))
    seqs = {m["seq_range"][0] for m in (await recall(sidecar, "c", query))["memories"]}
    assert 20 in seqs and 21 not in seqs   # the exchange rule: a user's next message starts another exchange
    monkeypatch.setattr(tuning, "NEIGHBOUR_KINDS", ("exchange", "next_same"))
    seqs = {m["seq_range"][0] for m in (await recall(sidecar, "c", query))["memories"]}
    assert {20, 21} <= seqs   # the continuation comes along with its first half


async def test_a_characters_reply_over_two_messages_found_by_its_second_brings_the_first(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    chat[20] = {"role": "user", "name": "Alex", "text": "What happened at the harbour?"}
    chat[21] = {"role": "assistant", "name": "Elena", "text": "Corvin dragged the old net out of the water at dawn."}
    chat[22] = {"role": "assistant", "name": "Elena", "text": "Inside it was a brass compass, still ticking."}
    chat[24] = {"role": "user", "name": "Alex", "text": "Tell me about the brass compass, please."}
    chat[25] = {"role": "assistant", "name": "Elena", "text": "The brass compass? I keep it by the bed now."}
    chat[30] = {"role": "user", "name": "Alex", "text": "I walked to the market in Velmora yesterday."}
    chat[31] = {"role": "user", "name": "Alex", "text": "Got myself a telescope with a crimson lens."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")

    async def recalled(question):
        return {m["seq_range"][0] for m in await _memories(sidecar, question)}

    # The defaults: the first half of Elena's reply comes with the second.
    assert {21, 22} <= await recalled("Where was the brass compass found?")
    # A user's second message is a new exchange: it brings no earlier message of the user's.
    seqs = await recalled("What colour is the lens of the telescope?")
    assert 31 in seqs and 30 not in seqs
    monkeypatch.setattr(tuning, "NEIGHBOUR_KINDS", ("prev_reply", "next_reply", "next_same"))
    seqs = await recalled("Where was the brass compass found?")
    assert 22 in seqs and 21 not in seqs


async def test_a_write_between_recalls_is_seen_by_the_next_one(sidecar):
    from conftest import create_node

    await full_sync(sidecar, "c", _quiet_chat(20))
    await settle(sidecar, "c")
    first = await recall(sidecar, "c", {"query": "the tide", "budget_tokens": 800})
    assert not any(m["type"] == "rule" for m in first["memories"])
    rule = await create_node(sidecar, "c", {"type": "rule", "fields": {"title": "Magic", "constraint": "No magic exists here."}})
    again = await recall(sidecar, "c", {"query": "the tide", "budget_tokens": 800})
    assert rule["id"] in [m["id"] for m in again["memories"]]   # the chat's state was read again


def test_a_read_path_constant_can_be_overridden_for_the_evaluation_only_by_name(monkeypatch):
    import importlib

    monkeypatch.setenv("STBME_RECALL_TUNING", '{"GRAPH_WEIGHT": 0, "NEIGHBOUR_KINDS": ["next_same"]}')
    try:
        module = importlib.reload(tuning)
        assert module.GRAPH_WEIGHT == 0 and module.NEIGHBOUR_KINDS == ("next_same",)
        monkeypatch.setenv("STBME_RECALL_TUNING", '{"NO_SUCH": 1}')
        with pytest.raises(ValueError, match="NO_SUCH"):
            importlib.reload(tuning)
    finally:
        monkeypatch.delenv("STBME_RECALL_TUNING")
        importlib.reload(tuning)


def test_an_input_that_names_nothing_rare_borrows_the_rarest_terms_of_the_turns_before():
    from stbme.recall.query import rare_terms_of_recent

    weights = {"导演": 1.0, "是谁": 0.5, "恋恋": 6.0, "笔记": 4.0, "电影": 0.8, "hobbies": 5.0, "kate": 1.0}
    lookup = lambda text: {t: w for t, w in weights.items() if t in text.lower()}  # noqa: E731
    assert rare_terms_of_recent("导演是谁呢？", ["知道恋恋笔记本这部电影吗？"], lookup)[:2] == ["恋恋", "笔记"]
    assert rare_terms_of_recent("What are Kate's hobbies?", ["Kate said the 电影 was long."], lookup) == []
    plan = plan_query("导演是谁呢？", ["知道恋恋笔记本这部电影吗？"], now=WED, lang="zh", weights=lookup,
                      borrow_terms=True)
    assert plan.borrowed_names and plan.reference.startswith("导演是谁呢")


def test_what_an_input_borrows_in_english_is_the_words_of_the_turns_not_their_stems():
    # The borrowed terms are searched again as text: as stems they would be stemmed twice ("agre" -> "agr").
    from stbme.index.lexical import LexicalIndex
    from stbme.recall.query import rare_terms_of_recent

    index = LexicalIndex()
    for i in range(30):
        index.upsert(f"d{i}", f"Mara: the market on day {i}, the weather and the road")
    index.upsert("deal", "Tomas: we agreed on the wagon's price, a fair one")
    recent = ["Tomas agreed about the wagon."]
    assert rare_terms_of_recent("and what did he say then?", recent, index.term_weights, leans_back=True) == [
        "agreed", "tomas", "wagon"]
    plan = plan_query("and what did he say then?", ["he agreed, at last."], now=WED, lang="en",
                      weights=index.term_weights, borrow_terms=True)
    assert plan.borrowed_names == ["agreed"] and index.search(plan.reference, 1)[0][0] == "deal"


# -- the read path's shortcuts give what the long way gives -------------------------------------------
def test_bm25_scores_after_edits_equal_a_fresh_index_of_the_same_texts():
    # Document counts, length norms and the weights of texts weighed before are kept between searches:
    # every edit must drop them.
    from stbme.index.lexical import LexicalIndex
    texts = {f"n{i}": f"Mara {'lantern ' * (i % 4)}quay harbour {'storm' if i % 3 else 'bakery'} {i}" for i in range(40)}
    edited = LexicalIndex()
    for node_id, text in texts.items():
        edited.upsert(node_id, text)
    queries = ["lantern storm", "bakery quay", "Mara harbour lantern"]
    before = [edited.search(q, 10) for q in queries]
    weighed = [edited.term_weights(q) for q in [*queries, "lantern bakery"]]
    for i in range(0, 40, 3):
        edited.remove(f"n{i}")
        del texts[f"n{i}"]
    edited.upsert("n1", "a new bakery by the quay")
    texts["n1"] = "a new bakery by the quay"
    fresh = LexicalIndex()
    for node_id, text in texts.items():
        fresh.upsert(node_id, text)
    for q in queries:
        assert edited.search(q, 10) == fresh.search(q, 10)
        assert edited.term_weights(q) == fresh.term_weights(q)
        assert edited.score_docs(q, list(texts)) == fresh.score_docs(q, list(texts))
    assert edited.term_weights("lantern bakery") == fresh.term_weights("lantern bakery")
    assert before != [edited.search(q, 10) for q in queries]
    assert weighed != [edited.term_weights(q) for q in [*queries, "lantern bakery"]]


def test_only_turn_sized_texts_have_their_term_weights_remembered():
    # the cache holds texts of a chat turn's size: a 200,000-character input is weighed, never kept
    from stbme.index.lexical import WEIGHTS_TEXT_CHARS, LexicalIndex
    index = LexicalIndex()
    index.upsert("n1", "Mara lit the lantern at the quay")
    long_text = "lantern " * (WEIGHTS_TEXT_CHARS // 8 + 1)
    assert index.term_weights(long_text) == index.term_weights("lantern") and len(long_text) > WEIGHTS_TEXT_CHARS
    assert list(index._weights) == ["lantern"]


def test_last_tokens_of_a_short_text_is_the_text_itself():
    from stbme.tokens import last_tokens
    for text in ("", "Where is the key?", "钥匙藏在哪儿了？", "x" * 64, "word " * 13):
        for limit in (1, 4, 16, 64, 65, 2048):
            expected = text if count_tokens(text) <= limit else None
            got = last_tokens(text, limit)
            assert count_tokens(got) <= limit
            if expected is not None:
                assert got == expected


def test_an_input_that_says_it_refers_back_borrows_even_with_a_rare_term_of_its_own():
    from stbme.recall.query import rare_terms_of_recent

    # 费吗 (a bigram of the question itself) is as rare as the park's name: 它 says the input leans back.
    weights = {"香山": 4.7, "山公": 5.3, "公园": 3.6, "费吗": 6.0, "收费": 3.0}
    lookup = lambda text: {t: w for t, w in weights.items() if t in text}  # noqa: E731
    recent = ["而且香山公园内林木繁茂。"]
    assert rare_terms_of_recent("收费吗？", recent, lookup) == []
    assert rare_terms_of_recent("那它收费吗？", recent, lookup, leans_back=True)[:2] == ["山公", "香山"]
    plan = plan_query("那它收费吗？", recent, now=WED, lang="zh", weights=lookup, borrow_terms=True)
    assert "香山" in plan.borrowed_names and plan.reference.startswith("那它收费吗")


async def test_an_input_that_leans_on_the_last_turn_is_ranked_by_what_it_borrows_not_its_own_words(sidecar,
                                                                                                     monkeypatch):
    chat = _quiet_chat(40)
    chat[11] = {"role": "assistant", "name": "Elena", "text": "Ilse forged the astrolabe for Tomas in Varno."}
    for i in (15, 23):   # the input's own words, about something else
        chat[i] = {"role": "assistant", "name": "Elena", "text": f"Who made the stew for him, and who baked the bread? ({i})"}
    chat[39] = {"role": "assistant", "name": "Elena", "text": "Tomas showed off his brass astrolabe all evening."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    query = {"query": "Who made it for him?", "budget_tokens": 800,
             "recent": [{"role": "assistant", "name": "Elena", "text": chat[39]["text"]}]}
    async def order() -> list[int]:
        return [m["seq_range"][0] for m in (await recall(sidecar, "c", query))["memories"]]

    ranked = await order()
    assert 11 in ranked[:3]   # "it" and "him" lean on the last turn: Tomas's astrolabe
    assert ranked.index(11) < ranked.index(23)
    before = ranked.index(11)
    monkeypatch.setattr(tuning, "LEANING_OWN_KEYWORDS", 1.0)   # its own words ranked as much as what it borrows
    monkeypatch.setattr(tuning, "SUBJECT_WEIGHT", 0.0)   # (and not what was said after Tomas was named)
    ranked = await order()   # the messages with its own words come first
    assert 11 not in ranked or ranked.index(11) > max(before, ranked.index(15), ranked.index(23))


def test_a_block_counted_by_its_lines_and_sentences_has_the_count_of_the_joined_text():
    # render_block counts its block from remembered line counts (tokens.count_joined), and a long text is
    # counted by its remembered sentences: the same number as tokenizing the whole text, whatever the lines
    # and sentences end or start with (punctuation that takes the line break into its token, spaces, breaks,
    # empty lines, CJK, contractions, digits).
    import random

    from stbme.tokens import _encoding, count_joined

    def exact(text):
        return len(_encoding().encode(text, disallowed_special=()))

    pieces = ["Mira", " hid", " the", " key", ".", "!", "?!", "…", "—", ")", "”", "“", '"', "'s", "'ll", " ", "  ",
              "\t", "\r", "\n", "\r\n", "\n\n", "123", " 45", "林晚", "藏起了钥匙。", "！", "- ", "## ", "[msg 12] ",
              "Alex: ", ":", ";", "\u3000", "\xa0", "\u2028", "\x1c", "🙂", "é", "$", "#", ". ", "! ", "’ ", "] ",
              " The storm broke the old bridge at dawn."]
    rng = random.Random(19)
    for _ in range(3000):
        lines = ["".join(rng.choice(pieces) for _ in range(rng.randrange(0, 30))) for _ in range(rng.randrange(1, 8))]
        text = "\n".join(lines)
        assert count_joined(lines) == count_tokens(text) == exact(text), lines
        assert [count_tokens(line) for line in lines] == [exact(line) for line in lines], lines


def test_a_memory_is_skipped_for_a_question_about_now_only_when_its_fields_cannot_name_the_subject():
    # _latest builds a candidate's searched text (vocatives dropped, a regex each) only when names_any says
    # its fields hold a subject term: every word of that text must be in the fields, whatever was dropped.
    import random
    import re

    from stbme.graph.model import node_text
    from stbme.recall.current import field_words, names_any

    words = ["Thanks", ",", "Irene", "!", "hey", "Tom", "Wow", " ", "Keep", "it", "up", ".", "…", "Mara", "moved",
             ":", ";", ")", "?", "Sure", "现在", "何川", "搬走了", "，", "。", "well", "God", "Bob Smith", "1e-05", "\n"]
    rng = random.Random(19)
    for _ in range(3000):
        text = "".join(rng.choice(words) + rng.choice(["", " ", ", "]) for _ in range(rng.randrange(1, 12)))
        fields = {"summary": text, "speaker": rng.choice(["Tom", "Irene", ""]), "title": rng.choice(words)}
        for word in set(re.findall(r"[^\W_]+", node_text(fields).lower())):
            assert names_any(field_words(fields), [word]), (word, fields)
    assert not names_any(field_words({"summary": "Thanks, Irene! Have a great one!", "speaker": "Tom"}), ["harlan"])


def _film_talks() -> list[dict]:
    """Two evenings' talks about two films, each naming its film twice (so it becomes a name anchor) and then its
    director without naming the film again, among small talk."""
    chat = [{"role": "user", "name": "林晓", "text": f"今天的晚饭是第{i}道菜，味道还行。"} if i % 2 == 0 else
            {"role": "assistant", "name": "周然", "text": f"我吃了米饭和青菜，这是第{i}次了。"} for i in range(40)]
    chat[0] = {"role": "user", "name": "林晓", "text": "你看过《模仿游戏》吗？"}
    chat[1] = {"role": "assistant", "name": "周然", "text": "看过，《模仿游戏》讲的是图灵破解密码的故事。"}
    chat[3] = {"role": "assistant", "name": "周然", "text": "导演是莫腾·泰杜姆，他拍得很克制，节奏也稳。"}
    chat[20] = {"role": "user", "name": "林晓", "text": "你看过《盗梦空间》吗？"}
    chat[21] = {"role": "assistant", "name": "周然", "text": "看过，《盗梦空间》里的梦一层套一层。"}
    chat[23] = {"role": "assistant", "name": "周然", "text": "导演是诺兰。"}
    for i in (9, 13, 31, 35):   # a word the chat often says: the input's own words are no rarer than the recent turn's
        chat[i] = {"role": "assistant", "name": "周然", "text": f"好多导演是从我们这座城市出来的，第{i}个了。"}
    return chat


async def _recalled(sidecar, question: str, recent: list[dict]) -> list[dict]:
    return (await recall(sidecar, "c", {"query": question, "recent": recent, "budget_tokens": 800}))["memories"]


def _place(memories: list[dict], seq: int) -> int:
    return next(i for i, m in enumerate(memories) if m["seq_range"][0] == seq)


async def test_an_input_that_names_nobody_finds_what_was_said_while_the_recent_turns_subject_was_talked_about(
        sidecar, monkeypatch):
    await full_sync(sidecar, "c", _film_talks())
    await settle(sidecar, "c")
    recent = [{"role": "user", "name": "林晓", "text": "我昨晚又看了一遍《模仿游戏》，还是很喜欢。"}]
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert _place(memories, 3) < _place(memories, 23)   # the director of the film the last turn named ...
    assert "subject" in memories[_place(memories, 3)]["score_parts"]
    # The other speaker's name, only addressed, is no subject of the input's own ("周然，导演是谁呢？")
    memories = await _recalled(sidecar, "周然，导演是谁呢？", recent)
    assert "subject" in memories[_place(memories, 3)]["score_parts"]
    monkeypatch.setattr(tuning, "SUBJECT_WEIGHT", 0.0)
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert _place(memories, 23) < _place(memories, 3)   # ... which its words alone rank below the shorter other one
    monkeypatch.undo()
    # An input that names a subject itself is searched by it: the recent turn lends it no subject.
    memories = await _recalled(sidecar, "《盗梦空间》的导演是谁呢？", recent)
    assert not any("subject" in m["score_parts"] for m in memories)
    # A main character is in everything: the turn that names only one lends no name. The talk its words echo
    # (message 1, "图灵破解密码的故事") is the subject instead: the director said two messages later is found.
    recent = [{"role": "user", "name": "林晓", "text": "周然昨晚又讲起图灵破解密码的故事，还是很喜欢。"}]
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert "subject" in memories[_place(memories, 3)]["score_parts"]
    assert "subject" not in memories[_place(memories, 23)]["score_parts"]
    monkeypatch.setattr(tuning, "SUBJECT_ECHOES", 0)
    assert not any("subject" in m["score_parts"] for m in await _recalled(sidecar, "导演是谁呢？", recent))
    monkeypatch.undo()
    # The other film's talk, echoed the same way, lends its own director.
    recent = [{"role": "user", "name": "林晓", "text": "梦一层套一层，我昨晚又想起来了。"}]
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert "subject" in memories[_place(memories, 23)]["score_parts"]
    assert "subject" not in memories[_place(memories, 3)]["score_parts"]


async def test_the_passage_the_recent_turns_echo_is_said_before_the_prompts_own_messages(sidecar, monkeypatch):
    # In SillyTavern the recent turns are the chat's last messages, synced like the rest, and they echo themselves
    # best: the passage is the best hit said before the messages still in the prompt.
    recent = [{"role": "user", "name": "林晓", "text": "周然昨晚又讲起图灵破解密码的故事，还是很喜欢。"},
              {"role": "assistant", "name": "周然", "text": "嗯，我也记得。"},
              {"role": "user", "name": "林晓", "text": "好呀。"}]
    await full_sync(sidecar, "c", [*_film_talks(), *recent])
    await settle(sidecar, "c")
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert "subject" in memories[_place(memories, 3)]["score_parts"]
    monkeypatch.setattr(tuning, "SUBJECT_ECHOES", 1)   # one hit: the first said before the prompt, not the turn
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert "subject" in memories[_place(memories, 3)]["score_parts"]
    monkeypatch.setattr(read_path, "ECHO_HITS", 1)   # only the best hit, the turn itself: no passage
    memories = await _recalled(sidecar, "导演是谁呢？", recent)
    assert not any("subject" in m["score_parts"] for m in memories)


async def test_a_subject_is_a_name_as_written_not_the_same_word_in_lowercase(sidecar, monkeypatch):
    chat = _quiet_chat(40)
    for i in (1, 9, 27, 33):   # a word the chat often says: the input's own words are no rarer than the recent turn's
        chat[i] = {"role": "assistant", "name": "Elena", "text": f"The captain of the harbour watch came by ({i})."}
    chat[3] = {"role": "assistant", "name": "Elena", "text": "Marlow sold me the compass at the pier."}
    chat[4] = {"role": "user", "name": "Alex", "text": "Marlow haggles for hours over a single coin."}
    chat[6] = {"role": "user", "name": "Alex", "text": "The captain of his ship was Edric Vane, a hard and quiet man."}
    chat[13] = {"role": "assistant", "name": "Elena", "text": "I gave the letter to Rose below the pier."}
    chat[15] = {"role": "assistant", "name": "Elena", "text": "The nets were mended by Rose all night."}
    chat[17] = {"role": "user", "name": "Alex", "text": "The captain of the ferry was Old Brannock."}
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    recent = [{"role": "assistant", "name": "Elena", "text": "I keep thinking of Marlow and his stall of odd trinkets."}]
    memories = await _recalled(sidecar, "Who was the captain, do you remember?", recent)
    assert "subject" in memories[_place(memories, 6)]["score_parts"]   # said right after Marlow was named
    recent = [{"role": "assistant", "name": "Elena", "text": "I keep thinking a rose was in those trinkets."}]
    monkeypatch.setattr(tuning, "SUBJECT_ECHOES", 0)   # the names alone: the words echo what was said of Rose
    memories = await _recalled(sidecar, "Who was the captain, do you remember?", recent)
    assert not any("subject" in m["score_parts"] for m in memories)   # "rose" is no mention of "Rose"
