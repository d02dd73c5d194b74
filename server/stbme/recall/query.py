"""The query a recall searches with. The user's new input leads: its roleplay actions (`*I look out of the
window.*`) are cut, since they match every other message with the same gestures; a question in several
parts is split, each part searched on its own; recent turns never dilute it, they only lend their names
(in a keyword list of their own, at half weight) when the input refers back to them ("what did she say
about it?"); and the time it asks about ("the day after the festival", "六天前") is read apart, so the rest
is searched as topic words.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Callable

from ..index.lexical import words_of_terms
from ..pipeline.heuristic import candidate_names, split_chunks
from ..pipeline.timeline import QueryTime, query_time
from ..tokens import count_tokens

MAX_PARTS = 3
# A long input (a long message, pasted history) is searched by its windows of sentences, not as one blob
# whose vector says little and whose first part would crowd out the rest: its last line leads (what it
# ends by saying or asking: the newest lines of pasted history), then the windows of the rest with the most
# of the chat's rarer words; at most LONG_WINDOWS of about WINDOW_TOKENS each, in the input's order.
LONG_INPUT_TOKENS = 96
WINDOW_TOKENS = 64
LONG_WINDOWS = 4
BORROWED_TERMS = 3   # rare terms of the recent turns an input that names nothing leans on
MIN_CLEAN_CHARS = 6                      # an input that is only an action keeps its action
_ACTION = re.compile(r"\*[^*\n]{1,600}\*|（[^（）\n]{1,200}）(?=\s*[“\"「])")
_QUOTES = re.compile(r"[\"“”「」『』]")
_PRONOUNS_EN = frozenset("he she him her his hers it its they them their that there this those these".split())
_PRONOUNS_ZH = ("他", "她", "它", "那里", "这里", "那个", "这个", "那儿", "这儿", "那件", "这件", "那时", "那次")
# A new question after a question mark, a semicolon or a connective: split there (English and Chinese).
_PART_BREAK = re.compile(r"(?<=[?？;；])\s*|[,，]\s*(?:and|also|plus)\s+(?=(?:what|where|who|when|why|how|did|does|"
                         r"do|is|was|were|are|can|could)\b)|(?:还有|另外|以及|再说)(?=[\u4e00-\u9fff])", re.I)
_WORD = re.compile(r"[A-Za-z0-9']+|[\u4e00-\u9fff]")


@dataclasses.dataclass
class QueryPlan:
    text: str                        # the input without actions: what keywords and the vector search
    parts: list[str]                 # the sub-questions (at least `[topic]`)
    topic: str                       # the text without the time expression
    time: QueryTime | None = None
    # Names of the last turn (or else the recent turns' rarest words), for an input that refers back to it:
    # searched as a list of their own, at a lower weight, so a wrong guess never replaces what the input finds.
    borrowed_names: list[str] = dataclasses.field(default_factory=list)
    # Each part's share of the keyword and vector weights (a long input's lead 1, the rest less); none: all 1.
    part_weights: list[float] = dataclasses.field(default_factory=list)

    def part_weight(self, i: int) -> float:
        return self.part_weights[i] if i < len(self.part_weights) else 1.0

    @property
    def reference(self) -> str | None:
        return f"{self.topic} {' '.join(self.borrowed_names)}" if self.borrowed_names else None


def _said(text: str) -> str:
    """The text without roleplay actions and quote marks, its whitespace made single spaces."""
    return re.sub(r"\s+", " ", _QUOTES.sub(" ", _ACTION.sub(" ", text))).strip()


def clean_input(text: str) -> str:
    """The input without roleplay actions and quote marks; the input itself when nothing else is left."""
    cleaned = _said(text)
    return cleaned if len(cleaned) >= MIN_CLEAN_CHARS else re.sub(r"\s+", " ", _QUOTES.sub(" ", text)).strip()


def split_parts(text: str) -> list[str]:
    """A question in several parts, each part with enough words to be searched alone (at most 3)."""
    parts = [p.strip(" ,，") for p in _PART_BREAK.split(text) if p and p.strip(" ,，")]
    parts = [p for p in parts if len(_WORD.findall(p)) >= 3]
    return parts[:MAX_PARTS] if len(parts) > 1 else [text]


def salient_windows(text: str, weights: Callable[[str], dict[str, float]] | None,
                    most: int = LONG_WINDOWS) -> list[str]:
    """The windows of a long input that carry most of what it says: by the summed weight of their terms in
    the chat (`weights(text)`: term -> idf), at most `most`, in the input's order; without weights, its
    last windows (the newest lines of pasted history)."""
    pieces = split_chunks(text, WINDOW_TOKENS)   # consecutive sentences, about WINDOW_TOKENS each
    if len(pieces) <= most:
        return pieces
    if weights is None:
        return pieces[-most:]
    mass = [sum(weights(piece).values()) for piece in pieces]
    best = sorted(range(len(pieces)), key=lambda i: (-mass[i], -i))[:most]
    return [pieces[i] for i in sorted(best)]


def last_said_line(text: str) -> str:
    """The input's last line that says something once its actions are cut: a roleplay message often ends
    with one ("*I lean closer, waiting.*") after the question it asks."""
    for line in reversed(text.splitlines()):
        said = _said(line)
        if said:
            return said
    return ""


def long_input_parts(searched: str, last_line: str, weights: Callable[[str], dict[str, float]] | None,
                     rest_weight: float | None) -> tuple[list[str], list[float]]:
    """The parts of a long input and their weights: its last line (at most its last window) at full weight,
    then the salient windows of the rest at `rest_weight`. Without a lead (`rest_weight` None, a last line
    of under three words, or one the searched text does not end with), the salient windows, all at 1."""
    lead = split_chunks(last_line, WINDOW_TOKENS)[-1] if last_line else ""
    if rest_weight is None or len(_WORD.findall(lead)) < 3 or not searched.endswith(lead):
        windows = salient_windows(searched, weights)
        return windows, [1.0] * len(windows)
    rest = searched[:-len(lead)].strip()
    windows = salient_windows(rest, weights, LONG_WINDOWS - 1) if rest else []
    return [*windows, lead], [rest_weight] * len(windows) + [1.0]


def refers_back(text: str) -> bool:
    """Does the input lean on something said before (a pronoun, 'there', 那里) and name nobody itself?"""
    words = {w.lower() for w in re.findall(r"[A-Za-z']+", text)}
    if words & _PRONOUNS_EN and not candidate_names(text):
        return True
    return any(p in text for p in _PRONOUNS_ZH) and not candidate_names(text)


def rare_terms_of_recent(cleaned: str, recent: list[str], weights: Callable[[str], dict[str, float]],
                         leans_back: bool = False) -> list[str]:
    """For an input that names nothing as rare as the turns before it do ("导演是谁呢？" after three turns about
    《恋恋笔记本》, "and what did he do then?"): the rarest terms of those turns, which it leans on, as the words
    they came from (lexical.words_of_terms).
    `leans_back` (the input says it refers back, 它 or "there", and no name was found to lend): borrow even
    when it has a rare term of its own; in Chinese a bigram of the question ("费吗") is as rare as a name."""
    own = weights(cleaned)
    theirs: dict[str, float] = {}
    said = [clean_input(turn) for turn in recent]
    for text in said:
        for term, weight in weights(text).items():
            theirs[term] = max(weight, theirs.get(term, 0.0))
    top = [t for t in sorted(theirs, key=lambda t: (-theirs[t], t)) if t not in own][:BORROWED_TERMS]
    if not top or (not leans_back and theirs[top[0]] <= max(own.values(), default=0.0)):
        return []   # the input names something as rare itself: it needs nothing borrowed
    # As the words they came from: what is borrowed is searched as text, and a term is never stemmed twice.
    words = words_of_terms(top, said)
    return [words.get(t, t) for t in top]


def plan_query(text: str, recent: list[str], *, now: dt.date | None, lang: str,
               find_anchor: Callable[[str], dt.date | None] | None = None,
               weights: Callable[[str], dict[str, float]] | None = None, borrow_terms: bool = False,
               search_time_words: bool = False, long_rest_weight: float | None = None) -> QueryPlan:
    """What to search for `text` (the user's new input); `recent` are the last turns, newest first;
    `weights(text)` gives its terms' weight in the chat (for a long input's salient parts, and with
    `borrow_terms` for the rare terms of the recent turns an input leans on). `search_time_words`: the
    time expression stays in the parts searched by keywords and vectors ("on 31 Dec" is also New Year's
    Eve); the days it names are searched apart all the same. `long_rest_weight`: a long input's last line
    leads and the rest's windows weigh this much (None: no lead)."""
    cleaned = clean_input(text)
    borrowed: list[str] = []
    leans_back = bool(cleaned and recent and refers_back(cleaned))
    if leans_back:
        borrowed = sorted(candidate_names(clean_input(recent[0])))[:3]
    if cleaned and recent and not borrowed and borrow_terms and weights is not None:
        borrowed = rare_terms_of_recent(cleaned, recent, weights, leans_back=leans_back)
    when = query_time(cleaned, now, lang, find_anchor) if now is not None and cleaned else None
    topic = when.topic if when is not None and when.topic.strip() else cleaned
    searched = cleaned if search_time_words else topic
    part_weights: list[float] = []
    if count_tokens(searched) > LONG_INPUT_TOKENS:
        parts, part_weights = long_input_parts(searched, last_said_line(text), weights, long_rest_weight)
    else:
        parts = split_parts(searched)
    return QueryPlan(cleaned, parts or [searched], topic, when, borrowed, part_weights if parts else [])
