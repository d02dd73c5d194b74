"""Heuristic memories (no LLM): every chat message becomes `event` memories, speakers become
`character` nodes, names that recur become `entity` anchors, all linked by edges. Each event carries its
story time: the day its message was sent and the days its text mentions (`timeline.story_time_of`).

Deterministic given the messages in order, whatever the batch boundaries, so a rollback followed by
re-processing ends exactly where a fresh ingest of the same chat ends.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Callable

from ..graph.attribution import addressed_names
from ..graph.changes import ChangeSet
from ..graph.cjk_names import DOTTED_NAME, TITLED_NAME
from ..graph.model import Node, node_text, stable_id
from ..graph.schema import NAMED_TYPES, Strength
from ..tokens import count_tokens, is_common_word
from ..index.lexical import STOPWORDS
from .batch import BaseStage
from .sync import Message
from .timeline import story_time_of

REASONING_TAGS = ("think", "thinking", "analysis", "reasoning")
_SENTENCE = re.compile(r"(?<=[.!?。！？…])\s*|\n+")
_LATIN_NAME = re.compile(r"\b[A-Z][a-zA-Z'\-]*[a-z][a-zA-Z'\-]*\b")
_CJK_QUOTED = re.compile(r"[「『《【“]([\u4e00-\u9fff\u3040-\u30ff]{2,8}"
                         r"|[\u4e00-\u9fff]{1,8}(?:[·・•][\u4e00-\u9fff]{1,8}){1,3})[」』》】”]")   # also 《色·戒》
# Where a sentence starts: the text's or a line's start, or after an end mark or a colon, past the quotes, asterisks
# and dashes roleplay wraps speech and action in. A capital there says nothing about a name ("Something stirs.").
_SENTENCE_START = re.compile(r"(?:^|(?<=[.!?。！？…:]))[\s\"'“”‘’*_(\[~\-–—]*", re.M)
_TITLE_BEFORE = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Mt|Prof|Capt|Sgt|Lt|Col|Gen|Sr|Jr)\.$")
# Capitalised words that start sentences or address people, not names.
_NOT_NAMES = frozenset("""
i im ive id ill hey hi hello okay ok yes no oh ah well so then now maybe please thanks thank sorry wait
what why how who when where which whose whatever though although because after before while until
still just even also only never always sometimes perhaps really very quite mr mrs ms dr miss sir madam lady lord
monday tuesday wednesday thursday friday saturday sunday january february march april may june july august
september october november december god ooc let lets good great nice fine sure right left first last next
""".split()) | STOPWORDS
# English contractions and the possessive: "I'm", "It's" and "We'll" are no names, "Dorian's" is Dorian
# (the real-model run's heuristic layer showed the LLM entities named "I'm" and "It's", issue 20 item 9).
_NEGATION = re.compile(r"n't$", re.I)
_CLITIC = re.compile(r"^(.+?)'(?:s|m|ll|re|ve|d)$", re.I)


def remove_tag_blocks(text: str, names, *, drop_unclosed: bool = False, lenient: bool = False) -> str:
    """Remove `<name>...</name>` blocks (case-insensitive; the nearest closing tag ends a block). An opening tag
    that is never closed stays, or with `drop_unclosed` takes the rest of the text with it; `lenient` allows
    attributes in the opening tag and spaces before the closing `>`. Linear time: a message full of unclosed
    tags must not stall a batch (a backtracking `<x>.*?</x>` regex is quadratic)."""
    names = [n for n in names if n]
    if not names or "<" not in text:
        return text
    attrs, space = (r"\b[^>]*", r"\s*") if lenient else ("", "")
    opening = re.compile(f"<({'|'.join(map(re.escape, names))}){attrs}>", re.I)
    unclosed: set[str] = set()   # a name whose closing tag is missing after one opening has none after later ones
    out, pos, scan = [], 0, 0
    while (m := opening.search(text, scan)) is not None:
        name = m.group(1).lower()
        close = None if name in unclosed else re.compile(rf"</{re.escape(name)}{space}>", re.I).search(text, m.end())
        if close is None:
            unclosed.add(name)
            if drop_unclosed:
                out.append(text[pos:m.start()] + " ")
                pos = len(text)
                break
            scan = m.end()
            continue
        out.append(text[pos:m.start()] + " ")
        pos = scan = close.end()
    out.append(text[pos:])
    return "".join(out)


def clean_text(text: str) -> str:
    """Message text without reasoning blocks, with whitespace folded."""
    text = remove_tag_blocks(text, REASONING_TAGS)
    return re.sub(r"[ \t]+", " ", text).strip()


def split_chunks(text: str, max_tokens: int) -> list[str]:
    """Cut text into pieces of at most about max_tokens tokens, on sentence boundaries."""
    if count_tokens(text) <= max_tokens:
        return [text] if text else []
    chunks, current, current_tokens = [], [], 0
    for sentence in (s.strip() for s in _SENTENCE.split(text)):
        if not sentence:
            continue
        tokens = count_tokens(sentence)
        if current and current_tokens + tokens > max_tokens:
            chunks.append(" ".join(current))
            current, current_tokens = [], 0
        current.append(sentence)
        current_tokens += tokens
    if current:
        chunks.append(" ".join(current))
    return chunks


def _latin_names(text: str) -> dict[str, bool]:
    """Capitalised Latin words used as names, each with whether it is seen anywhere but at a sentence's start."""
    starts = {m.end() for m in _SENTENCE_START.finditer(text)
              if not _TITLE_BEFORE.search(text, max(0, m.start() - 6), m.start())}
    lowered_words = set(re.findall(r"\b[a-z][a-z'\-]*\b", text))
    names: dict[str, bool] = {}
    for match in _LATIN_NAME.finditer(text):
        word = match.group(0).strip("'-")
        if _NEGATION.search(word):   # Don't, Isn't, Won't
            continue
        clitic = _CLITIC.match(word)
        word = clitic.group(1) if clitic else word
        if len(word) < 2 or word.lower() in _NOT_NAMES or word.lower() in lowered_words:
            continue
        names[word] = names.get(word, False) or match.start() not in starts
    return names


