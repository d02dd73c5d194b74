"""Recall: lexical search (CJK-aware), fusion and gates, pinned first, the token budget, rendering."""

from __future__ import annotations

import asyncio
import datetime
import json

import random

import pytest

from conftest import SILVER_KEY_CHAT, HashEmbedder, create_node, full_sync, recall, settle, wait_for
from stbme.api.keys import services_key
from stbme.graph.model import Node
from stbme.pipeline.heuristic import candidate_names, clean_text, split_chunks, words_starting_sentences
from stbme.index.lexical import (SAVE_VERSION, LexicalCache, LexicalIndex, odd_stems, tokenize,
                                 words_of_terms)
from stbme.language import detect_language
from stbme.recall.render import render_block
from stbme.services import Services
from stbme.tokens import count_tokens, truncate_to_tokens
from stbme.usecases.recall import RecallRequest


def test_tokenize_latin_and_cjk():
    assert tokenize("The Keys of Greywater!") == ["key", "greywat"]
    assert tokenize("艾琳把钥匙") == ["艾琳", "琳把", "把钥", "钥匙"]
    assert "4417" in tokenize("code 4417")
    # Scripts switching mid-word, a lone CJK character (kept unless a stop: 我, 的), an underscore between words
    assert tokenize("Kate说了3次：我 的 東京タワー_Greywater") == ["kate", "说了", "3", "次", "東京", "京タ", "タワ", "ワー",
                                                          "greywat"]


def test_a_texts_terms_are_its_parts_and_its_odd_stems():
    # The snippet and the latest-word stage test a text's terms this way instead of tokenizing it.
    text = ("Jory was happy; the early skies, the dying embers. 周掌柜 walked 3 miles to the possibility, only"
            " once.")   # "only" is a stopword ("onli"): no term, so no odd stem either
    terms, folded, odd = set(tokenize(text)), text.lower(), odd_stems(text)
    assert {"jori", "happi", "earli", "sky", "die", "possibl"} <= odd <= terms
    assert all(term in folded or term in odd for term in terms)
    assert not any(stem in folded for stem in odd)
    assert "onli" not in odd
    assert odd_stems("The keys walked home.") == frozenset()


def test_a_search_without_common_terms_finds_only_what_the_rarer_words_find():
    index = LexicalIndex()
    for i in range(20):   # "Elena" opens every memory, as a speaker's name does
        index.upsert(f"n{i}", f"Elena: the tide was calm on turn {i}." if i != 7 else "Elena: I hid the compass.")
    assert len(index.search("Elena compass", 20)) == 20
    assert [n for n, _ in index.search("Elena compass", 20, common=False)] == ["n7"]
    assert index.search("Elena", 20, common=False) == []


def test_english_words_are_found_in_their_other_forms():
    index = LexicalIndex()
    for i in range(30):
        index.upsert(f"d{i}", f"Elise: we talked about the weather on day {i} and the market stalls")
    index.upsert("walmart", "Elise: now I'm at Walmart buying water and breakfast bars")
    index.upsert("yoga", "Paola: today I've been exploring some new yoga poses and sequences")
    assert index.search("What did Elise buy?", 3)[0][0] == "walmart"
    assert index.search("What did Paola explore?", 3)[0][0] == "yoga"
    assert index.search("bought", 3) == []   # an irregular form is another word


def test_a_word_is_stemmed_once_and_a_term_is_searched_again_as_its_word():
    # Stemmed to a fixed point, "Elise" became "eli" (Eli's term) and "early" "ear": a stem stemmed again
    # joins words the first pass kept apart.
    assert tokenize("Elise Eli early ear agreed") == ["elis", "eli", "earli", "ear", "agre"]
    index = LexicalIndex()
    for i in range(30):
        index.upsert(f"d{i}", f"Mara: the market stalls on day {i}, and the weather")
    index.upsert("eli", "Eli: I fixed the cart wheel at dawn")
    index.upsert("elise", "Elise: I sold the mare at the fair")
    assert [n for n, _ in index.search("What did Elise do?", 5)] == ["elise"]
    # What a term is searched as again (what an input borrows from the recent turns) is the word it came from,
    # which gives the same term: "agre" itself would be stemmed to "agr" and miss.
    index.upsert("deal", "Elise: we agreed on the price of the wagon")
    words = words_of_terms(["agre", "earli", "艾琳", "ear"], ["Hi! We agreed, and it was early.", "艾琳笑了 agreeing"])
    assert words == {"agre": "agreed", "earli": "early", "艾琳": "艾琳"}   # none says "ear"
    for term, word in words.items():
        assert tokenize(word) == [term], (term, word)
    assert index.search(words["agre"], 3)[0][0] == "deal"
    assert index.search("agre", 3) == []
    agreed = index.score_docs("agreed", ["deal"])["deal"]
    assert agreed > 0 and index.score_terms(["agre"], ["deal", "eli"]) == {"deal": agreed, "eli": 0.0}


