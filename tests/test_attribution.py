"""Who said it: a message's memory is searched and embedded as "Speaker: text", vocatives left out, and
memories stored before are brought up to date (migration m012)."""

import sqlite3

import orjson

from stbme.graph.attribution import addressed_names, attributed_text, without_vocatives
from stbme.graph.model import node_text
from stbme.index.lexical import LexicalIndex
from stbme.store.migrations import MIGRATIONS


def test_the_speaker_leads_the_text():
    assert attributed_text("Mel", "I took up pottery last spring.") == "Mel: I took up pottery last spring."


def test_a_name_only_addressed_is_left_out():
    assert without_vocatives("Thanks, Irene! Have a great one!") == "Thanks! Have a great one!"
    assert without_vocatives("Wow, Tom! Keep it up!") == "Wow! Keep it up!"
    assert without_vocatives("Hey Irene, how was Paris?") == "Hey, how was Paris?"
    assert without_vocatives("Irene, did you see it?") == "did you see it?"
    assert without_vocatives("That is great, Irene.") == "That is great."


def test_the_quick_check_lets_every_vocative_through():
    """A text the quick check turns away must have nothing the full pattern finds: checked on roleplay
    messages of both languages and on the texts above with every cut of their ends."""
    import sys
    from pathlib import Path

    from stbme.graph.attribution import _MAY_HAVE_VOCATIVE, _VOCATIVE

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from _roleplay_data import RoleplayChat

    chat = RoleplayChat()
    examples = ["Thanks, Irene! Have a great one!", "Wow, Tom! Keep it up!", "Hey Irene, how was Paris?",
                "Irene, did you see it?", "That is great, Irene.", "Good night, Mary Ann", "hey Tom", "Bye, Jo~",
                "Cheers, Ada)", "Oh, Li…", "Look, Sam: there", "Yes, Kim;", "Irene, \n", "Mel,\tthen"]
    texts = [chat.message(i).text for i in range(600)]
    texts += [e[:cut] for e in examples for cut in range(1, len(e) + 1)]
    turned_away = [t for t in texts if not _MAY_HAVE_VOCATIVE.search(t)]
    assert len(turned_away) > len(texts) / 3                     # it saves work on most texts ...
    assert [t for t in turned_away if _VOCATIVE.search(t)] == []  # ... and never hides a vocative
    assert all(_VOCATIVE.search(e) for e in examples[:12])


def test_phrases_grouped_by_first_letter_match_where_the_flat_alternation_does():
    """alternation() only regroups: every match, its span and its groups, are the flat alternation's. Phrases
    that share a start ("hi", "hiya", "hey"), in either case and inside a larger pattern."""
    import re

    import pytest

    from stbme.alternation import alternation

    phrases = ["hi", "hiya", "hey", "thank you", "thanks", "no", "no longer", r"move[sd]? (?:in|out)", "现在", "现"]
    texts = ["Hiya, Tom! hi there, no longer here; NO. thanks Ada, Thank You Bo", "He moved in, moves out, move in.",
             "history hide nothing knows", "他现在搬走了，现", "hey", ""]
    for flags in (0, re.I):
        for shape in (r"{}", r"(?P<g>{}),?\s*(?P<name>[A-Z]\w*)?"):
            grouped = re.compile(shape.format(alternation(phrases)), flags)
            flat = re.compile(shape.format("(?:" + "|".join(phrases) + ")"), flags)
            for text in texts:
                assert [(m.span(), m.groups()) for m in grouped.finditer(text)] == \
                       [(m.span(), m.groups()) for m in flat.finditer(text)], (shape, flags, text)
    for unfit in ("(?:a|b)c", "s?he", ""):
        with pytest.raises(ValueError, match="must start with a letter"):
            alternation([unfit])