def candidate_names(text: str) -> set[str]:
    """Words that look like names: capitalised Latin words used as such, quoted or titled CJK terms, and
    transliterated names joined by an interpunct (outside quotes, where the quoted name is taken whole)."""
    names = set(_latin_names(text))
    names.update(m.group(1) for m in _CJK_QUOTED.finditer(text))
    names.update(m.group(0) for m in TITLED_NAME.finditer(text))
    names.update(m.group(0) for m in DOTTED_NAME.finditer(_CJK_QUOTED.sub(" ", text)))
    return names


def words_starting_sentences(text: str) -> set[str]:
    """The Latin candidate names that may be ordinary words: capitalised only where a sentence starts, and
    common in lowercase ("Wow", "Something", "Definitely"; "Elena" and "Marlow" are not common words).
    Such a mention alone does not make a name an anchor."""
    return {name for name, elsewhere in _latin_names(text).items() if not elsewhere and is_common_word(name)}


def _name_key(name: str) -> str:
    return name.casefold().strip()


def mentions_name(key: str, folded_text: str) -> bool:
    """Does the text mention this name? Latin names must stand as whole words. Pass both casefolded to
    match any case, or both as written."""
    if len(key) < 2 or key not in folded_text:
        return False
    if key.isascii():
        return re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", folded_text) is not None
    return True


