"""Questions about how things stand now, and the memories that say something changed.

"Where is Mara living now?" wants the last word on Mara's lodging, and a long chat holds every earlier one
too: "Mara rents the room above the bakery" matches the question as well as "Mara packed up and left the
bakery; she found a place by the docks", and is older. For a question that asks about the present, the
candidates with a sentence that names the question's subject and says it changed ("moved", "quit", "now",
"instead", "not X any more", 搬, 改, 不再, 现在 ...) form one more list for fusion, newest first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..alternation import alternation
from ..graph.model import field_text, node_text
from ..index import LexicalIndex
from ..index.lexical import odd_stems, tokenize
from .candidates import Ranking
from .snippet import sentences

_NOW_EN = re.compile(r"\b(now|nowadays|these days|today|currently|at the moment|any ?more|still|lately|"
                     r"at present|right now)\b", re.I)
_NOW_ZH = re.compile(r"现在|如今|目前|眼下|这些天|这几天|最近|今天|还在|而今|当下")
_CHANGE_WORDS = [
    "now", "instead", "any ?more", "no longer", "not any more", "these days", "nowadays", "lately", "since",
    "ever since", "moved", "moving", r"move[sd]? (?:in|out)", "relocated", "quit", "left", "leaving", "gave up",
    "changed?", "switched", "swapped", "replaced", "packed up", "walked out", "broke (?:it )?off", "broken up",
    "split up", "finished", "over between", "is over", r"took (?:it|the)\b.*\b(?:and )?put",
    "found a (?:new )?(?:place|job)", "new (?:place|job|home|spot)", "got a (?:new )?job",
    "started (?:working|seeing|living)", "correction", "fix", "rather", "actually"]
# For lowercased text: one re.I alternation took five times as long (alternation.py, docs/evaluation.md).
_CHANGE_EN = re.compile(rf"\b{alternation(_CHANGE_WORDS)}\b")
_NOT_INSTEAD = re.compile(r",\s*not\s+\w")   # "Her eyes are green, not grey."
_CHANGE_ZH_PHRASES = (r"现在|如今|目前|最近|后来|改|换|搬|挪|转行|不再|已经|早就|不干了|不在|散了|断了|分手|分开|"
                      r"分道扬镳|离开|走了|辞了|不是.{1,12}[，,]?(?:而)?是|更正|修正|纠正|其实").split("|")
_CHANGE_ZH = re.compile("|".join(_CHANGE_ZH_PHRASES))
SUBJECT_TERMS = 2   # the question's rarest terms: one of them must be in the changing sentence
# A match of the patterns above holds one of these English words whole, or begins with a Chinese phrase's leading
# characters (all of it but "不是 ... 是"'s gap, which a cut name can shorten). A memory whose fields hold none says
# no change, whatever its vocatives: what graph.attribution cuts never joins two words, nor two Chinese
# characters (each cut has a mark, a space or the text's edge on one side). Its spoken text is then never built
# (read_path._latest). Keep the cues with the patterns: test_read_path checks each phrase against them.
_CHANGE_CUE_WORDS = [
    "now", "instead", "any", "anymore", "no", "not", "these", "nowadays", "lately", "since", "moved", "moving",
    "move", "moves", "relocated", "quit", "left", "leaving", "gave", "change", "changed", "switched", "swapped",
    "replaced", "packed", "walked", "broke", "broken", "split", "finished", "over", "took", "found", "new", "got",
    "started", "correction", "fix", "rather", "actually"]
_CHANGE_CUE_WORDS_ZH = [re.match(r"[\u4e00-\u9fff]+", phrase).group() for phrase in _CHANGE_ZH_PHRASES]
# ASCII word boundaries: in Unicode a word beside a CJK character has no \b there, and may have one once a name
# between is cut.
_CHANGE_CUES = re.compile(rf"(?a)\b{alternation(_CHANGE_CUE_WORDS)}\b|{alternation(_CHANGE_CUE_WORDS_ZH)}")


def asks_about_now(text: str) -> bool:
    return bool(_NOW_EN.search(text) or _NOW_ZH.search(text))


def subject_terms(lexical: LexicalIndex, topic: str, names: Iterable[str] = ()) -> list[str]:
    """The question's subject in this chat's terms, present-tense cues left out: the terms of the chat's names it
    mentions (`names`) first, then its rarest terms, SUBJECT_TERMS in all (every name's at least). By rarity
    alone a filler word wins over a name the chat says often: "Wait. Who is Dagny seeing these days?" had the
    subject "wait", "see", and "Dagny and Aldric are finished." was no change of it."""
    bare = _NOW_ZH.sub(" ", _NOW_EN.sub(" ", topic))
    weights = lexical.term_weights(bare)
    named = list(dict.fromkeys(t for name in names for t in tokenize(name) if t in weights))
    rest = sorted((t for t in weights if t not in named), key=lambda t: (-weights[t], t))
    return (named + rest)[:max(SUBJECT_TERMS, len(named))]


def field_words(fields: dict) -> str:
    """A memory's fields (names and values), lowercased, joined by spaces. Every word of its searched text
    (graph.model.node_text) is a word here: that text adds only the field names, the speaker (a field) and
    punctuation, and what it drops (a vocative, the comma and spaces around it) never joins two words."""
    return " ".join([*fields, *map(_words_of, fields.values())]).lower()


def names_any(words: str, subject: list[str]) -> bool:
    """Whether a memory's `field_words` hold a subject term. A stem that is not a part of its word ("dagni" of
    "Dagny") is not found here: the caller asks the index for those."""
    return any(term in words for term in subject)


def may_say_a_change(words: str) -> bool:
    """False when a memory's `field_words` cannot say a change: no cue of the change patterns in them. Its spoken
    text holds only their words, so it cannot either."""
    return _CHANGE_CUES.search(words) is not None


def _words_of(value) -> str:
    """A field value's text, joined by spaces where field_text would join by commas: a subject term is made of
    word characters, so only the words matter. field_text recursed into each name of a list: reading the fields
    for the subject took 0.23 of 1.17 s of 100 questions about now at 10,000 memories (cProfile), 0.12 s without."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return " ".join(value)
    return field_text(value)