def test_a_name_paired_with_another_across_a_comma_is_no_address():
    assert without_vocatives("We went to Tulum, Mexico.") == "We went to Tulum, Mexico."
    assert without_vocatives("Paris, France is lovely.") == "Paris, France is lovely."
    assert without_vocatives("Tampa, Fort Lauderdale, and Orlando.") == "Tampa, Fort Lauderdale, and Orlando."
    # a sentence's first word is capitalised anyway: the name after it is the one addressed
    assert without_vocatives("Absolutely, Liza! It was fun.") == "Absolutely! It was fun."
    assert without_vocatives("Tom, I'm here.") == "I'm here."


def test_a_name_the_text_is_about_stays():
    assert without_vocatives("I met Irene at the park, she was great.") == "I met Irene at the park, she was great."
    assert without_vocatives("Irene moved to Paris last year.") == "Irene moved to Paris last year."
    assert without_vocatives("So, I went to Paris.") == "So, I went to Paris."   # not a name
    assert without_vocatives("Thanks, God!") == "Thanks, God!"
    assert without_vocatives("It is Warner Bros. Entertainment, Inc.") == "It is Warner Bros. Entertainment, Inc."


def test_a_chinese_name_only_addressed_is_left_out():
    assert without_vocatives("谢谢你，艾琳！今天真开心。") == "谢谢你！今天真开心。"
    assert without_vocatives("嗯，谢谢你，林晚！") == "嗯，谢谢你！"
    assert without_vocatives("晚安，小雪。") == "晚安。"
    assert without_vocatives("你好啊，小雪～") == "你好啊～"
    assert without_vocatives("再见，艾琳，明天见！") == "再见，明天见！"
    assert without_vocatives("谢谢你，凯莉·华！") == "谢谢你！"
    assert without_vocatives("张先生，请坐。") == "请坐。"
    assert without_vocatives("请坐，张先生。") == "请坐。"
    assert without_vocatives("“王队长，我们到了。”他说。") == "“我们到了。”他说。"
    assert without_vocatives("Thanks, Irene! 谢谢你，艾琳！") == "Thanks! 谢谢你！"
    assert without_vocatives("你好，小雪！ She said, *smiling*") == "你好！ She said, *smiling*"   # only that comma goes
    # traditional characters, as Taiwan and Hong Kong write
    assert without_vocatives("謝謝你，實初哥哥，待我這樣好。") == "謝謝你，待我這樣好。"
    assert without_vocatives("甄大人，請坐。") == "請坐。"


def test_a_chinese_text_that_addresses_nobody_stays():
    for text in ("你好，我是李华。", "抱歉，不知道。", "你好，请问你是？", "我说了再见，然后走了。",
                 "艾琳，你来了？",            # a bare name at a sentence's start may be its topic
                 "灰石城，位于北方。", "我和张先生一起去了灰石城。", "今天，我们去了市场。", "對不起，沒有了。"):
        assert without_vocatives(text) == text
    assert without_vocatives("谢谢你，艾琳！", speaker="艾琳") == "谢谢你，艾琳！"   # her own name


def test_a_chat_name_standing_alone_is_addressed():
    names = {"艾琳", "小明", "Alex", "艾"}
    cases = {"艾琳，你来了？": "你来了？",
             "好了，艾琳，我们走吧。": "好了，我们走吧。",
             "你来了，艾琳。": "你来了。",
             "*我推开门。*“艾琳，你在吗？”": "*我推开门。*“你在吗？”",
             "艾琳！你去哪？": "你去哪？",
             "艾琳——等等！": "等等！",
             "你好，艾琳……": "你好……",
             "艾琳，小雪，过来。": "小雪，过来。"}
    for text, said in cases.items():
        assert addressed_names(text, "小明", names) == ["艾琳"], text
        assert without_vocatives(text, "小明", ["艾琳"]) == said
        assert attributed_text("小明", text, ("艾琳",)) == f"小明: {said}"
    # Not alone: the topic or part of a sentence; a longer name; no name of the chat; the speaker's own name.
    for text in ("我喜欢艾琳，她很好。", "艾琳说，她喜欢猫。", "昨天艾琳，小雪和我去了。", "她叫艾琳娜，很漂亮。", "“艾琳”是她的名字。"):
        assert addressed_names(text, "小明", names) == [], text
        assert without_vocatives(text, "小明", ["艾琳"]) == text
    assert addressed_names("汪峰，1971年出生于北京。", "小明", names) == []
    assert addressed_names("艾琳，你来了？", "艾琳", names) == []
    assert without_vocatives("艾琳，你来了？", "艾琳", ["艾琳"]) == "艾琳，你来了？"
    assert addressed_names("Alex，你来了？艾，走吧。", "小明", names) == []   # Latin names and one character: not taken


