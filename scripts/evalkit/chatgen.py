"""One long generated roleplay chat: sessions on story days, small talk around planted sentences, and
the questions asked at its end, each with the indexes of the messages that answer it.

Layout: message 0 is the character's greeting; then user and assistant alternate (odd indexes are the
user's). A session is one evening of play on one day; the first two messages of a session open the
scene and carry no plant, nor do the last TAIL_FREE messages of the chat (the prompt's recent window).
"""

from __future__ import annotations

import datetime as dt
import random

from .langpack import LANGS, Picker, Slots, fill
from .plants import Builder, Plant
from .stdate import format_send_date

TAIL_FREE = 12
GAPS = (1, 1, 1, 2, 2, 3)   # days between sessions
# Two dated questions per event series; each pair holds at most one anchored mode (see Builder.dated).
DATE_MODE_PAIRS = (("fest_a", "rel"), ("fest_a", "abs"), ("fest_b", "yest"), ("fest_b", "rel"), ("storm", "abs"),
                   ("storm", "yest"), ("rel", "abs"), ("rel", "yest"))
SERIES_KINDS = ("mishap", "mishap", "mishap", "mishap", "purchase", "purchase", "letter", "letter")
QUESTION_COUNTS = {"fact": 24, "update": 12, "multihop": 12, "context": 12}
OOC_COUNTS = {"preference": 5, "workflow": 3, "decision": 3, "correction": 2, "error": 3}


def session_sizes(rng: random.Random, min_messages: int) -> list[int]:
    """Messages per session (the first session also holds the greeting), at least min_messages in all."""
    sizes, total = [], 0
    while total < min_messages:
        size = 2 * rng.randint(14, 21) + (1 if not sizes else 0)
        sizes.append(size)
        total += size
    return sizes


def session_dates(rng: random.Random, start: dt.date, n: int, one_day_after: set[int]) -> list[dt.date]:
    """A date per session; session i + 1 is exactly one day after session i for i in one_day_after."""
    dates = [start]
    for i in range(1, n):
        gap = 1 if (i - 1) in one_day_after else rng.choice(GAPS)
        dates.append(dates[-1] + dt.timedelta(days=gap))
    return dates