def test_bm25_prefers_rare_terms_and_handles_removal():
    index = LexicalIndex()
    for i in range(50):
        index.upsert(f"d{i}", "the party walked along the road talking")
    index.upsert("rare", "the party found the obsidian key")
    assert index.search("obsidian", 5)[0][0] == "rare"
    index.remove("rare")
    assert index.search("obsidian", 5) == []
    index.upsert("zh", "艾琳把钥匙藏在灯塔下面")
    assert index.search("钥匙在哪里", 3)[0][0] == "zh"


def test_bm25_scores_a_term_of_a_tenth_of_the_memories_without_length_normalisation(monkeypatch):
    """A speaker's name starts half a two-person chat's memories ("Elise: ..."): a question naming her must
    not prefer her shortest messages. A rarer term keeps BM25's length normalisation."""
    from stbme.index import lexical

    walk = "we walked along the harbour road past the fish market and the lighthouse keeper's old cottage"
    index = LexicalIndex()
    for i in range(20):
        index.upsert(f"e{i:02}", f"Elise: {walk} {i}")
        index.upsert(f"k{i:02}", f"Kate: {walk} {i}")
    index.upsert("short", "Elise: Hello! Any date updates?")
    index.upsert("long", f"Elise: I would love to invest in abstract art later on, once {walk}")
    index.upsert("brief", "Kate: invest wisely")
    by_elise = dict(index.search("Elise", 50))
    assert len(by_elise) == 22 and len(set(by_elise.values())) == 1   # her every message alike
    assert [n for n, _ in index.search("Elise", 3)] == ["e00", "e01", "e02"]   # ties by node id
    # Above the cut, then the tied ones it needs, by node id.
    assert [n for n, _ in index.search("Elise invest", 4)] == ["brief", "long", "e00", "e01"]
    invest = dict(index.search("invest", 5))
    assert invest["brief"] > invest["long"]   # a rare term: the shorter text is more about it
    monkeypatch.setattr(lexical, "COMMON_TERM_SHARE", 0.0)
    assert index.search("Elise", 1)[0][0] == "short"   # what it was: her shortest message first


def test_lexical_compaction_keeps_results():
    index = LexicalIndex()
    for i in range(3000):
        index.upsert(f"d{i}", f"memory number {i} about topic{i % 7}")
    for i in range(2500):
        index.remove(f"d{i}")
    assert len(index) == 500 and len(index.node_of) < 1500  # removed slots were compacted away
    hits = index.search("topic3", 1000)
    assert hits and all(int(n[1:]) >= 2500 and int(n[1:]) % 7 == 3 for n, _ in hits)


def test_a_saved_lexical_index_loads_with_the_same_scores_and_refuses_a_damaged_file():
    """The saved postings are raw 4-byte slots and counts: a loaded index scores as the one saved, removed
    slots stay removed, it takes new texts after, and a cut, mislabelled or out-of-range file is refused."""
    rng = random.Random(7)
    words = ["lantern", "harbour", "Mira", "钥匙", "灯塔", "storm", "obsidian", "key", "ferry", "salt"]
    index = LexicalIndex()
    for i in range(1200):
        index.upsert(f"d{i}", " ".join(rng.choice(words) for _ in range(rng.randint(1, 30))) + f" w{i}", rev=i)
    for i in range(0, 1200, 3):
        index.remove(f"d{i}")
    index.upsert("d1", "Mira lost the obsidian key at the ferry", rev=999)   # a re-indexed memory: a dead slot
    data = index.to_bytes()
    loaded = LexicalIndex.from_bytes(data)
    for query in ("obsidian key", "灯塔的钥匙", "Mira storm", "w7", "nothing here"):
        assert loaded.search(query, 50) == index.search(query, 50)
    assert loaded.rev_of == index.rev_of and len(loaded) == len(index) and loaded.search("w3", 5) == []
    loaded.upsert("new", "a brand new lantern", rev=1)
    assert [n for n, _ in loaded.search("brand", 3)] == ["new"]
    for i in range(1200):
        loaded.remove(f"d{i}")                       # removing most slots compacts the loaded postings
    assert [n for n, _ in loaded.search("lantern", 10)] == ["new"] and len(loaded.node_of) < 1000   # compacted
    for bad in (data[:-4], b"{" + data[1:], data.replace(b'"version":%d' % SAVE_VERSION, b'"version":99', 1)):
        with pytest.raises(ValueError):
            LexicalIndex.from_bytes(bad)
    header_end = data.index(b"}", len(b"STBMELEX") + 8) + 1
    wrong_slot = data[:header_end] + (10**6).to_bytes(4, "little") + data[header_end + 4:]
    with pytest.raises(ValueError, match="slot"):
        LexicalIndex.from_bytes(wrong_slot)


