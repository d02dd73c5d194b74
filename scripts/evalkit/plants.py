"""What a chat carries besides small talk: planted sentences (evidence, distractors, stale facts,
date anchors, out-of-character lines) and the questions about them.

Builders only decide *what* is said and in which sessions it may be said; chatgen places each plant in a
message and then knows its index. Each person gets each attribute (job, home, origin, ...) at most once
per chat, so no two planted facts contradict each other unless a correction says so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random

from .langpack import Lang, Slots, fill
from .stdate import absolute_phrase, relative_phrase


@dataclasses.dataclass(eq=False)
class Plant:
    text: str
    role: str                         # user | assistant
    style: str                        # speech | narration | answer | ask_turn | user_speech | ooc | lookalike
    sessions: tuple[int, ...]         # where it may go
    label: str                        # evidence | distractor | stale | anchor | ooc | ooc_chatter | lookalike
    ooc_type: str | None = None       # real out-of-character instructions: their directive type
    after: "Plant | None" = None      # must be the message right after this one (a two-turn exchange)
    index: int | None = None


@dataclasses.dataclass
class Question:
    category: str                     # fact | date | multihop | context | update
    kind: str
    question: str
    evidence: list[Plant]
    stale: list[Plant] = dataclasses.field(default_factory=list)
    answer: str = ""
    stale_answer: str = ""


class Builder:
    """Shared state of one chat's plants: the cast, what each person already has, session layout."""

    def __init__(self, rng: random.Random, lang: Lang, world: dict, dates: list[dt.date], anchors: dict):
        self.rng, self.lang, self.world, self.dates, self.anchors = rng, lang, world, dates, anchors
        self.n_sessions = len(dates)
        self.today = dates[-1]
        self.attributes: set[tuple[str, str]] = set()
        self.used: dict[str, set] = {}
        self.plants: list[Plant] = []
        self.questions: list[Question] = []
        self.base = Slots(world=world, U=world["user"], **lang.person("C", *world["char"]))

    # -- picking values ---------------------------------------------------------------------------
    def person(self, attribute: str | None = None, exclude=()) -> tuple[str, str]:
        """A cast member who has no `attribute` yet (and claim it)."""
        choices = [p for p in self.world["npcs"] if p[0] not in exclude
                   and (attribute is None or (p[0], attribute) not in self.attributes)]
        name, gender = self.rng.choice(choices)
        if attribute:
            self.attributes.add((name, attribute))
        return name, gender

    def fresh(self, pool_key: str, pool, exclude=()) -> str:
        """A value of `pool` not yet used under `pool_key` (wraps around when the pool runs out)."""
        used = self.used.setdefault(pool_key, set())
        choices = [v for v in pool if v not in used and v not in exclude] or [v for v in pool if v not in exclude]
        value = self.rng.choice(choices)
        used.add(value)
        return value

    def pick(self, pool, k: int = 1) -> list:
        return self.rng.sample(list(pool), k)

    def slots(self, **people) -> Slots:
        s = Slots(self.base)
        for key, (name, gender) in people.items():
            s.update(self.lang.person(key, name, gender))
        p1, p2, p3 = self.pick(self.world["places"], 3)
        t1, t2 = self.pick(self.world["towns"], 2)
        s.update(P=p1, P2=p2, P3=p3, T=t1, T2=t2, F=self.rng.choice(self.world["foods"]),
                 D=self.rng.choice(self.world["drinks"]), O=self.rng.choice(self.world["mundane"]))
        return s

    def spot(self, gender: str, exclude=()) -> tuple[str, str]:
        """A hiding spot not used yet (not one of `exclude`), as (template, text for this person)."""
        raw = self.fresh("spot", self.world["spots"], exclude)
        return raw, fill(raw, Slots(self.lang.spot_slots(gender)))

    def sessions(self, first: int = 0, last: int | None = None) -> tuple[int, ...]:
        last = self.n_sessions - 1 if last is None else last
        return tuple(range(max(0, first), min(self.n_sessions - 1, last) + 1))

    def spread(self, k: int) -> list[int]:
        """k distinct sessions in story order."""
        return sorted(self.rng.sample(range(self.n_sessions), k))

    def plant(self, text: str, role: str, style: str, sessions, label: str, **kw) -> Plant:
        p = Plant(text, role, style, tuple(sessions), label, **kw)
        self.plants.append(p)
        return p

    def speaker(self, p_user: float = 0.25) -> tuple[str, str]:
        return ("user", "user_speech") if self.rng.random() < p_user else ("assistant", "speech")

    # -- value sets ---------------------------------------------------------------------------------
    def amount(self) -> str:
        cur = self.world["currency"]
        if self.lang.code == "zh":
            return f"{self.rng.choice(self.lang.facts.AMOUNTS)}{self.rng.choice(cur)}"
        return f"{self.rng.choice((12, 30, 40, 75, 120, 200))} {self.rng.choice(cur)}"

    def code(self) -> str:
        digits = [str(self.rng.randrange(10)) for _ in range(4)]
        return "".join(digits) if self.lang.code == "zh" else "-".join(digits)

    def fact_slots(self, kind: str) -> Slots:
        attribute = {"job": "job", "origin": "origin", "fear": "fear", "pet": "pet", "food": "food",
                     "debt": "debt"}.get(kind)
        n = self.person(attribute)
        m = self.person(exclude=(n[0],))
        k = self.person(exclude=(n[0], m[0]))
        s = self.slots(N=n, M=m, K=k)
        w, f = self.world, self.lang.facts
        o_pool = f.LOCKABLES if kind == "code" else w["objects"]
        s["O"] = self.fresh("object", o_pool)
        s.update(O2=self.rng.choice([o for o in o_pool if o != s["O"]]),
                 J=self.fresh("job", w["jobs"]), X=self.fresh("fear", w["fears"]),
                 A=self.rng.choice(w["animals"]), Name=self.fresh("pet", w["pet_names"]), AMT=self.amount(),
                 AMT2=self.amount(), NUM=self.code(), NUM2=self.code(), F=self.fresh("food", w["foods"]))
        s.update(X2=self.rng.choice([x for x in w["fears"] if x != s["X"]]),
                 Name2=self.rng.choice([x for x in w["pet_names"] if x != s["Name"]]),
                 F2=self.rng.choice([x for x in w["foods"] if x != s["F"]]),
                 J2=self.fresh("job", w["jobs"], exclude=(s["J"],)))
        raw, s["L"] = self.spot(n[1])
        s["L2"] = self.spot(m[1], exclude=(raw,))[1]
        return s

    # -- categories -----------------------------------------------------------------------------
    def facts(self, count: int) -> None:
        facts = self.lang.facts.FACTS
        kinds = [list(facts)[i % len(facts)] for i in range(count)]
        answer_key = {"hide": "L", "job": "J", "origin": "T", "fear": "X", "gift": "N", "code": "NUM", "pet": "Name",
                      "food": "F", "debt": "AMT"}
        for kind in kinds:
            spec, s = facts[kind], self.fact_slots(kind)
            role, style = ("assistant", "speech") if kind == "gift" else self.speaker()
            evidence = self.plant(fill(self.rng.choice(spec["state"]), s), role, style, self.sessions(), "evidence")
            for template in self.pick(spec["near"], 2):
                role, style = ("assistant", "speech") if kind == "gift" else self.speaker()
                self.plant(fill(template, s), role, style, self.sessions(), "distractor")
            self.questions.append(Question("fact", kind, fill(self.rng.choice(spec["ask"]), s), [evidence],
                                           answer=s[answer_key[kind]]))

    def updates(self, count: int) -> None:
        specs, f = self.lang.facts.UPDATES, self.lang.facts
        kinds = [list(specs)[i % len(specs)] for i in range(count)]
        for kind in kinds:
            spec = specs[kind]
            attribute = {"meet": None, "moved": None, "ooc_fix": "eyes", "ooc_hair": "hair"}.get(kind, kind)
            n = self.person(attribute)
            m = self.person("partner" if kind == "partner" else None, exclude=(n[0],))
            k = self.person(exclude=(n[0], m[0]))
            s = self.slots(N=n, M=m, K=k)
            colours = f.EYE_COLOURS if kind == "ooc_fix" else f.HAIR_COLOURS
            v, v2 = self.pick(colours, 2)
            s["J"] = self.fresh("job", self.world["jobs"])
            s.update(J2=self.fresh("job", self.world["jobs"], exclude=(s["J"],)), TIME=self.rng.choice(f.TIMES),
                     O=self.fresh("object", self.world["objects"]), V=v, V2=v2)
            raw, s["L"] = self.spot(n[1])
            s["L2"] = self.spot(n[1], exclude=(raw,))[1]
            old_s = self.rng.randrange(0, self.n_sessions - 3)
            new_s = self.rng.randrange(old_s + 2, self.n_sessions)
            ooc = kind.startswith("ooc")
            old = self.plant(fill(self.rng.choice(spec["old"]), s), "assistant", "narration" if ooc else "speech",
                             (old_s,), "stale")
            if ooc:
                new = self.plant(fill(self.rng.choice(spec["new"]), s), "user", "ooc", (new_s,), "evidence",
                                 ooc_type="correction")
            else:
                role, style = self.speaker()
                new = self.plant(fill(self.rng.choice(spec["new"]), s), role, style, (new_s,), "evidence")
            answer, stale = {"meet": ("P2", "P"), "job": ("J2", "J"), "home": ("P2", "P"), "moved": ("L2", "L"),
                             "partner": ("K", "M"), "ooc_fix": ("V2", "V"), "ooc_hair": ("V2", "V")}[kind]
            self.questions.append(Question("update", kind, fill(self.rng.choice(spec["ask"]), s), [new], [old],
                                           answer=s[answer], stale_answer=s[stale]))

    def multihop(self, count: int) -> None:
        specs, f = self.lang.facts.MULTIHOP, self.lang.facts
        kinds = [list(specs)[i % len(specs)] for i in range(count)]
        for kind in kinds:
            spec = specs[kind]
            attribute = {"family": "family", "roommate": "home", "hometown": "origin"}.get(kind)
            n = self.person(attribute)
            sib = self.person({"family": "family", "roommate": "home", "seller": "job"}.get(kind), exclude=(n[0],))
            s = self.slots(N=n, S=sib, M=self.person(exclude=(n[0], sib[0])))
            rel2, rel2_gender = self.rng.choice(f.PARENTS)
            instrument = self.rng.choice(self.world["instruments"])
            town_i = self.world["towns"].index(self.fresh("hometown", self.world["towns"]))
            s.update(REL=f.RELATIVES[sib[1]], REL2=rel2, O=self.fresh("object", self.world["objects"]),
                     J=self.fresh("job", self.world["jobs"]), INSTR=instrument,
                     IV=getattr(f, "INSTRUMENT_VERBS", {}).get(instrument, ""),
                     T=self.world["towns"][town_i], FAME=self.world["town_fame"][town_i])
            part_slots = Slots(s, rp=("her" if rel2_gender == "f" else "his"))
            s.update(INTRO=fill(self.rng.choice(f.INTROS), s), INJ=fill(self.rng.choice(f.INJURIES), part_slots),
                     INJ2=fill(self.rng.choice(f.PARENT_INJURIES), part_slots))
            parts = []
            for i, (template, session) in enumerate(zip(spec["parts"], self.spread(len(spec["parts"])))):
                first_person = kind == "seller" and i == 0
                role, style = ("assistant", "speech") if first_person else self.speaker()
                parts.append(self.plant(fill(template, s), role, style, (session,), "evidence"))
            answer = {"family": "{S}; {REL2}", "seller": "{J}", "searched": "{P}, {P2}, {P3}", "roommate": "{INSTR}",
                      "hometown": "{FAME}"}[kind]
            self.questions.append(Question("multihop", kind, fill(self.rng.choice(spec["ask"]), s), parts,
                                           answer=fill(answer, s)))

    def context(self, count: int) -> None:
        specs = self.lang.facts.CONTEXT
        kinds = [list(specs)[i % len(specs)] for i in range(count)]
        for kind in kinds:
            spec = specs[kind]
            s = self.slots(N=self.person(), M=self.person())
            s.update(B=self.fresh(f"ctx-{kind}", spec.get("values", ("",))), T=self.fresh("trip", self.world["towns"]))
            answer = fill(self.fresh(f"ctx-answer-{kind}", spec["answers"]), s)
            session = self.rng.randrange(self.n_sessions)
            ask = self.plant(fill(self.rng.choice(spec["ask_turn"]), s), "user", "ask_turn", (session,), "evidence")
            reply = self.plant(answer, "assistant", "answer", (session,), "evidence", after=ask)
            self.questions.append(Question("context", kind, fill(self.rng.choice(spec["ask"]), s), [ask, reply],
                                           answer=answer))

    def dated(self, series_kinds: list[str], modes: list[str]) -> None:
        """Event series (three similar events of one subject on three dates); two of them are asked about,
        by `modes`: abs (a calendar date), yest (a calendar date; the message says "yesterday"), rel ("four
        days ago", from the last session), fest_a / fest_b (the day after a festival), storm (the day before)."""
        specs, f = self.lang.facts.SERIES, self.lang.facts
        w = self.world
        for kind, (mode_a, mode_b) in zip(series_kinds, zip(modes[::2], modes[1::2])):
            spec = specs[kind]
            n = self.person()
            s = self.slots(N=n, M=self.person(exclude=(n[0],)))
            s["MARKET"] = w["market"]
            taken: set[dt.date] = set()
            for i, event in enumerate(self.pick(spec["events"], 3)):
                mode = (mode_a, mode_b, None)[i]
                session, form = self.event_session(mode, taken)
                day = self.dates[session] - dt.timedelta(days=1 if form == "yesterday" else 0)
                taken.add(day)
                ev = fill(event, s)
                es = Slots(s, EV=ev)
                plant = self.plant(fill(self.rng.choice(spec[form]), es), *self.speaker(0.15), (session,),
                                   "evidence" if mode else "distractor")
                if mode is None:
                    continue
                if mode in ("fest_a", "fest_b", "storm"):
                    anchor = "storm" if mode == "storm" else "festival"
                    date_text = fill(f.ANCHOR_ASK[anchor], Slots(FEST=self.anchors[mode][1], STORM=w["storm"]))
                elif mode == "rel":
                    date_text = relative_phrase(day, self.today, self.lang.code, self.rng.randrange(2))
                else:
                    date_text = absolute_phrase(day, self.lang.code, self.rng.randrange(2))
                question = fill(self.rng.choice(spec["ask"]), Slots(es, DATE=date_text))
                self.questions.append(Question("date", f"{kind}/{mode}", question, [plant], answer=ev))

    def event_session(self, mode: str | None, taken: set[dt.date]) -> tuple[int, str]:
        last = self.n_sessions - 1
        for _ in range(200):
            if mode in ("fest_a", "fest_b"):
                session, form = self.anchors[mode][0] + 1, "today"
            elif mode == "storm":
                session, form = self.anchors[mode][0] - 1, "today"
            elif mode == "rel":
                near = [i for i in range(last) if 1 <= (self.today - self.dates[i]).days <= 10]
                session, form = self.rng.choice(near), "today"
            elif mode == "abs":
                session, form = self.rng.randrange(last), "today"
            elif mode == "yest":
                session, form = self.rng.randrange(1, last), "yesterday"
            else:
                session, form = self.rng.randrange(last), self.rng.choice(("today", "yesterday"))
            day = self.dates[session] - dt.timedelta(days=1 if form == "yesterday" else 0)
            if day not in taken and all(abs((day - t).days) > 1 for t in taken):
                return session, form
        raise RuntimeError(f"no session for a {mode} event")

    def anchor_lines(self) -> None:
        lines = self.lang.facts.ANCHOR_LINES
        for mode, (session, name) in self.anchors.items():
            kind = "storm" if mode == "storm" else "festival"
            s = Slots(self.base, FEST=name, STORM=self.world["storm"])
            for template in self.pick(lines[kind], 2):
                self.plant(fill(template, s), "assistant", "speech", (session,), "anchor")

    def out_of_character(self, counts: dict[str, int], chatter: int, lookalikes: int) -> None:
        pools = self.lang.pools
        for type_, k in counts.items():
            for template in self.pick(pools.OOC_INSTRUCTIONS[type_], min(k, len(pools.OOC_INSTRUCTIONS[type_]))):
                s = self.slots(N=self.person(), M=self.person())
                self.plant(fill(template, s), "user", "ooc", self.sessions(), "ooc", ooc_type=type_)
        for template in (self.pick(pools.OOC_CHATTER, chatter)):
            self.plant(fill(template, self.slots(N=self.person())), "user", "ooc", self.sessions(), "ooc_chatter")
        for template in self.pick(pools.IC_LOOKALIKES, lookalikes):
            self.plant(fill(template, self.slots(N=self.person())), "user", "lookalike", self.sessions(), "lookalike")
