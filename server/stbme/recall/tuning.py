"""The read path's named numbers: weights of the ranked lists in fusion, the floors that keep unrelated
memories out, the neighbours a hit brings along. None of them means anything to a roleplayer, so they
are not settings; each is the value a run of scripts/eval_recall.py chose on the public development sets
(their tuned-on half), and docs/evaluation.md says which run and what each is worth.

For that evaluation only, `STBME_RECALL_TUNING` (JSON, e.g. '{"GRAPH_WEIGHT": 0}') overrides them when
the server starts, so each stage can be switched off in turn without a setting.
"""

from __future__ import annotations

import json
import os

from ..index import lexical

CANDIDATES = 100             # memories each ranked list (keywords, vectors, per part of the input) brings to fusion
# Weight of the keyword (BM25) lists in reciprocal-rank fusion. Public sets' tuned-on half, with common terms scored
# without length normalisation (index/lexical.COMMON_TERM_SHARE), R@10 EN all: .516 / .520 / .528 / .534 / .530 /
# .526 / .520 at 0.5 / 1 / 1.25 / 1.5 / 1.75 / 2 / 2.5 (docs/evaluation.md, "Common terms ..."). Again once English
# words were stemmed (docs/evaluation.md, "English stems"): .556 / .559 / .556 / .560 at 1.25 / 1.5 / 1.75 / 2.
LEXICAL_WEIGHT = 1.5
LEXICAL_WEIGHT_CJK = 1.0     # ... for a Chinese (CJK) input, whose keywords are character bigrams (None: the same)
VECTOR_WEIGHT = 1.0          # weight of the vector (HNSW) lists
SEARCH_TIME_WORDS = True     # the question's time expression stays in its keyword and vector search
TIME_WEIGHT = 3.0            # the memories of the days a question names ("on March 4", 六天前)
TIME_NEEDS_TOPIC = True      # ... only those the question's topic finds by keywords (MIN_BM25), when any
DAYS_TOLD_AFTER = 2          # ... and for a calendar date, those said in the next two days, as if they named it
                             #     (a night out is told the next day, or past midnight: "Had a great night ...")