def test_truncate_to_tokens_never_over():
    text = "长" * 500 + " word " * 300
    for budget in (1, 5, 17, 100):
        assert count_tokens(truncate_to_tokens(text, budget)) <= budget


@pytest.mark.parametrize("budget", [50, 80, 150, 400, 2000])
def test_render_block_never_exceeds_budget(budget):
    rng = random.Random(budget)
    nodes = [Node(id=f"n{i}", chat_id="c", type=rng.choice(["event", "character", "rule"]),
                  fields={"summary": " ".join(rng.choice(["storm", "钥匙", "lantern", "🐉", "долг"])
                                              for _ in range(rng.randint(3, 120))),
                          "name": f"N{i}", "title": "t", "constraint": "never lie"},
                  seq_from=i, seq_to=i) for i in range(40)]
    text, placed, _ = render_block(nodes, budget, "en")
    assert count_tokens(text) <= budget
    assert (text == "") == (placed == [])


def test_render_sections_and_language():
    nodes = [Node(id="a", chat_id="c", type="rule", fields={"title": "No magic", "constraint": "Magic is gone"}),
             Node(id="b", chat_id="c", type="event", fields={"summary": "艾琳找到了钥匙", "speaker": "艾琳"},
                  seq_from=3, seq_to=3)]
    text, _, _ = render_block(nodes, 500, "zh")
    assert "## 规则与约束" in text and "## 过往事件" in text and "[楼 3] 艾琳: 艾琳找到了钥匙" in text
    assert detect_language(["艾琳找到了钥匙", "好的"]) == "zh"
    assert detect_language(["Elena found the key"]) == "en"


def test_heuristic_helpers():
    assert clean_text("<think>secret plan</think>Hello   there") == "Hello there"
    names = candidate_names("Elena met Marcus at dawn. \"Yes,\" she said. 我们在「灯塔」见面。")
    assert {"Elena", "Marcus", "灯塔"} <= names and "Yes" not in names
    names = candidate_names("Dorian's sword gleamed. I'm fine. It's late. Don't go. That's Elowen's. We'll see. "
                            "You're right. They've gone. Isn't it? O'Brien and Jean-Luc came.")
    assert names == {"Dorian", "Elowen", "O'Brien", "Jean-Luc"}  # contractions are no names; a possessive is its name
    # A transliterated name is its interpunct-joined parts, without the words around it; a quoted title keeps its dot.
    assert candidate_names("导演是莫腾·泰杜姆，知道他吗？") == {"莫腾·泰杜姆"}
    assert candidate_names("《安娜·卡列尼娜》和《色·戒》都改编自小说，主演有凯拉·奈特莉。") == {"安娜·卡列尼娜", "色·戒", "凯拉·奈特莉"}
    assert candidate_names("你知道大卫·芬奇吗？还有斯坦·李和阿米尔·汗。") == {"大卫·芬奇", "斯坦·李", "阿米尔·汗"}
    assert candidate_names("时间·地点都定了") == set()   # ordinary words joined by a dot are no name
    assert candidate_names("我觉得凯莉·华演得好，彼得·潘也是。") == {"凯莉·华", "彼得·潘"}   # 得 ends names, begins none
    # A titled name is no pronoun, particle or place word with a title after it, nor the start of another word.
    assert candidate_names("张先生去了灰石城，我见到了李小姐。") == {"张先生", "灰石城", "李小姐"}
    assert candidate_names("这家公司是有限公司，我回公司时林晚在城隍庙等，家在北京市东城区，移动城堡。") == set()
    # A capital that only starts sentences may be a word; only a common word is suspected, and Mr. ends no sentence.
    text = 'Something stirs. "Tell me," Mr. Vane said. *Wow.* Marlow left. Alice came, and Elena met Alice.'
    assert {"Something", "Tell", "Wow", "Vane", "Marlow", "Alice", "Elena"} <= candidate_names(text)
    assert words_starting_sentences(text) == {"Something", "Tell", "Wow"}
    chunks = split_chunks("One sentence here. " * 200, 50)
    assert len(chunks) > 3 and all(count_tokens(c) <= 60 for c in chunks)