def test_a_message_memory_is_not_found_by_the_chat_name_it_only_addresses():
    index = LexicalIndex()
    index.upsert("asks", node_text({"summary": "艾琳，你今天去哪里了？", "speaker": "小明", "addressed": ["艾琳"]}))
    index.upsert("about", node_text({"summary": "我今天去了集市，买了苹果。", "speaker": "艾琳"}))
    assert [n for n, _ in index.search("艾琳今天去了哪里？", 5)][:1] == ["about"]
    assert node_text({"summary": "艾琳，你今天去哪里了？", "speaker": "小明", "addressed": ["艾琳"]}) == "小明: 你今天去哪里了？"


def test_the_addressed_names_are_no_field_to_show_or_ask_for():
    from stbme.graph.model import Node
    from stbme.pipeline.extract import ANSWER_SCHEMA, SCHEMA_APPENDIX
    from stbme.pipeline.prompting import memory_line
    from stbme.recall.render import render_block

    node = Node(id="n1", chat_id="c", type="event", fields={"summary": "艾琳，你来了？", "speaker": "小明",
                                                            "addressed": ["艾琳"]}, seq_from=3, seq_to=3)
    assert "addressed" not in memory_line("M1", node) and "addressed" not in SCHEMA_APPENDIX
    assert "addressed" not in orjson.dumps(ANSWER_SCHEMA).decode()
    block, _, _ = render_block([], 500, "zh", evidence=[node])
    assert "小明: 艾琳，你来了？" in block and "addressed" not in block


def test_the_chinese_quick_check_lets_every_vocative_through():
    """As the Latin quick check above: what it turns away has no vocative the full pattern finds."""
    import sys
    from pathlib import Path

    from stbme.graph.attribution import _CJK_VOCATIVE, _MAY_HAVE_CJK_VOCATIVE

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from _roleplay_data import RoleplayChat

    chat = RoleplayChat()
    examples = ["谢谢你，艾琳！", "晚安，小雪。", "张先生，请坐。", "请坐，张先生。", "你好啊，小雪～", "谢谢你，凯莉·华！",
                "“王队长，我们到了。”", "恭喜你，阿明！", "辛苦了，李老师。"]
    texts = [chat.message(i).text for i in range(600)]
    texts += [e[:cut] for e in examples for cut in range(1, len(e) + 1)]
    turned_away = [t for t in texts if not _MAY_HAVE_CJK_VOCATIVE.search(t)]
    assert len(turned_away) > len(texts) / 2
    assert [t for t in turned_away if _CJK_VOCATIVE.search(t)] == []
    assert all(_CJK_VOCATIVE.search(e) for e in examples)


def test_a_message_memory_is_indexed_by_its_speaker_and_not_the_names_it_addresses():
    fields = {"summary": "Thanks, Irene! Have a great one!", "speaker": "Tom", "participants": ["Tom", "Irene"]}
    assert node_text(fields) == "Tom: Thanks! Have a great one!"
    index = LexicalIndex()
    index.upsert("thanks", node_text(fields))
    index.upsert("about", node_text({"summary": "I started pottery classes.", "speaker": "Irene",
                                     "participants": ["Irene"]}))
    # "Irene" finds what Irene said about herself, not the message that only thanks her.
    assert [n for n, _ in index.search("What did Irene start?", 5)] == ["about"]


