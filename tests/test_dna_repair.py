"""Directive memories from chat messages, signal dedupe, repair loops and correction targets."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import create_node, full_sync, recall, settle

from stbme.dna import repair
from stbme.dna.dynamics import DIRECTIVE_START_WEIGHT
from stbme.dna.repair import Directive, find_duplicate, find_loop_partner
from stbme.policy import REINFORCE_STEP

CORRECTION = "(OOC: no, her eyes are green, not blue)"


def turn(user: str, reply: str = "The story goes on.") -> list[dict]:
    return [{"role": "user", "name": "Alex", "text": user}, {"role": "assistant", "name": "Elena", "text": reply}]


async def directives(sc, chat_id: str, type_: str | None = None) -> list[dict]:
    nodes = (await sc.memories.list(chat_id, limit=200, archived=None))["nodes"]
    return [n for n in nodes if n["source"] == "dna" and (type_ is None or n["type"] == type_)]


async def ingest(sc, chat_id, chat):
    await full_sync(sc, chat_id, chat)
    await settle(sc, chat_id)


def unit(*xs):
    v = np.array(xs, np.float32)
    return v / np.linalg.norm(v)


TEXT = "keep the replies short"
PARAPHRASE = "please keep the replies short and simple"   # 0.75 of the words: like it, not the same words


def test_duplicate_needs_same_type_the_same_hour_090_and_shared_words():
    now = 10_000.0
    base = Directive("a", "preference", unit(1, 0, 0), now - 100, text=TEXT)
    assert find_duplicate("preference", unit(1, 0.1, 0), TEXT, [base], now)[0].id == "a"
    assert find_duplicate("preference", unit(1, 0.1, 0), PARAPHRASE, [base], now)[0].id == "a"
    assert find_duplicate("decision", unit(1, 0.1, 0), TEXT, [base], now) is None          # other type
    assert find_duplicate("preference", unit(1, 0.6, 0), TEXT, [base], now) is None        # cosine 0.86
    old = Directive("b", "preference", unit(1, 0, 0), now - 3601, text=TEXT)
    assert find_duplicate("preference", unit(1, 0, 0), PARAPHRASE, [old], now) is None      # an hour before
    later = Directive("c", "preference", unit(1, 0, 0), now + 3601, text=TEXT)
    assert find_duplicate("preference", unit(1, 0, 0), PARAPHRASE, [later], now) is None    # or after
    assert find_duplicate("preference", unit(1, 0, 0), "no violence please", [base], now) is None  # other words


def test_the_same_words_reinforce_however_long_after_but_never_across_a_negation():
    """An instruction repeated in later sessions is one directive (issue 21: 68 repeats of one OOC line
    became 33 directives); a negated instruction is never the same as the plain one, within the hour too."""
    now = 10_000_000.0
    month = Directive("a", "preference", unit(1, 0, 0), now - 30 * 86400, text=TEXT)
    assert find_duplicate("preference", unit(1, 0, 0), "Keep the replies short!", [month], now)[0].id == "a"
    assert find_duplicate("preference", unit(1, 0.6, 0), TEXT, [month], now) is None        # still above 0.9
    kill = Directive("k", "preference", unit(1, 0, 0), now - 60, text="kill Mira in this scene")
    assert repair.word_overlap("don't kill Mira in this scene", kill.text) == 1.0          # "don't" is no term
    assert find_duplicate("preference", unit(1, 0, 0), "don't kill Mira in this scene", [kill], now) is None
    assert find_duplicate("preference", unit(1, 0, 0), "不要杀林晚", [
        Directive("z", "preference", unit(1, 0, 0), now - 60, text="要杀林晚")], now) is None


def test_a_correction_said_again_later_is_a_loop_first_then_reinforces():
    """Before its repair loop is recorded, a correction repeated after the hour is the loop's second
    memory; once it is in a loop (or loops are off), the same words reinforce."""
    now = 10_000_000.0
    first = Directive("a", "correction", unit(1, 0, 0), now - 7200, text="her eyes are green, not blue")
    assert find_duplicate("correction", unit(1, 0, 0), first.text, [first], now) is None
    assert find_duplicate("correction", unit(1, 0, 0), first.text, [first], now, loops=False)[0].id == "a"
    first.in_loop = True
    assert find_duplicate("correction", unit(1, 0, 0), first.text, [first], now)[0].id == "a"


def test_word_overlap():
    assert repair.word_overlap("keep the replies short", "Keep your replies short!") == 1.0
    assert repair.word_overlap("不要替我的角色说话", "请别替我的角色说话或行动") >= repair.WORD_OVERLAP
    assert repair.word_overlap("以后请用第三人称来写", "请避免血腥描写") < repair.WORD_OVERLAP
    assert repair.word_overlap("", "anything") == 0.0


def test_loop_partner_needs_correction_or_error_7_days_and_085():
    now = 1_000_000.0
    earlier = Directive("a", "error", unit(1, 0, 0), now - 6 * 86400, text=TEXT)
    assert find_loop_partner("correction", unit(1, 0.5, 0), TEXT, [earlier], now)[0].id == "a"   # cosine 0.894
    assert find_loop_partner("correction", unit(1, 0.7, 0), TEXT, [earlier], now) is None        # cosine 0.819
    assert find_loop_partner("preference", unit(1, 0, 0), TEXT, [earlier], now) is None
    stale = Directive("b", "error", unit(1, 0, 0), now - 8 * 86400, text=TEXT)
    assert find_loop_partner("error", unit(1, 0, 0), TEXT, [stale], now) is None


async def test_signals_become_directive_memories_injected_first(sidecar):
    chat = turn("We enter the hall.", "Elena's blue eyes shine in the torchlight.")
    chat += turn(CORRECTION + " I smile at her.")
    chat += turn("I want slower pacing, don't rush the romance.")
    chat += turn("(OOC: we decided the heist is at midnight)")
    chat += turn("// you keep forgetting she lost her arm")
    chat += turn("((first describe the scene, then the dialogue))")
    chat += turn("I draw my sword.")  # not a signal
    chat += turn('*I grin.* "We decided to take the long way round."')  # in character: not a signal either
    await ingest(sidecar, "c", chat)
    found = {n["type"]: n for n in await directives(sidecar, "c")}
    assert set(found) == {"correction", "preference", "decision", "error", "workflow"}
    assert found["correction"]["fields"] == {"content": "no, her eyes are green, not blue", "wrong": "blue",
                                             "right": "green"}
    assert found["correction"]["seq_range"] == [2, 2] and "ooc" in found["correction"]["tags"]
    assert found["error"]["importance"] == 8.0 and found["preference"]["importance"] == 7.0
    # the correction rewrote the memory it contradicts (journaled, with its history)
    nodes = (await sidecar.memories.list("c", limit=200, archived=None))["nodes"]
    fixed = next(n for n in nodes if n["type"] == "event" and n["seq_range"] == [1, 1])
    assert fixed["fields"]["summary"] == "Elena's green eyes shine in the torchlight."
    assert fixed["evolution"][-1]["kind"] == "dna_correction"
    edges = await sidecar.memories.edges("c", found["correction"]["id"])
    assert any(e["relation"] == "updates" and e["to_id"] == fixed["id"] for e in edges)
    # recall puts them in the "User directives" section, whatever the query
    result = await recall(sidecar, "c", {"query": "what is for dinner"})
    assert "User directives" in result["text"]
    assert result["text"].index("green, not blue") < result["text"].index("User directives") + 400
    assert {m["type"] for m in result["memories"][:5]} == {"correction", "preference", "decision", "error", "workflow"}
    kinds = [e["kind"] for e in await sidecar.dna_assets.events(chat_id="c", limit=100)]
    assert kinds.count("signal") == 5 and kinds.count("gene_use") == 5 and "correct" in kinds


async def test_duplicate_signal_reinforces_instead_of_adding(sidecar):
    chat = turn("I want slower pacing, don't rush the romance.")
    await ingest(sidecar, "c", chat)
    [first] = await directives(sidecar, "c")
    assert first["weight"] == 0.5   # a directive starts where a repeat shows (dynamics.DIRECTIVE_START_WEIGHT)
    chat += turn("I want slower pacing, do not rush the romance!")
    await ingest(sidecar, "c", chat)
    assert [d["id"] for d in await directives(sidecar, "c")] == [first["id"]]
    assert (await sidecar.memories.get("c", first["id"]))["weight"] == 0.6
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="reinforce")
    assert event["data"]["node_id"] == first["id"] and event["data"]["similarity"] >= 0.9


def dated(messages: list[dict], send_date: str) -> list[dict]:
    return [{**m, "send_date": send_date} for m in messages]


async def test_repeated_correction_is_a_repair_loop(sidecar):
    chat = dated(turn("We talk.", "Elena's blue eyes narrow.") + turn(CORRECTION), "March 3, 2026 8:00pm")
    await ingest(sidecar, "c", chat)
    [first] = await directives(sidecar, "c", "correction")
    # two hours later in the story the model makes the same mistake and the user corrects it again
    chat += dated(turn("Go on.", "Her blue eyes sparkle.") + turn("(OOC: no!! her eyes are green, not blue)"),
                  "March 3, 2026 10:00pm")
    await ingest(sidecar, "c", chat)
    both = await directives(sidecar, "c", "correction")
    assert len(both) == 2
    second = next(d for d in both if d["id"] != first["id"])
    [loop] = await sidecar.dna.list_loops("c")
    assert (loop["first_id"], loop["second_id"]) == (first["id"], second["id"])
    assert loop["similarity"] >= 0.85 and loop["time_gap"] == 7200 and loop["status"] == "open"
    for d in both:  # escalated by the repair_loop gene
        node = await sidecar.memories.get("c", d["id"])
        assert node["pinned"] and node["locked"] and node["importance"] == 10.0
    assert [e["kind"] for e in await sidecar.dna_assets.events(chat_id="c", kind="repair_loop")] == ["repair_loop"]
    stats = await sidecar.dna.chat_stats("c")
    assert [x["id"] for x in stats["open_repair_loops"]] == [loop["id"]]
    resolved = await sidecar.dna.resolve_loop("c", loop["id"])
    assert resolved["status"] == "resolved" and await sidecar.dna.list_loops("c") == []


async def test_unrelated_corrections_are_no_loop(sidecar):
    chat = turn(CORRECTION) + turn("(OOC: the tavern is called the Red Stag, not the Blue Boar)")
    await ingest(sidecar, "c", chat)
    assert len(await directives(sidecar, "c", "correction")) == 2
    assert await sidecar.dna.list_loops("c") == []


async def test_loop_detection_can_be_turned_off(sidecar):
    await sidecar.settings_service.update_chat("c", {"dna.repair_loop_detection": False})
    chat = turn(CORRECTION)
    await ingest(sidecar, "c", chat)
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET created_at = created_at - 7200"))
    chat += turn(CORRECTION.replace("no,", "no!"))
    await ingest(sidecar, "c", chat)
    # no loop to record: the correction said again is the same directive, reinforced
    assert await sidecar.dna.list_loops("c") == []
    [one] = await directives(sidecar, "c")
    assert one["weight"] == pytest.approx(DIRECTIVE_START_WEIGHT + REINFORCE_STEP)


async def test_reflect_finds_loops_among_manual_directives(sidecar):
    await ingest(sidecar, "c", turn("hello"))
    a = await create_node(sidecar, "c", {"type": "error", "fields": {"content": "you keep forgetting she lost her arm"}})
    b = await create_node(sidecar, "c", {"type": "error", "fields": {"content": "you keep forgetting: she lost her arm!"}})
    report = await sidecar.dna.reflect("c")
    assert [(x["first_id"], x["second_id"]) for x in report["repair_loops"]] == [(a["id"], b["id"])]
    assert (await sidecar.dna.reflect("c"))["repair_loops"] == []  # recorded once
    assert (await sidecar.memories.get("c", a["id"]))["locked"]


async def test_strategy_decides_what_is_remembered(sidecar):
    await sidecar.settings_service.update_chat("c", {"dna.evolution_strategy": "conservative"})
    chat = turn("(OOC: we decided the heist is at midnight)") + turn("(OOC: remember, we decided the guard is bribed, always)")
    await ingest(sidecar, "c", chat)
    assert [d["fields"]["content"] for d in await directives(sidecar, "c")] == [
        "remember, we decided the guard is bribed, always"]  # 0.8 >= 0.8; the plain 0.7 one is not


async def test_ooc_scope_and_switch(sidecar):
    await sidecar.settings_service.update_chat("a", {"dna.signal_scope": "ooc"})
    await sidecar.settings_service.update_chat("b", {"dna.signals": False})
    chat = turn("I want slower pacing. (OOC: we decided the heist is at midnight)")
    await ingest(sidecar, "a", chat)
    await ingest(sidecar, "b", chat)
    assert [d["type"] for d in await directives(sidecar, "a")] == ["decision"]
    assert await directives(sidecar, "b") == []


async def test_locked_target_is_only_linked(sidecar):
    chat = turn("We talk.", "Elena's blue eyes narrow.")
    await ingest(sidecar, "c", chat)
    nodes = (await sidecar.memories.list("c", limit=50))["nodes"]
    target = next(n for n in nodes if n["type"] == "event" and "blue" in n["fields"]["summary"])
    await sidecar.memories.act("c", target["id"], "lock")
    chat += turn(CORRECTION)
    await ingest(sidecar, "c", chat)
    assert (await sidecar.memories.get("c", target["id"]))["fields"]["summary"] == "Elena's blue eyes narrow."
    [event] = await sidecar.dna_assets.events(chat_id="c", kind="correct")
    assert event["data"]["action"] == "kept (locked)" and event["data"]["target_id"] == target["id"]


def test_cosine_handles_zero_vectors():
    assert repair.cosine(np.zeros(3), np.ones(3)) == 0.0
    assert abs(repair.cosine(np.ones(3), np.ones(3)) - 1.0) < 1e-6


async def test_without_gep_every_signal_is_remembered_and_loops_still_escalate(sidecar):
    await sidecar.settings_service.update_chat("c", {"dna.gep_enabled": False})
    await sidecar.dna_assets.edit_gene("gene_decision_record", {"enabled": False})  # genes do not matter without GEP
    chat = turn("(OOC: we decided the heist is at midnight)") + turn("We talk.", "Elena's blue eyes narrow.") + turn(CORRECTION)
    await ingest(sidecar, "c", chat)
    assert sorted(d["type"] for d in await directives(sidecar, "c")) == ["correction", "decision"]
    assert await sidecar.dna_assets.events(chat_id="c", kind="gene_use") == []
    nodes = (await sidecar.memories.list("c", limit=100))["nodes"]
    assert any(n["fields"].get("summary") == "Elena's green eyes narrow." for n in nodes)
    await sidecar.store.write(lambda conn: conn.execute("UPDATE nodes SET created_at = created_at - 7200"))
    chat += turn("(OOC: no!! her eyes are green, not blue)")
    await ingest(sidecar, "c", chat)
    [loop] = await sidecar.dna.list_loops("c")
    assert (await sidecar.memories.get("c", loop["first_id"]))["pinned"]


async def test_a_chinese_correction_in_the_tail_form_fixes_its_target(sidecar):
    chat = turn("我们聊天。", "她的蓝色眼睛很美。") + turn("（OOC：她的眼睛是绿色的，不是蓝色。）")
    await ingest(sidecar, "c", chat)
    [made] = await directives(sidecar, "c", "correction")
    assert (made["fields"]["wrong"], made["fields"]["right"]) == ("蓝色", "绿色")
    nodes = (await sidecar.memories.list("c", limit=50))["nodes"]
    assert any(n["type"] == "event" and n["fields"].get("summary") == "她的绿色眼睛很美。" for n in nodes)