LATEST_WEIGHT = 1.0          # for a question about now: the memories that say its subject changed, newest first
GRAPH_WEIGHT = 0.5           # the memories of the less common names the first hits involve (multi-hop)
# An input that names nobody and leans on the recent turns ("导演是谁呢？" after turns about 《模仿游戏》): the
# memories said from each mention of the newest turn's known names to SUBJECT_AFTER messages later, ranked by the
# input's own words, as one more list at this weight (recall/candidates.py, subject_members). Public sets'
# tuned-on half, R@10 ZH reference / all: .184 / .194 off, .250 / .251 on, English the same (.512); SUBJECT_AFTER
# 3 / 12: .240 / .244 (docs/evaluation.md, "The subject of the recent turns").
SUBJECT_AFTER = 6
# When the recent turns name no such name (only a main character, or nothing the chat knows as a name: "这个我还真
# 不知道" after turns about an award), the same from the SUBJECT_ECHOES best keyword hits of their own words said
# before the prompt's messages (the passage they echo; read_path._echoed). Public sets' tuned-on half, R@10 ZH
# reference / all at weight 1: .267 / .265 without, .361 / .349 with one hit, .398 / .381 with two, .392 / .375
# with three; with two, weight 1.5 / 2 / 3: .427 / .406, .435 / .419, .435 / .421. English the same (.538).
# Held-out, checked once: .189 / .199 -> .219 / .228. The generated set .630 -> .619 (floor .595).
# (docs/evaluation.md, "The passage the recent turns echo").
SUBJECT_ECHOES = 2
# ... searched without the terms of COMMON_TERM_SHARE of the memories or more (a speaker's name, "知道"): they cannot
# tell which passage the turns echo, and at 100,000 memories their posting lists were most of the search (read path
# p50 0.955x, p95 0.82x, bench_read_path_ab.py). Public sets, both halves: the same R@10 in every tuned-on cell,
# held-out ZH all .228 -> .229; the generated set .617 -> .618 (docs/evaluation.md, "The echo without common terms").
ECHO_COMMON_TERMS = False
SUBJECT_WEIGHT = 2.0
# An input that names one of the chat's speakers (not addressing them: "When did Nicolas go to the cinema?") asks
# about that speaker: the memories of the other speakers' messages keep this share of their score (1: off). Of
# the evidence of such tuned-on questions 97% is the named speaker's, yet 24% of the product's top ten was the
# other's. Public sets' tuned-on half (fc88d76), R@10 EN all / multihop: .538 / .379 at 1, .544 / .391 at 0.85, .541
# / .391 at 0.7, .537 / .388 at 0.5; Chinese the same (its questions name no speaker). Held-out at 0.85:
# .629 / .391 -> .633 / .406. The generated set .619 either way (docs/evaluation.md, "The speaker asked about").
SPEAKER_SHARE = 0.85
NEIGHBOUR_SHARE = 0.8        # a neighbour of a strong hit rises to this share of its score
# Which messages next to a hit count as its neighbours (recall/candidates.py, message_neighbours):
#   exchange    a user's message and the reply to it (a user's next message starts another exchange)
#   prev_reply  the message a hit answers (by the other speaker)
#   next_reply  the reply after a hit (by the other speaker)
#   next_same   the same speaker's next message (a thought written over two messages)
# With the three others, "exchange" adds one thing: a character's message brings the character's message
# before it (a reply written over two messages, found by its second).
NEIGHBOUR_KINDS = ("prev_reply", "next_reply", "next_same", "exchange")
BORROW_RARE_TERMS = True     # an input that names nothing rare is also searched with the recent turns' rarest terms
REFERENCE_SHARE = 0.5        # ... as a keyword list of its own, at this share of the keyword weight
# ... and as one more vector list: the input's vector summed with the last turn's (its memories' stored vectors,
# so nothing more is embedded). Public sets, both halves: Chinese +0.6 / +2.0 R@10, English +0.2 / -0.3; but
# one more HNSW query on every input that borrows: read path p50 1.15x at 10k (bench_read_path_ab.py). Off.
VECTOR_REFERENCE = False
# An input that borrows (above) says little by itself ("导演是谁呢？", "and what did he make?"): its own keyword lists
# count at this share of the keyword weight, so the list of it with what it borrows ranks; they still find candidates.
LEANING_OWN_KEYWORDS = 0.0
# A long input (over 96 tokens: pasted history, a long message) is searched by windows; its last line (what it
# ends by asking, the newest of a paste) leads at full weight, the rest's windows at this share (None: alike).
LONG_REST_WEIGHT: float | None = 0.25
# For an input that asks, the memory of a message that only asks (every sentence a question: "What about you?",
# "知道他有哪些作品吗？") keeps this share of its score, lowered before its neighbours rise from it. A question's
# form matches other questions, while what answers it is a statement; and the reply to another question is
# no answer to this one. Public sets' tuned-on half, R@10 EN all / ZH all: .503 / .164 at 1, .512 / .175 at 0.7,
# .515 / .176 at 0.5; the generated set: .615 at 1, .598 at 0.7, .589 at 0.5 (its user asks the character, and the
# reply answers: found through the question it follows). 0.7 kept that within the 2 points then. Checked
# as they reach the first 30 (read_path.ASKING_WINDOW), which gives the same figures as checking every candidate.
# Swept again once BM25 scored common terms flat (2026-12-07, with VECTOR_MARGIN 0.03), EN all / ZH all: .534 /
# .265 at 0.4, .538 / .265 at 0.5, .539 / .259 at 0.6, .540 / .253 at 0.7; 0.5 lowers no cell (docs/evaluation.md).
ASKING_SHARE = 0.5
# ... but the reply to a lowered question that names what the input asks about (what the input borrows from the
# recent turns, else its rarest term) answers this one too: its neighbours rise from the unlowered score.
# Public sets' tuned-on half, R@10 ZH named / reference / all: .192 / .172 / .175 off, .208 / .184 / .187 on
# (English the same, .512); with the input's own rarest term added to what it borrows, .256 / .164 / .177. The
# generated set: .598 -> .603 (its "context" questions, found through the question the reply follows).
ASKING_TOPIC_LIFT = True
IMPORTANCE_WEIGHT = 0.15     # importance (0-10) in the final score
RECENCY_WEIGHT = 0.1         # recency (message position) in the final score
MIN_SIMILARITY = 0.78        # a memory found by vector alone is shown only at this cosine or above ...
VECTOR_MARGIN = 0.03         # ... and only when it beats the vector candidates' median by this much
MIN_BM25 = 1.0               # a memory found by keywords alone needs this BM25 score (one rare shared word ~2)
DUPLICATE_SIMILARITY = 0.97  # a memory this similar (cosine) to a better one shown is left out

_NAMES = {name for name in dir() if name.isupper() and not name.startswith("_")}
# BM25's own numbers live with it (index/lexical.py); the evaluation overrides them here all the same.
_LEXICAL_NAMES = {"COMMON_TERM_SHARE"}


def _override() -> None:
    raw = os.environ.get("STBME_RECALL_TUNING", "").strip()
    if not raw:
        return
    values = json.loads(raw)
    unknown = set(values) - _NAMES - _LEXICAL_NAMES
    if unknown:
        known = sorted(_NAMES | _LEXICAL_NAMES)
        raise ValueError(f"STBME_RECALL_TUNING: unknown names {sorted(unknown)}; known: {known}")
    for name, value in values.items():
        if name in _LEXICAL_NAMES:
            setattr(lexical, name, value)
        else:
            globals()[name] = tuple(value) if isinstance(value, list) else value


_override()
