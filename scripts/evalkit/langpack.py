"""What differs between the English and the Chinese chats: pronoun slots, how a paragraph of narration
and dialogue is put together, how a question is wrapped into a user message. Pure; randomness comes
from the caller's `random.Random`."""

from __future__ import annotations

import collections
import random
import string

from . import facts_en, facts_zh, pools_en, pools_zh

_FORMATTER = string.Formatter()


class Slots(dict):
    """Template values; `{X_cap}` is X with its first letter capitalised. A missing slot is an error."""

    def __missing__(self, key: str) -> str:
        if key.endswith("_cap") and key[:-4] in self:
            value = str(self[key[:-4]])
            return value[:1].upper() + value[1:]
        raise KeyError(f"template slot {{{key}}} has no value")


def fill(template: str, slots: Slots) -> str:
    """`template` with its slots filled (values that are templates themselves must be filled first)."""
    return _FORMATTER.vformat(template, (), slots)


def template_slots(template: str) -> set[str]:
    """The slot names a template uses."""
    return {name for _, name, _, _ in _FORMATTER.parse(template) if name}


class Picker:
    """Random choices that avoid repeating a pool item drawn recently (a reader notices the same line twice
    within a few messages, not twice within a thousand)."""

    def __init__(self, rng: random.Random, memory: int = 40):
        self.rng = rng
        self.memory = memory
        self.recent: dict[tuple, collections.deque] = {}

    def choice(self, pool):
        pool = tuple(pool)
        recent = self.recent.setdefault(pool, collections.deque(maxlen=min(self.memory, len(pool) // 2)))
        fresh = [item for item in pool if item not in recent] or list(pool)
        item = self.rng.choice(fresh)
        recent.append(item)
        return item

    def randrange(self, *args) -> int:
        return self.rng.randrange(*args)

    def random(self) -> float:
        return self.rng.random()


class Lang:
    code = ""
    paragraphs: tuple[int, ...] = ()
    user_segments: tuple[int, ...] = ()
    pools = None
    facts = None

    def person(self, key: str, name: str, gender: str) -> dict:
        raise NotImplementedError

    def spot_slots(self, gender: str) -> dict:
        raise NotImplementedError

    def paragraph(self, pick: Picker, s: Slots) -> str:
        raise NotImplementedError

    def plant_paragraph(self, pick: Picker, s: Slots, text: str, style: str) -> str:
        raise NotImplementedError

    def user_segment(self, pick: Picker, s: Slots, line: str | None = None) -> str:
        raise NotImplementedError

    def join(self, parts: list[str]) -> str:
        raise NotImplementedError

    def wrap_question(self, pick: Picker, s: Slots, question: str) -> str:
        template = pick.choice(self.pools.QUESTION_WRAPPERS)
        s = Slots(s, q=question, ql=self.lower_first(question), ua=fill(pick.choice(self.pools.USER_ACTIONS), s))
        return fill(template, s)

    def lower_first(self, text: str) -> str:
        return text


class English(Lang):
    code = "en"
    paragraphs = (5, 6, 6, 7)      # per assistant message: about 270 tokens
    user_segments = (2, 3, 3, 4)   # per user message: about 55 tokens
    pools = pools_en
    facts = facts_en
    _QUESTION_WORDS = {"what", "where", "who", "how", "which", "is", "has", "do", "does", "did", "any"}

    def person(self, key: str, name: str, gender: str) -> dict:
        s, p, o, x = ("she", "her", "her", "herself") if gender == "f" else ("he", "his", "him", "himself")
        low, up = key.lower(), key.upper()
        return {up: name, f"{low}s": s, f"{low}p": p, f"{low}o": o, f"{low}self": x, f"{up}s": s.capitalize(),
                f"{up}p": p.capitalize()}

    def spot_slots(self, gender: str) -> dict:
        return {"s": "she" if gender == "f" else "he", "p": "her" if gender == "f" else "his"}

    def action(self, pick: Picker, s: Slots, subject: str) -> str:
        return f"{subject} {fill(pick.choice(self.pools.CHAR_ACTIONS), s)}"

    def paragraph(self, pick: Picker, s: Slots) -> str:
        pools = self.pools
        line = lambda: fill(pick.choice(pools.CHAR_LINES), s)  # noqa: E731
        form = pick.randrange(6)
        if form == 0:
            return f'*{self.action(pick, s, s["C"])}.* "{line()}"'
        if form == 1:
            return f'*{self.action(pick, s, s["C"])}, {fill(pick.choice(pools.MANNERS), s)}.* "{line()} {line()}"'
        if form == 2:
            return f'"{line()}" *{self.action(pick, s, s["Cs"])}.* "{line()}"'
        if form == 3:
            return f'*{fill(pick.choice(pools.AMBIENT + s["world"]["ambient"]), s)} {self.action(pick, s, s["C"])}.* "{line()}"'
        if form == 4 and pick.random() < 0.5:
            local = fill(pick.choice(s["world"]["local_lines"]), s)
            return f'"{local}" *{s["Cs"]} {pick.choice(pools.SAYS)}, {fill(pick.choice(pools.SPEECH_MANNERS), s)}.*'
        return f'*{self.action(pick, s, s["C"])}.* "{line()}" *{self.action(pick, s, s["Cs"])}.* "{line()}"'

    def plant_paragraph(self, pick: Picker, s: Slots, text: str, style: str) -> str:
        if style == "narration":
            return f'{text} "{fill(pick.choice(self.pools.CHAR_LINES), s)}"'
        if style == "answer":
            return f'*{self.action(pick, s, s["C"])}.* "{text}"'
        form = pick.randrange(3)
        if form == 0:
            return f'*{self.action(pick, s, s["C"])}.* "{text}"'
        if form == 1:
            return f'"{text}" *{self.action(pick, s, s["Cs"])}.*'
        return f'*{self.action(pick, s, s["C"])}, {fill(pick.choice(self.pools.MANNERS), s)}.* ' \
               f'"{fill(pick.choice(self.pools.CHAR_LINES), s)} {text}"'

    def user_segment(self, pick: Picker, s: Slots, line: str | None = None) -> str:
        line = line if line is not None else fill(pick.choice(self.pools.USER_LINES), s)
        return f'*{fill(pick.choice(self.pools.USER_ACTIONS), s)}.* "{line}"'

    def join(self, parts: list[str]) -> str:
        return " ".join(parts)

    def lower_first(self, text: str) -> str:
        first = text.split(" ", 1)[0].strip("?,.").lower()
        return text[:1].lower() + text[1:] if first in self._QUESTION_WORDS else text


class Chinese(Lang):
    code = "zh"
    paragraphs = (3, 4, 4, 5)
    user_segments = (1, 2, 2, 3)
    pools = pools_zh
    facts = facts_zh

    def person(self, key: str, name: str, gender: str) -> dict:
        pronoun = "她" if gender == "f" else "他"
        low = key.lower()
        slots = {key.upper(): name, f"{low}t": pronoun}
        if low == "c":
            slots["co"] = pronoun
        return slots

    def spot_slots(self, gender: str) -> dict:
        return {"t": "她" if gender == "f" else "他"}

    def action(self, pick: Picker, s: Slots) -> str:
        subject = s["C"] if pick.random() < 0.6 else s["co"]
        return f"{subject}{fill(pick.choice(self.pools.CHAR_ACTIONS), s)}"

    def paragraph(self, pick: Picker, s: Slots) -> str:
        pools = self.pools
        line = lambda: fill(pick.choice(pools.CHAR_LINES), s)  # noqa: E731
        form = pick.randrange(6)
        if form == 0:
            return f"*{self.action(pick, s)}。*“{line()}”"
        if form == 1:
            return f"*{self.action(pick, s)}。*“{line()}{line()}”"
        if form == 2:
            manner, say = fill(pick.choice(pools.MANNERS), s), pick.choice(pools.SAYS)
            return f"“{line()}”{s['C']}{manner}{say}，“{line()}”"
        if form == 3:
            return f"*{fill(pick.choice(pools.AMBIENT + s['world']['ambient']), s)}{self.action(pick, s)}。*“{line()}”"
        if form == 4 and pick.random() < 0.5:
            return f"“{fill(pick.choice(s['world']['local_lines']), s)}”{self.action(pick, s)}。"
        return f"*{self.action(pick, s)}。*“{line()}”*{self.action(pick, s)}。*“{line()}”"

    def plant_paragraph(self, pick: Picker, s: Slots, text: str, style: str) -> str:
        if style == "narration":
            return f"{text}“{fill(pick.choice(self.pools.CHAR_LINES), s)}”"
        if style == "answer":
            return f"*{self.action(pick, s)}。*“{text}”"
        form = pick.randrange(3)
        if form == 0:
            return f"*{self.action(pick, s)}。*“{text}”"
        if form == 1:
            return f"“{text}”{s['C']}{fill(pick.choice(self.pools.MANNERS), s)}{pick.choice(self.pools.SAYS)}。"
        return f"*{self.action(pick, s)}。*“{fill(pick.choice(self.pools.CHAR_LINES), s)}{text}”"

    def user_segment(self, pick: Picker, s: Slots, line: str | None = None) -> str:
        line = line if line is not None else fill(pick.choice(self.pools.USER_LINES), s)
        return f"*{fill(pick.choice(self.pools.USER_ACTIONS), s)}。*“{line}”"

    def join(self, parts: list[str]) -> str:
        return "".join(parts)


LANGS = {"en": English(), "zh": Chinese()}