class Chat:
    def __init__(self, world: dict, seed: int, min_messages: int):
        self.world, self.lang = world, LANGS[world["lang"]]
        self.rng = random.Random(f"{seed}:{world['key']}")
        self.pick = Picker(self.rng)
        self.sizes = session_sizes(self.rng, min_messages)
        n = len(self.sizes)
        self.first = [sum(self.sizes[:i]) for i in range(n)]
        self.length = sum(self.sizes)
        fest_a, fest_b, storm = (int(n * frac) + self.rng.randint(-1, 1) for frac in (0.25, 0.5, 0.75))
        self.dates = session_dates(self.rng, dt.date(*world["start"]), n, {fest_a, fest_b, storm - 1})
        self.anchors = {"fest_a": (fest_a, world["festival"][0]), "fest_b": (fest_b, world["festival"][1]),
                        "storm": (storm, world["storm"])}
        self.session_of = [s for s, size in enumerate(self.sizes) for _ in range(size)]

    # -- plants -------------------------------------------------------------------------------------
    def build(self) -> Builder:
        b = Builder(self.rng, self.lang, self.world, self.dates, self.anchors)
        b.anchor_lines()
        pairs = list(DATE_MODE_PAIRS)
        self.rng.shuffle(pairs)
        b.dated(list(SERIES_KINDS), [m for pair in pairs for m in pair])
        b.context(QUESTION_COUNTS["context"])
        b.multihop(QUESTION_COUNTS["multihop"])
        b.updates(QUESTION_COUNTS["update"])
        b.facts(QUESTION_COUNTS["fact"])
        b.out_of_character(OOC_COUNTS, chatter=5, lookalikes=16)
        return b

    def role(self, index: int) -> str:
        return "assistant" if index % 2 == 0 else "user"

    def place(self, plants: list[Plant]) -> None:
        """Give every plant a message index: constrained plants first, one plant per message."""
        reserved = {0} | set(range(self.length - TAIL_FREE, self.length))
        reserved |= {f for f in self.first} | {f + 1 for f in self.first}
        free = [i not in reserved for i in range(self.length)]
        followers = {id(p.after): p for p in plants if p.after is not None}
        order = sorted((p for p in plants if p.after is None), key=lambda p: len(p.sessions))
        for plant in order:
            follower = followers.get(id(plant))
            candidates = [i for s in plant.sessions for i in range(self.first[s], self.first[s] + self.sizes[s])
                          if free[i] and self.role(i) == plant.role
                          and (follower is None or (i + 1 < self.length and free[i + 1]
                                                    and self.session_of[i + 1] == s))]
            if not candidates:
                raise RuntimeError(f"no free message for a {plant.label} plant in sessions {plant.sessions[:5]}")
            plant.index = self.rng.choice(candidates)
            free[plant.index] = False
            if follower is not None:
                follower.index = plant.index + 1
                free[follower.index] = False

    # -- text ---------------------------------------------------------------------------------------
    def slots(self) -> Slots:
        w = self.world
        (n, ng), (m, mg) = self.rng.sample(list(w["npcs"]), 2)
        s = Slots(world=w, U=w["user"], **self.lang.person("C", *w["char"]), **self.lang.person("N", n, ng),
                  **self.lang.person("M", m, mg))
        p1, p2 = self.rng.sample(list(w["places"]), 2)
        s.update(P=p1, P2=p2, T=self.rng.choice(w["towns"]), F=self.rng.choice(w["foods"]),
                 D=self.rng.choice(w["drinks"]), O=self.rng.choice(w["mundane"]))
        s["W"] = self.rng.choice(self.lang.pools.WEATHER)
        return s

    def assistant_text(self, index: int, plant: Plant | None) -> str:
        lang, rng, pools = self.lang, self.pick, self.lang.pools
        opener = index == 0 or index in {f + 1 for f in self.first}
        paragraphs = [lang.paragraph(rng, self.slots()) for _ in range(self.rng.choice(lang.paragraphs))]
        if plant is not None:
            at = 0 if plant.style == "answer" else rng.randrange(len(paragraphs) + 1)
            paragraphs.insert(at, lang.plant_paragraph(rng, self.slots(), plant.text, plant.style))
        if opener:
            paragraphs.insert(0, fill(rng.choice(pools.SESSION_OPEN_CHAR), self.slots()))
        if rng.random() < 0.3:
            paragraphs.append(f'"{fill(rng.choice(pools.CHAR_QUESTIONS), self.slots())}"' if lang.code == "en"
                              else f"“{fill(rng.choice(pools.CHAR_QUESTIONS), self.slots())}”")
        return "\n\n".join(paragraphs)

    def user_text(self, index: int, plant: Plant | None) -> str:
        lang, rng, pools = self.lang, self.pick, self.lang.pools
        parts = [lang.user_segment(rng, self.slots()) for _ in range(self.rng.choice(lang.user_segments))]
        if index in self.first:
            parts[0] = fill(rng.choice(pools.USER_OPEN), self.slots()) + parts[0].split("*", 2)[-1].lstrip(".。")
        if plant is None:
            return lang.join(parts)
        if plant.style == "ooc":
            text = lang.join(parts[:2])
            if plant.text.startswith("//"):
                return f"{text}\n{plant.text}" if rng.random() < 0.6 else f"{plant.text}\n{text}"
            return lang.join([text, plant.text]) if rng.random() < 0.7 else lang.join([plant.text, text])
        if plant.style == "ask_turn":
            return lang.join(parts[:1] + [plant.text]) if rng.random() < 0.4 else plant.text
        line = lang.user_segment(rng, self.slots(), plant.text)
        at = rng.randrange(len(parts) + 1)
        return lang.join(parts[:at] + [line] + parts[at:])

    def send_dates(self) -> list[str]:
        stamps = []
        for s, size in enumerate(self.sizes):
            day = self.dates[s]
            moment = dt.datetime(day.year, day.month, day.day, self.rng.randint(17, 21), self.rng.randrange(60))
            for i in range(size):
                stamps.append(format_send_date(moment))
                moment += dt.timedelta(minutes=self.rng.randint(1, 3) if i % 2 == 0 else self.rng.randint(2, 6))
        self.question_moment = moment + dt.timedelta(minutes=self.rng.randint(2, 5))
        return stamps

    def generate(self) -> dict:
        builder = self.build()
        self.place(builder.plants)
        by_index = {p.index: p for p in builder.plants}
        name = {"user": self.world["user"], "assistant": self.world["char"][0]}
        stamps = self.send_dates()
        messages = []
        for i in range(self.length):
            role, plant = self.role(i), by_index.get(i)
            text = self.assistant_text(i, plant) if role == "assistant" else self.user_text(i, plant)
            messages.append({"role": role, "name": name[role], "text": text, "send_date": stamps[i]})
        questions = []
        for n, q in enumerate(builder.questions):
            query = self.lang.wrap_question(self.pick, self.slots(), q.question)
            questions.append({"id": f"{self.world['lang']}-{self.world['key']}-{n:03d}", "category": q.category,
                              "kind": q.kind, "question": q.question, "query": query,
                              "evidence": sorted(p.index for p in q.evidence),
                              "stale": sorted(p.index for p in q.stale), "answer": q.answer,
                              "stale_answer": q.stale_answer})
        labels = {"ooc_instructions": sorted([p.index, p.ooc_type] for p in builder.plants if p.ooc_type),
                  "ooc_chatter": sorted(p.index for p in builder.plants if p.label == "ooc_chatter"),
                  "lookalikes": sorted(p.index for p in builder.plants if p.label == "lookalike")}
        return {"chat_id": f"eval-{self.world['lang']}-{self.world['key']}", "lang": self.world["lang"],
                "world": self.world["key"], "user": self.world["user"], "char": self.world["char"][0],
                "question_send_date": format_send_date(self.question_moment), "messages": messages,
                "questions": questions, "labels": labels}


def generate_chat(world: dict, seed: int, min_messages: int = 1000) -> dict:
    """The chat for `world`: a pure function of (world, seed, min_messages)."""
    return Chat(world, seed, min_messages).generate()