def test_a_chinese_message_memory_is_not_found_by_the_name_it_only_addresses():
    index = LexicalIndex()
    index.upsert("thanks", node_text({"summary": "谢谢你，艾琳！祝你玩得开心！", "speaker": "林晚"}))
    index.upsert("about", node_text({"summary": "我开始学陶艺了。", "speaker": "艾琳"}))
    assert [n for n, _ in index.search("艾琳开始学什么了？", 5)] == ["about"]


def test_a_memory_without_a_speaker_reads_as_before():
    assert node_text({"summary": "The bridge fell.", "participants": ["Mara"]}) == "The bridge fell. | participants: Mara"


def _migrated_before(migration: str) -> sqlite3.Connection:
    """A database with every migration before `migration` and chat 'c'."""
    conn = sqlite3.connect(":memory:")
    for name, fn in MIGRATIONS:
        if name == migration:
            break
        fn(conn)
    conn.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('c', 0, 0)")
    return conn


def _embedders_after(migration: str, rows: list[tuple[str, str, dict]]) -> dict:
    """Nodes (id, type, fields) embedded by 'local' in a database just before `migration`, then run it: each
    node's embedder (None: sent back to be embedded)."""
    conn = _migrated_before(migration)
    for node_id, type_, fields in rows:
        conn.execute("INSERT INTO nodes (id, chat_id, type, fields, embedding, embedder, created_at, updated_at)"
                     " VALUES (?, 'c', ?, ?, x'00', 'local', 0, 0)", (node_id, type_, orjson.dumps(fields).decode()))
    dict(MIGRATIONS)[migration](conn)
    return dict(conn.execute("SELECT id, embedder FROM nodes"))


def test_migration_m012_sends_message_memories_back_to_be_embedded():
    rows = [("said", "event", {"summary": "hi", "speaker": "Tom"}), ("made", "event", {"summary": "x"}),
            ("name", "character", {"name": "Tom"})]
    embedders = _embedders_after("m012_speaker_text", rows)
    assert embedders == {"said": None, "made": "local", "name": "local"}


def test_migration_m016_sends_memories_with_a_name_pair_back_to_be_embedded():
    rows = [("pair", {"summary": "We went to Tulum, Mexico.", "speaker": "Elise"}),
            ("plain", {"summary": "That is great, Irene!", "speaker": "Tom"}),
            ("no speaker", {"summary": "Tulum, Mexico."})]
    embedders = _embedders_after("m016_name_pairs_are_not_addressed", [(n, "event", f) for n, f in rows])
    assert embedders == {"pair": None, "plain": "local", "no speaker": "local"}


def test_migration_m020_keeps_the_chat_names_a_memory_addresses():
    conn = _migrated_before("m020_chat_names_addressed")
    conn.executemany("INSERT INTO messages (chat_id, idx, hash, chain, role, name, text) VALUES ('c', ?, '', '', ?, ?, '')",
                     [(0, "assistant", "艾琳"), (1, "user", "小明"), (2, "assistant", "艾琳"), (3, "user", "白芷")])
    rows = [("asks", 1, {"summary": "艾琳，你来了？", "speaker": "小明"}),
            ("later", 2, {"summary": "白芷，你好。", "speaker": "艾琳"}),           # 白芷 speaks only later
            ("topic", 1, {"summary": "我喜欢艾琳，她很好。", "speaker": "小明"}),
            ("own", 0, {"summary": "艾琳，就是我。", "speaker": "艾琳"}),
            ("both", 3, {"summary": "好了，艾琳，小明，走吧！", "speaker": "白芷"}),
            ("no speaker", 1, {"summary": "艾琳，你来了？"})]
    for node_id, seq, fields in rows:
        conn.execute("INSERT INTO nodes (id, chat_id, type, fields, embedding, embedder, seq_from, seq_to, created_at,"
                     " updated_at) VALUES (?, 'c', 'event', ?, x'00', 'local', ?, ?, 0, 0)",
                     (node_id, orjson.dumps(fields).decode(), seq, seq))
    dict(MIGRATIONS)["m020_chat_names_addressed"](conn)
    after = {r[0]: (orjson.loads(r[1]).get("addressed"), r[2]) for r in conn.execute("SELECT id, fields, embedder FROM nodes")}
    assert after == {"asks": (["艾琳"], None), "later": (None, "local"), "topic": (None, "local"), "own": (None, "local"),
                     "both": (["小明", "艾琳"], None), "no speaker": (None, "local")}
    assert orjson.loads(conn.execute("SELECT fields FROM nodes WHERE id = 'asks'").fetchone()[0])["summary"] == "艾琳，你来了？"


