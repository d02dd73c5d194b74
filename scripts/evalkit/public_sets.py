"""Development sets of real public conversations, converted to the recall set's chat format (evalset.py):
SillyTavern chats (roles, names, send_dates) with questions asked at their end and the message indexes
that answer them. Other people's text: the source files stay in the git-ignored `.eval-cache/sources/`,
never in the repository; what is committed is this converter and each file's checksum.

- **realtalk** (English): REALTALK (Lee et al. 2025, "A 21-Day Real-World Dataset for Long-Term
  Conversation"), ten chats between real people over a messaging app, 410-1,548 messages each, with
  memory-probing questions and their evidence messages (`dia_id`). Its questions follow the annotation
  scheme of the same group's earlier LoCoMo benchmark (multi-hop, temporal, open-domain), but its
  conversations are not LoCoMo's: they are new and real. Its repository also ships a copy of LoCoMo under
  `data/locomo/`: never copy that folder (LoCoMo is held out); only `data/Chat_*.json`.
- **kdconv** (Chinese): KdConv (Zhou et al. 2020, thu-coai), real crowd-sourced Chinese conversations
  about films, music and travel, every utterance that uses a fact labelled with it (entity, attribute,
  value). A chat here is 40 conversations of one domain in a row, one evening each, between the same two
  people; a question is a real utterance of a later conversation that asks for a fact (the utterance after
  it states it) already stated in the chat, asked with the up-to-3 utterances before it as the newest
  messages; its evidence is every earlier utterance labelled with that fact. `named` questions name the
  entity themselves ("恋恋笔记本的导演是谁？"), `reference` ones lean on the turns before ("导演是谁呢？").

How to obtain them (one copy each; checked against CHECKSUMS before use):
    REALTALK: github.com/danny911kr/REALTALK at b903e06a, `data/Chat_*.json` -> .eval-cache/sources/realtalk/
    KdConv:   github.com/thu-coai/KdConv at 653db764, `data/{film,music,travel}/{dev,test}.json`
              -> .eval-cache/sources/kdconv/{domain}_{split}.json

Split, fixed before any tuning: REALTALK's odd-numbered chats and KdConv's `dev` files are tuned on
(`tune`); REALTALK's even-numbered chats and KdConv's `test` files are held out (`held`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from pathlib import Path

from .stdate import format_send_date

SOURCES = Path(__file__).resolve().parent.parent.parent / ".eval-cache" / "sources"
CHECKSUMS = {
    "realtalk/Chat_1_Emi_Elise.json": "4e947998a751a1ba2c3710fc873b90fbcbc234fda7a5e4e75db2b762e0f25a36",
    "realtalk/Chat_2_Kevin_Elise.json": "4ac6e319c206731aa9a025c93325eb1edb43686cf39473f058c87ae7deb2d62a",
    "realtalk/Chat_3_Kevin_Paola.json": "10c9208016538cbe7a28aafa6cfd72587b072677964c36ec242159fdf58961f2",
    "realtalk/Chat_4_Emi_Paola.json": "80aa012ed6a918f5b317bd942b4d4811a158d27a6e07b7a5c6182994107a9367",
    "realtalk/Chat_5_Nicolas_Nebraas.json": "32dd7c45786b1a26861dc1574a1bb698a855196fd2ae3fc0c091f3c9ab2d6d06",
    "realtalk/Chat_6_Vanessa_Nicolas.json": "9d5ee072ab5a0667ef71d5644d7cd3a4c6777a1e6e2252bf306f310d982e40ac",
    "realtalk/Chat_7_Nebraas_Vanessa.json": "b5716bb093217980e747dec0d98996829b569febc09587a025efc6b79806e9ce",
    "realtalk/Chat_8_Akib_Muhhamed.json": "814f64ad7e8a46f0398f550fe84184e2ba495a292290b9ff96ffc95448280800",
    "realtalk/Chat_9_Fahim_Akib.json": "05b9b4331bf0e25a2a64dc89c404622c83a61ab5e7c935fb7d844449caf6dd39",
    "realtalk/Chat_10_Fahim_Muhhamed.json": "26135a9e3482f40bea4c71de570a2d994a361848111067e60587be1dd82a0127",
    "kdconv/film_dev.json": "2f156d8d34bdd3eac31c196772156d36e017f8cb2255a2c312bd98e367ed363e",
    "kdconv/film_test.json": "5ba2b79f9791bedbe5fe8a1bf5d7cbf277697743ee426ecd05459d9e28bcf21b",
    "kdconv/music_dev.json": "ee34a4af167195db43fdcc910f8d125956222517f0572d248a069057493d557f",
    "kdconv/music_test.json": "46f048c5db9dde45127cf6630b2fa06b685be369b71c5bc2dc3022d3f4bbad65",
    "kdconv/travel_dev.json": "8d1f31295888cf61eff398bab8aa042f7fccd04a088bd63c939f0b79625a9093",
    "kdconv/travel_test.json": "730426b0997b8375c8477c7e658c0ec645fced6ab8d546adda114b21cf30faac",
}
SETS = ("realtalk", "kdconv")
CATEGORIES = {"realtalk": ("multihop", "temporal", "open"), "kdconv": ("named", "reference")}
REALTALK_CATEGORY = {1: "multihop", 2: "temporal", 3: "open"}
# Chat 1's questions call its first speaker Kate (the name her messages go by is Emi); the others match.
REALTALK_NAMES = {"Chat_1_Emi_Elise.json": {"Emi": "Kate"}}
KDCONV_SESSIONS = 40          # conversations per chat (history)
KDCONV_PROBES = 110           # the later conversations (all the rest) whose questions are asked at the end of the chat
KDCONV_CONTEXT = 3            # utterances before a question sent with it (with it, the 4 newest messages)
KDCONV_PEOPLE = ("林晓", "周然")
TAIL_FREE = 3                 # the chat's last messages are in the prompt: evidence there is not counted


class MissingSource(RuntimeError):
    pass


def _read(rel: str) -> bytes:
    path = SOURCES / rel
    if not path.exists():
        raise MissingSource(f"{path} is missing: see scripts/evalkit/public_sets.py for where to get it")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CHECKSUMS[rel]:
        raise MissingSource(f"{path}: sha256 {digest} is not the checked file's {CHECKSUMS[rel]}")
    return data


def available(name: str) -> bool:
    return all((SOURCES / rel).exists() for rel in CHECKSUMS if rel.startswith(name + "/"))


def load(name: str) -> list[dict]:
    """The chats of one public set, in the evaluation's chat format (each with its `split`)."""
    return {"realtalk": realtalk_chats, "kdconv": kdconv_chats}[name]()