async def test_a_word_that_starts_sentences_is_no_anchor_and_a_name_that_does_is_one(sidecar):
    lines = ['"Something is wrong with the lamps." Marlow sighed.', "Marlow lit them again. Something moved outside.",
             "Wow. Marlow and Alice trimmed the wicks.", "Wow, the harbour is dark tonight.",
             "Alice found the oil. Something smelled of smoke.", "Alice waited by the door."]
    chat = [{"role": ("user", "assistant")[i % 2], "name": ("Alex", "Elena")[i % 2], "text": t}
            for i, t in enumerate(lines)]
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    anchors = await sidecar.store.read(lambda conn: {json.loads(f)["name"] for (f,) in conn.execute(
        "SELECT fields FROM nodes WHERE chat_id = 'c' AND type = 'entity'")})
    # Marlow only begins sentences too, but is no common word; Alice is one, but is named mid-sentence once
    # ("Marlow and Alice"); Something and Wow are common words that only begin sentences.
    assert anchors == {"Marlow", "Alice"}


async def _chat(sidecar, facts: dict[int, str], n=20):
    chat = []
    for i in range(n):
        chat.append({"role": "user", "name": "Alex", "text": facts.get(2 * i, f"We keep walking, day {i}.")})
        chat.append({"role": "assistant", "name": "Elena",
                     "text": facts.get(2 * i + 1, f"The road goes on and on, day {i}.")})
    await full_sync(sidecar, "c", chat)
    await settle(sidecar, "c")
    return chat


async def test_recall_finds_the_fact_and_reports_scores(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417, remember it."})
    result = await recall(sidecar, "c", {"query": "what is the vault code", "budget_tokens": 200})
    assert "4417" in result["text"]
    top = result["memories"][0]
    assert top["type"] == "event" and top["seq_range"] == [4, 4]
    assert set(top["score_parts"]) == {"vector", "lexical", "fusion", "importance", "recency"}
    assert result["tokens"] == count_tokens(result["text"]) <= 200


async def test_recall_skips_recent_messages_and_irrelevant_queries(sidecar):
    await _chat(sidecar, {39: "The vault code is 4417."})  # the very last message: still in the prompt
    result = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 200})
    assert "4417" not in result["text"]
    nothing = await recall(sidecar, "c", {"query": "xylophone quartz", "budget_tokens": 200})
    assert nothing["text"] == "" and nothing["memories"] == []


async def test_pinned_and_rules_come_first_and_budget_holds(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417."})
    rule = await create_node(sidecar, "c", {"type": "rule", "fields": {"title": "Tone",
                                                                      "constraint": "Keep it grim."}})
    pinned = await create_node(sidecar, "c", {"text": "Elena is afraid of deep water.", "pinned": True})
    result = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 120})
    ids = [m["id"] for m in result["memories"]]
    assert ids[:2] == [pinned["id"], rule["id"]] or ids[:2] == [rule["id"], pinned["id"]]
    assert result["tokens"] <= 120
    tiny = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 50})
    assert tiny["tokens"] <= 50


async def test_pinned_memories_open_the_block(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417."})
    await create_node(sidecar, "c", {"type": "rule", "fields": {"title": "Tone", "constraint": "Keep it grim."}})
    await create_node(sidecar, "c", {"type": "preference", "fields": {"content": "Short replies."}})
    await create_node(sidecar, "c", {"text": "Elena is afraid of deep water.", "pinned": True})
    text = (await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 400}))["text"]
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[:3] == ["## Pinned memories", "## User directives (follow these)", "## Rules and constraints"]
    assert text.index("afraid of deep water") < text.index("Short replies") < text.index("Keep it grim")