class _Graph:
    """Look-ups the heuristic needs, against the transaction's own view of the graph."""

    def __init__(self, cs: ChangeSet):
        self.cs = cs
        self.conn: sqlite3.Connection = cs.conn
        self.named: dict[str, str] = {}
        for row in self.conn.execute(
                "SELECT id, fields FROM nodes WHERE chat_id = ? AND archived = 0 AND type IN"
                f" ({','.join('?' * len(NAMED_TYPES))}) ORDER BY rowid", (cs.chat_id, *NAMED_TYPES)):
            node = cs.get_node(row["id"])
            name = str(node.fields.get("name") or "").strip()
            if name:
                self.named.setdefault(_name_key(name), node.id)

    def named_node(self, name: str, type_: str) -> str:
        key = _name_key(name)
        node_id = self.named.get(key)
        if node_id is None:
            node = self.cs.insert_node(Node(id=stable_id("n", self.cs.chat_id, type_, key), chat_id=self.cs.chat_id,
                                            type=type_, fields={"name": name}, importance=6.0))
            node_id = self.named[key] = node.id
        return node_id

    def last_event_before(self, index: int) -> str | None:
        row = self.conn.execute(
            "SELECT id FROM nodes WHERE chat_id = ? AND type = 'event' AND source = 'heuristic' AND seq_to < ?"
            " ORDER BY seq_to DESC, rowid DESC LIMIT 1", (self.cs.chat_id, index)).fetchone()
        return row[0] if row else None

    def events_of_messages(self, indexes: list[int]) -> list[str]:
        if not indexes:
            return []
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM nodes WHERE chat_id = ? AND type = 'event' AND source = 'heuristic' AND seq_from IN"
            f" ({','.join('?' * len(indexes))}) ORDER BY rowid", (self.cs.chat_id, *indexes))]

    def mention(self, key: str, index: int, maybe_word: bool) -> None:
        self.conn.execute("INSERT OR IGNORE INTO mentions (chat_id, name_key, idx, maybe_word) VALUES (?,?,?,?)",
                          (self.cs.chat_id, key, index, maybe_word))

    def mentions_of(self, key: str) -> list[tuple[int, bool]]:
        """The messages that mention a name, each with whether the mention may be a word (read only for
        names not yet anchors: an anchor's list grows with the chat, and reading it at every mention made
        a long ingest quadratic)."""
        return [(r[0], bool(r[1])) for r in self.conn.execute(
            "SELECT idx, maybe_word FROM mentions WHERE chat_id = ? AND name_key = ? ORDER BY idx",
            (self.cs.chat_id, key))]


def _speaker_text_names(msg: Message) -> tuple[str, str, list[str]] | None:
    """A message's speaker, cleaned text and the other names it mentions; None for what is not remembered
    (system and hidden messages, empty text)."""
    if msg.role == "system":
        return None
    text = clean_text(msg.text)
    if not text:
        return None
    speaker = msg.name.strip() or ("User" if msg.role == "user" else "Narrator")
    return speaker, text, sorted(candidate_names(text) - {speaker})


def _event_fields(speaker: str, chunk: str, participants: list[str], speakers: set[str]) -> dict:
    fields = {"summary": chunk, "speaker": speaker, "participants": participants}
    addressed = addressed_names(chunk, speaker, speakers)
    if addressed:   # most messages address nobody by a chat's name: their fields stay as they were
        fields["addressed"] = addressed
    return fields


# A chat has a few names and thousands of messages: each distinct name is one seek in the index of names (m020),
# and so is the first message by it, where a scan would read every message's text (0.04 ms at 3,000 messages,
# not 0.5).
_SPEAKERS_BEFORE = """
WITH RECURSIVE names(name) AS (
    SELECT (SELECT min(name) FROM messages WHERE chat_id = :chat)
    UNION ALL
    SELECT (SELECT min(name) FROM messages WHERE chat_id = :chat AND name > names.name) FROM names
    WHERE names.name IS NOT NULL)
SELECT name FROM names
WHERE name IS NOT NULL AND (SELECT min(idx) FROM messages WHERE chat_id = :chat AND name = names.name) < :index"""


def speakers_before(conn: sqlite3.Connection, chat_id: str, index: int) -> set[str]:
    """The names the chat's messages before `index` go by. A message may address those and its own speaker's
    (graph/attribution.addressed_names): the names known by then, so the memories do not depend on where
    the batches were cut, nor on messages that came later."""
    return {r[0] for r in conn.execute(_SPEAKERS_BEFORE, {"chat": chat_id, "index": index})}