def holds_any(text: str, folded: str, subject: list[str]) -> bool:
    """Whether `text` (`folded`: lowercased) holds a subject term: as a part of it (a term given by hand, such as
    周掌柜, longer than a CJK pair, too), or as one of its stems that are not a part of their word ("dagni" of
    "Dagny"; lexical.odd_stems)."""
    return any(term in folded for term in subject) or not odd_stems(text).isdisjoint(subject)


def _says_a_change(folded: str) -> bool:
    """Whether a lowercased text says something changed, in English or Chinese. (Lowercased, not searched with
    re.I: five times faster. The two differ only on a capital whose lowercase is two characters, such as the
    Turkish "İ".)"""
    return bool(_CHANGE_EN.search(folded) or _NOT_INSTEAD.search(folded) or _CHANGE_ZH.search(folded))


def states_a_change(text: str, subject: list[str]) -> bool:
    """Does a sentence of `text` name the subject and say it changed? The change patterns run first: a
    sentence's odd stems (holds_any) cost more, and are read only for a sentence that says a change. And first
    over the whole text: a sentence's match is one of the text too (snippet.sentences cuts only after
    punctuation or at a line break, so a sentence's word boundaries hold in the text, and no pattern looks past
    its match), and many candidates say no change anywhere."""
    if not _says_a_change(text.lower()):
        return False
    for sentence in sentences(text):
        folded = sentence.lower()
        if _says_a_change(folded) and holds_any(sentence, folded, subject):
            return True
    return False


def spoken_text(fields: dict) -> str:
    """A memory's searched text (graph.model.node_text) without the speaker's name it opens with: who said
    something is no mention of them. With it, for a question about a chat's speaker ("What is Akib working on
    these days?") every message of theirs named the subject, and each first sentence with a "now" or an
    "actually" ("Akib: I'm sitting in my room right now") counted as a change; REALTALK rt9-69's top three were
    such chatter. A change of a speaker said by the other one ("Akib quit the lab") still names them."""
    text = node_text(fields)
    speaker = field_text(fields.get("speaker"))
    return text[len(speaker) + 2:] if speaker and text.startswith(f"{speaker}: ") else text


def latest_ranking(texts: dict[str, tuple[str, int | None]], *, subject: list[str],
                   weight: float) -> Ranking | None:
    """Of the candidates ({id: (spoken_text, message index)}), those that state a change of the question's subject
    (subject_terms of a question about now), newest first; None when none does."""
    if not subject:
        return None
    changed = {n: seq for n, (text, seq) in texts.items() if seq is not None and states_a_change(text, subject)}
    if not changed:
        return None
    ids = sorted(changed, key=lambda n: (-changed[n], n))
    return Ranking("latest", weight, ids, {n: 1.0 / (r + 1) for r, n in enumerate(ids)})