async def test_a_short_chats_greeting_is_not_injected_again(sidecar):
    greeting = {"role": "assistant", "name": "Elena",
                "text": "*The lighthouse keeper lifts her lantern.* I am Elena; the silver key hangs by my door."}
    turns = [{"role": "user", "name": "Alex", "text": "Good evening."},
             {"role": "assistant", "name": "Elena", "text": "Sit by the fire."},
             {"role": "user", "name": "Alex", "text": "Tell me about the town."},
             {"role": "assistant", "name": "Elena", "text": "Fishermen, mostly."},
             {"role": "user", "name": "Alex", "text": "And the harbour?"},
             {"role": "assistant", "name": "Elena", "text": "Quiet in winter."}]
    await full_sync(sidecar, "g", [greeting] + turns)
    await settle(sidecar, "g")
    query = {"query": "where is the silver key?", "budget_tokens": 300}
    assert "silver key" not in (await recall(sidecar, "g", query))["text"]   # SillyTavern still sends it
    await sidecar.settings_service.update_chat("g", {"recall.in_prompt_tokens": 0})
    assert "silver key" in (await recall(sidecar, "g", query))["text"]        # the rule is off
    await sidecar.settings_service.update_chat("g", {"recall.in_prompt_tokens": None})
    long_turns = [{"role": m["role"], "name": m["name"], "text": f"{m['text']} " + "The wind howls. " * 60}
                  for m in turns * 3]
    await full_sync(sidecar, "g", [greeting] + turns + long_turns)            # the chat outgrew the budget
    await settle(sidecar, "g")
    assert "silver key" in (await recall(sidecar, "g", query))["text"]


async def test_recall_reinforces_access(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417."})
    result = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 200})
    node_id = result["memories"][0]["id"]
    async def accessed():
        node = await sidecar.memories.get("c", node_id)
        return node if node["access_count"] else None

    node = await wait_for(accessed, "the access to be recorded")
    assert node["access_count"] == 1 and node["last_access"]


async def test_recall_of_unknown_chat_is_empty(sidecar):
    result = await recall(sidecar, "never-seen", {"query": "anything"})
    assert result["text"] == "" and result["memories"] == []