# -- REALTALK -----------------------------------------------------------------------------------------
def _realtalk_moment(text: str) -> dt.datetime:
    return dt.datetime.strptime(text.strip(), "%d.%m.%Y, %H:%M:%S")


def realtalk_chats() -> list[dict]:
    chats = []
    files = sorted((rel for rel in CHECKSUMS if rel.startswith("realtalk/")),
                   key=lambda rel: int(re.search(r"Chat_(\d+)_", rel)[1]))
    for rel in files:
        raw = json.loads(_read(rel))
        number = int(re.search(r"Chat_(\d+)_", rel)[1])
        rename = REALTALK_NAMES.get(Path(rel).name, {})
        name = lambda speaker: rename.get(speaker, speaker[:1].upper() + speaker[1:])  # noqa: E731
        first = name(raw["name"]["speaker_1"])
        sessions = sorted((k for k in raw if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        messages, index_of = [], {}
        for key in sessions:
            for turn in raw[key]:
                text = turn["clean_text"].strip()
                if not text:
                    continue
                speaker = name(turn["speaker"])
                index_of[turn["dia_id"]] = len(messages)
                messages.append({"role": "user" if speaker == first else "assistant", "name": speaker, "text": text,
                                 "send_date": format_send_date(_realtalk_moment(turn["date_time"]))})
        other = next(m["name"] for m in messages if m["role"] == "assistant")
        last = _realtalk_moment(raw[sessions[-1]][-1]["date_time"])
        questions = []
        for i, qa in enumerate(raw["qa"]):
            ids = [e.strip() for item in qa.get("evidence", []) for e in str(item).split(";")]
            evidence = sorted({index_of[e] for e in ids if e in index_of and index_of[e] < len(messages) - TAIL_FREE})
            category = REALTALK_CATEGORY.get(qa.get("category"))
            if not evidence or category is None:
                continue
            questions.append({"id": f"rt{number}-{i}", "category": category, "kind": category,
                              "question": qa["question"], "query": qa["question"], "evidence": evidence,
                              "stale": [], "answer": str(qa.get("answer", "")), "stale_answer": ""})
        chats.append({"chat_id": f"realtalk-{number}", "lang": "en", "world": "realtalk", "user": first,
                      "char": other, "split": "tune" if number % 2 else "held",
                      "question_send_date": format_send_date(last + dt.timedelta(days=1)),
                      "messages": messages, "questions": questions, "labels": {}})
    return chats


# -- KdConv -------------------------------------------------------------------------------------------
def _facts(message: dict) -> list[tuple[str, str]]:
    """The facts an utterance states: (entity, attribute); the long 'Information' texts are left out (an
    utterance quoting a part of one states no particular fact of it)."""
    return [(a["name"], a["attrname"]) for a in message.get("attrs", []) if a["attrname"] != "Information"]


def _short_name(entity: str) -> str:
    return entity.split("（")[0].strip()


def kdconv_chats() -> list[dict]:
    chats = []
    user, char = KDCONV_PEOPLE
    for split, label in (("dev", "tune"), ("test", "held")):
        for domain in ("film", "music", "travel"):
            conversations = json.loads(_read(f"kdconv/{domain}_{split}.json"))
            history, probes = conversations[:KDCONV_SESSIONS], conversations[KDCONV_SESSIONS:][:KDCONV_PROBES]
            start = dt.datetime(2026, 3, 2, 20, 0)
            messages, stated = [], {}
            for day, conversation in enumerate(history):
                for turn, utterance in enumerate(conversation["messages"]):
                    moment = start + dt.timedelta(days=day, minutes=2 * turn)
                    for fact in _facts(utterance):
                        stated.setdefault(fact, []).append(len(messages))
                    messages.append({"role": "user" if turn % 2 == 0 else "assistant",
                                     "name": user if turn % 2 == 0 else char,
                                     "text": utterance["message"].strip(), "send_date": format_send_date(moment)})
            asked_day = start + dt.timedelta(days=len(history))
            questions = []
            for p, conversation in enumerate(probes):
                turns = conversation["messages"]
                for t in range(0, len(turns) - 1, 2):   # the user's turns (the conversation's opener is the user)
                    ask, answer = turns[t], turns[t + 1]
                    if _facts(ask) or not _facts(answer):
                        continue
                    said_here = {f for u in turns[:t] for f in _facts(u)}
                    facts = [f for f in _facts(answer) if f in stated and f not in said_here]
                    if not facts:
                        continue
                    evidence = sorted({i for f in facts for i in stated[f] if i < len(messages) - TAIL_FREE})
                    if not evidence:
                        continue
                    names = {_short_name(e) for e, _ in facts}
                    query = ask["message"].strip()
                    context = [{"role": "user" if j % 2 == 0 else "assistant", "name": user if j % 2 == 0 else char,
                                "text": turns[j]["message"].strip(),
                                "send_date": format_send_date(asked_day + dt.timedelta(minutes=2 * j))}
                               for j in range(max(0, t - KDCONV_CONTEXT), t)]
                    values = [a["attrvalue"] for a in answer.get("attrs", []) if (a["name"], a["attrname"]) in facts]
                    category = "named" if any(n and n in query for n in names) else "reference"
                    questions.append({"id": f"kd-{domain}-{split}-{p}-{t}", "category": category, "kind": category,
                                      "question": query, "query": query, "evidence": evidence, "stale": [],
                                      "answer": values[0] if values else "", "stale_answer": "", "context": context,
                                      "send_date": format_send_date(asked_day + dt.timedelta(minutes=2 * t))})
            chats.append({"chat_id": f"kdconv-{domain}-{split}", "lang": "zh", "world": f"kdconv-{domain}",
                          "user": user, "char": char, "split": label,
                          "question_send_date": format_send_date(asked_day), "messages": messages,
                          "questions": questions, "labels": {}})
    return chats