def test_migration_m019_sends_memories_that_may_address_someone_in_chinese_back_to_be_embedded():
    rows = [("greets", {"summary": "谢谢你，艾琳！", "speaker": "林晚"}),
            ("titled", {"summary": "请坐，张先生。", "speaker": "林晚"}),
            ("plain", {"summary": "我们明天去灰石城。", "speaker": "林晚"}),
            ("no comma", {"summary": "谢谢你艾琳", "speaker": "林晚"}),
            ("company", {"summary": "I work for Acme. Initech, Inc. pays more.", "speaker": "Tom"}),
            ("no speaker", {"summary": "谢谢你，艾琳！"})]
    embedders = _embedders_after("m019_chinese_vocatives", [(n, "event", f) for n, f in rows])
    assert embedders == {"greets": None, "titled": None, "plain": "local", "no comma": "local", "company": None,
                         "no speaker": "local"}


def _remembered(batch: int) -> list[dict]:
    """A Chinese chat's message memories, made by the heuristic write path `batch` messages at a time."""
    from stbme.graph.changes import ChangeSet
    from stbme.pipeline.heuristic import remember_messages
    from stbme.pipeline.sync import Message
    from stbme.store.migrations import migrate

    said = [("艾琳", "你好，小明，我是新来的。"), ("小明", "艾琳，欢迎你！"), ("艾琳", "谢谢，小明。白芷，你也来了？"),
            ("白芷", "是的，艾琳，我刚到。"), ("小明", "好了，白芷，艾琳，我们走吧。")]
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.row_factory = sqlite3.Row
    migrate(conn)
    conn.execute("INSERT INTO chats (chat_id, created_at, updated_at) VALUES ('c', 0, 0)")
    conn.executemany("INSERT INTO messages (chat_id, idx, hash, chain, role, name, text) VALUES ('c', ?, ?, '', ?, ?, ?)",
                     [(i, str(i), "user" if name == "小明" else "assistant", name, text)
                      for i, (name, text) in enumerate(said)])
    messages = [Message(index=i, role="user", name=name, text=text) for i, (name, text) in enumerate(said)]
    for start in range(0, len(messages), batch):
        remember_messages(ChangeSet(conn, "c", reason="test"), messages[start:start + batch], chunk_tokens=400)
    return [orjson.loads(r[0]) for r in conn.execute("SELECT fields FROM nodes WHERE type = 'event' ORDER BY seq_from")]


def test_a_message_addresses_the_names_spoken_up_to_it_whatever_the_batches():
    whole = _remembered(len("12345"))
    # 小明 has not spoken by message 0, nor 白芷 by message 2: their names there are no one's yet
    assert [f.get("addressed") for f in whole] == [None, ["艾琳"], ["小明"], ["艾琳"], ["白芷", "艾琳"]]
    assert node_text(whole[4]) == "小明: 好了，我们走吧。"
    assert _remembered(1) == _remembered(2) == whole