async def test_archived_memories_leave_recall_and_come_back(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417."})
    first = await recall(sidecar, "c", {"query": "vault code", "budget_tokens": 200})
    node_id = first["memories"][0]["id"]
    await sidecar.memories.act("c", node_id, "archive")
    assert node_id not in [m["id"] for m in (await recall(sidecar, "c", {"query": "vault code"}))["memories"]]
    await sidecar.memories.act("c", node_id, "restore")
    assert node_id in [m["id"] for m in (await recall(sidecar, "c", {"query": "vault code"}))["memories"]]


def test_corrections_render_as_instructions():
    from stbme.recall.render import render_line

    node = Node(id="a", chat_id="c", type="correction",
                fields={"content": "no, her eyes are green, not blue", "wrong": "blue", "right": "green"})
    assert render_line(node, "en") == '- no, her eyes are green, not blue (use "green", not "blue")'
    node.fields = {"content": "不是蓝色，是绿色", "wrong": "蓝色", "right": "绿色"}
    assert render_line(node, "zh") == "- 不是蓝色，是绿色（应为“绿色”，而非“蓝色”）"


def test_an_event_shows_its_story_date_and_what_evolution_added():
    from stbme.recall.render import render_line

    node = Node(id="a", chat_id="c", type="event", seq_from=7, seq_to=7,
                fields={"summary": "Elena hides the key.", "speaker": "Elena",
                        "context": "the key opens the harbour vault"},
                story_time={"date": "2024-03-04"})
    assert render_line(node, "en") == "- [Mar 4, 2024] Elena: Elena hides the key. (the key opens the harbour vault)"
    # in the story's own year the year is left out
    assert render_line(node, "en", datetime.date(2024, 5, 1)).startswith("- [Mar 4] Elena:")
    node.story_time, node.fields = None, {"summary": "Elena hides the key.", "speaker": "Elena"}
    assert render_line(node, "en") == "- [msg 7] Elena: Elena hides the key."


async def test_lexical_index_is_saved_and_reconciled_on_load(sidecar):
    await _chat(sidecar, {4: "The vault code is 4417."})
    lexical = sidecar.indexes.lexical
    await lexical.get("c")
    legacy = lexical.path("c").with_name(lexical.path("c").name.replace(".lex.bin", ".lex.json"))
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_bytes(b'{"version": 2}')                   # an older version's file, never read again
    assert await lexical.save_dirty() == 1 and lexical.path("c").exists() and not legacy.exists()
    node = (await recall(sidecar, "c", {"query": "vault code"}))["memories"][0]
    await sidecar.memories.act("c", node["id"], "archive")  # a change after the save
    added = await create_node(sidecar, "c", {"text": "The harbour master is called Quill."})
    lexical._items.clear()  # as after a restart
    loaded = await lexical.get("c")
    assert node["id"] not in loaded.slot_of and added["id"] in loaded.slot_of
    assert loaded.search("Quill harbour", 3)[0][0] == added["id"]
    rebuilt = LexicalCache(sidecar.store)._build(await sidecar.store.read(lambda conn: conn.execute(
        "SELECT id, fields, tags, archived, rev FROM nodes WHERE chat_id = 'c' AND archived = 0").fetchall()))
    assert set(loaded.slot_of) == set(rebuilt.slot_of)
    for query in ("vault code", "road day 3", "Quill"):
        assert [n for n, _ in loaded.search(query, 5)] == [n for n, _ in rebuilt.search(query, 5)]
    lexical.path("c").write_bytes(b"{broken")
    lexical._items.clear()
    assert set((await lexical.get("c")).slot_of) == set(rebuilt.slot_of)  # damaged file: rebuilt


async def test_changes_during_an_index_load_are_not_lost(sidecar, monkeypatch):
    """A write committed while a chat's indexes are loading (from an older snapshot) must still reach
    them: apply waits for the load, then applies on top."""
    import asyncio

    await _chat(sidecar, {4: "The vault code is 4417."}, n=4)
    sidecar.indexes.lexical.drop("c")
    sidecar.indexes.vectors._items.pop("c", None)
    gate = asyncio.Event()
    real_read = sidecar.store.read

    async def gated_read(fn):
        result = await real_read(fn)  # the build reads its snapshot here, before the new memory exists
        if loading["on"]:
            loading["on"] = False
            await gate.wait()  # hold the load between its snapshot and registering the index
        return result

    loading = {"on": True}
    monkeypatch.setattr(sidecar.store, "read", gated_read)
    load = asyncio.create_task(sidecar.indexes.lexical.get("c"))
    await wait_for(lambda: not loading["on"], "the load to take its snapshot")
    monkeypatch.setattr(sidecar.store, "read", real_read)
    created = asyncio.create_task(create_node(sidecar, "c", {"text": "The harbour master is called Quill."}))

    async def committed():  # the write lands while the load still holds its older snapshot
        return await real_read(lambda conn: conn.execute(
            "SELECT 1 FROM nodes WHERE chat_id = 'c' AND fields LIKE '%Quill%'").fetchone())

    await wait_for(committed, "the new memory to be committed")
    gate.set()
    await load
    node = await created
    assert node["id"] in (await sidecar.indexes.lexical.get("c")).slot_of


def test_bm25_scores_do_not_depend_on_reindexing_history():
    fresh, churned = LexicalIndex(), LexicalIndex()
    for index in (fresh, churned):
        for i in range(6):
            index.upsert(f"d{i}", "the vault code is 4417" if i % 2 == 0 else "noted")
    for _ in range(3):  # the same memories indexed again (a reload racing an apply, an edit back and forth)
        for i in range(6):
            churned.upsert(f"d{i}", "the vault code is 4417" if i % 2 == 0 else "noted")
    assert churned.search("vault code", 5) == fresh.search("vault code", 5)


def test_bm25_weights_kept_between_searches_follow_every_change():
    """Term weights and length norms are kept between searches: each add, edit, removal and compaction
    must give the scores a fresh index of the same memories gives."""
    def fresh_of(texts: dict[str, str]) -> LexicalIndex:
        index = LexicalIndex()
        for node_id, text in texts.items():
            index.upsert(node_id, text)
        return index

    texts = {f"d{i}": "the vault code is 4417" if i % 3 == 0 else f"lanterns over the harbor {i}" for i in range(40)}
    kept = fresh_of(texts)
    steps = [("add", "d40", "the vault under the harbor"), ("edit", "d3", "a long vault ledger " * 6),
             ("remove", "d0", None), *[("remove", f"d{i}", None) for i in range(1, 30)]]   # the last ones compact
    for what, node_id, text in steps:
        kept.search("vault harbor", 10), kept.term_weights("vault harbor")   # fill what is kept
        if what == "remove":
            kept.remove(node_id)
            texts.pop(node_id)
        else:
            kept.upsert(node_id, text)
            texts[node_id] = text
        fresh = fresh_of(texts)
        rounded = lambda hits: [(n, round(score, 4)) for n, score in hits]  # noqa: E731
        assert rounded(kept.search("vault harbor", 10)) == rounded(fresh.search("vault harbor", 10)), (what, node_id)
        assert kept.term_weights("vault harbor lanterns") == pytest.approx(fresh.term_weights("vault harbor lanterns"))


def test_bm25_ties_are_ordered_by_node_id_not_slot():
    index = LexicalIndex()
    for node_id in ("z", "m", "a", "q"):  # slots in insertion order; equal texts score equally
        index.upsert(node_id, "the vault code is 4417")
    assert [n for n, _ in index.search("vault", 4)] == ["a", "m", "q", "z"]
    assert [n for n, _ in index.search("vault", 2)] == ["a", "m"]  # the cut keeps the smallest ids


# -- a look changes nothing; a command waits for vectors ----------------------------------------------------
async def test_a_recall_that_only_looks_reinforces_nothing(client):
    await full_sync(client, "c1", SILVER_KEY_CHAT)
    await settle(client.server.app[services_key], "c1")
    sc = client.server.app[services_key]

    def state():
        return sc.store.read(lambda conn: conn.execute(
            "SELECT id, access_count, weight, last_access FROM nodes ORDER BY id").fetchall())

    async def written():   # reinforcement is counted, then written on the writer thread: let both happen
        sc.recall.reinforcement.flush()
        await sc.store.write(lambda conn: None)

    before = [tuple(r) for r in await state()]
    body = {"query": "where is the silver key buried?", "reinforce": False}
    looked = await (await client.post("/v1/chats/c1/recall", json=body)).json()
    assert "oak tree" in looked["text"]
    await written()
    assert [tuple(r) for r in await state()] == before
    resp = await client.post("/v1/chats/c1/recall", json={"query": "x", "reinforce": "no"})
    assert resp.status == 400 and (await resp.json())["field"] == "reinforce"
    await client.post("/v1/chats/c1/recall", json={"query": "where is the silver key buried?"})
    await written()
    assert [tuple(r) for r in await state()] != before   # a real recall reinforces what it injects


class SlowIndexes:
    """The chat's vector index takes a while to load (a big chat after a restart)."""

    def __init__(self, vectors, gate: asyncio.Event):
        self.vectors, self.gate = vectors, gate
        self.load = vectors._load_or_build

    async def __call__(self, chat_id):
        await self.gate.wait()
        return await self.load(chat_id)


@pytest.mark.parametrize("for_command", [False, True])
async def test_a_command_waits_for_the_vector_index_a_generation_does_not(tmp_path, for_command):
    embedder = HashEmbedder()
    sc = Services.open(tmp_path / "data", embedder=embedder)
    await sc.start()
    await full_sync(sc, "c1", SILVER_KEY_CHAT)
    await settle(sc, "c1")
    await sc.close()
    sc = Services.open(tmp_path / "data", embedder=embedder, for_command=for_command)
    gate = asyncio.Event()
    sc.indexes.vectors._load_or_build = SlowIndexes(sc.indexes.vectors, gate)
    try:
        recall = asyncio.ensure_future(sc.recall.recall("c1", RecallRequest("where is the silver key buried?")))
        if for_command:
            await asyncio.sleep(0.5)     # past the 0.25 s a generation's recall waits
            assert not recall.done()
            gate.set()
        result = await asyncio.wait_for(recall, 60)
        gate.set()
        if for_command:
            assert "degraded" not in result
            assert any(m["score_parts"].get("vector") for m in result["memories"])
        else:
            assert result["degraded"] == "the vector index is still loading: keyword results only"
    finally:
        gate.set()
        await sc.close()