def event_texts(messages: list[Message], *, chunk_tokens: int, speakers: set[str]) -> list[str]:
    """The texts the event memories of these messages will be embedded by, before they exist: a long
    ingest embeds the newest ones while the older messages are still being turned into memories. The
    text of an event with a speaker leaves its participants out (graph/model.node_text), so it depends
    on the message and the names spoken before it (`speakers`: those before the oldest of `messages`)."""
    known = set(speakers)
    names = {}
    for msg in sorted(messages, key=lambda m: m.index):
        known.add(msg.name)
        names[msg.index] = set(known)
    texts = []
    for msg in messages:
        parts = _speaker_text_names(msg)
        if parts is not None:
            speaker, text, _ = parts
            texts += [node_text(_event_fields(speaker, chunk, [], names[msg.index]))
                      for chunk in split_chunks(text, chunk_tokens)]
    return texts


def record_mentions(conn: sqlite3.Connection, chat_id: str, messages: list[Message]) -> None:
    """The mentions processing would have recorded for these messages (for memories restored from an
    export: later messages then find the names that recur, as after a fresh ingest)."""
    rows = []
    for msg in messages:
        parts = _speaker_text_names(msg)
        if parts is not None:
            maybe_words = words_starting_sentences(parts[1])
            rows += [(chat_id, _name_key(name), msg.index, name in maybe_words) for name in parts[2]]
    conn.executemany("INSERT OR IGNORE INTO mentions (chat_id, name_key, idx, maybe_word) VALUES (?,?,?,?)", rows)


def remember_messages(cs: ChangeSet, messages: list[Message], *, chunk_tokens: int,
                      range_of: Callable[[int], tuple[int, int]] | None = None) -> int:
    """Write heuristic memories for messages (in index order) into the change set. Returns events made.
    `range_of(index)`: the range a message's changes are journaled with (else the change set's)."""
    graph = _Graph(cs)
    speakers = speakers_before(cs.conn, cs.chat_id, messages[0].index) if messages else set()
    made = 0
    for msg in messages:
        speakers.add(msg.name)   # as speakers_before counts it, whatever the message holds
        parts = _speaker_text_names(msg)
        if parts is None:
            continue
        if range_of is not None:
            cs.msg_range = range_of(msg.index)
        speaker, text, mentioned = parts
        maybe_words = words_starting_sentences(text)
        speaker_id = graph.named_node(speaker, "character")
        previous = graph.last_event_before(msg.index)
        folded = text.casefold()
        known = sorted(key for key in graph.named if key != _name_key(speaker) and mentions_name(key, folded))
        participants = [speaker] + [n for n in mentioned if graph.named.get(_name_key(n))]
        events = []
        for part, chunk in enumerate(split_chunks(text, chunk_tokens)):
            node = cs.insert_node(Node(
                id=stable_id("n", cs.chat_id, msg.index, part, chunk), chat_id=cs.chat_id, type="event",
                fields=_event_fields(speaker, chunk, participants, speakers),
                importance=5.0, seq_from=msg.index, seq_to=msg.index,
                story_time=story_time_of(msg.send_date, chunk)))
            cs.add_edge(speaker_id, node.id, "involved_in", Strength.SPEAKER)
            if previous:
                cs.add_edge(node.id, previous, "replies_to", Strength.REPLY)
            previous = node.id
            events.append(node.id)
            made += 1
        linked = set()
        for key in known:
            linked.add(key)
            for event_id in events:
                cs.add_edge(graph.named[key], event_id, "involved_in", Strength.MENTION)
        for name in mentioned:
            key = _name_key(name)
            graph.mention(key, msg.index, name in maybe_words)
            if key in linked:
                continue
            if key in graph.named:
                targets = events
            elif len(seen := graph.mentions_of(key)) >= 2 and not all(word for _, word in seen):
                # A name that recurs becomes an anchor, linked to every mention; not one that has only
                # started sentences and is a common word ("Wow", "Something").
                graph.named_node(name, "entity")
                targets = graph.events_of_messages([index for index, _ in seen])
            else:
                continue
            for event_id in targets:
                cs.add_edge(graph.named[key], event_id, "involved_in", Strength.MENTION)
    return made


class HeuristicStage(BaseStage):
    """Heuristic memories for every batch (the no-LLM mode; later stages may add to them)."""

    name = "heuristic"

    def apply(self, ctx, cs: ChangeSet) -> None:
        remember_messages(cs, ctx.messages, chunk_tokens=ctx.setting("extract.chunk_tokens"), range_of=ctx.range_of)
