"""Signal dedupe and repair loops (DNA Memory v3).

- A signal more than 0.9 similar to a directive memory of the same type said within the hour before or
  after it reinforces that memory (+0.1 weight, at most 1) instead of adding another. The same instruction
  said again later (at least SAME_WORDS of its words shared, and above 0.9) reinforces it too, however long
  after: a user who repeats an instruction in every session means one directive, not one per hour (the
  plan's hour alone turned 68 repeats of one OOC line over a month into 35 directives). A correction or
  error is the exception until its repair loop is recorded: said again after the hour, it is the loop (the
  model made the same mistake again), so it gets its own memory; after that, repeats reinforce. Either way
  the two must agree on negation: "don't kill Mira" never reinforces "kill Mira" (the same search terms).
- Corrections or errors more than 0.85 similar and said within 7 days of each other form a repair loop: the
  model keeps making the same mistake (the plan looks at errors only; in a roleplay the repeated mistake
  is as often corrected as complained about). The loop (both memory ids, similarity, time gap) is recorded and
  the memories are escalated (by the `repair_loop` gene: pin, lock, raise importance).

"Said" is story time: the `send_date` of the message a directive came from (`story_clock`), the wall
clock only for directives without one. "Similar" is the cosine of the embeddings, and the two texts must
also share at least WORD_OVERLAP of their words (Dice over `tokenize`'s terms): the local model puts two
different Chinese instructions above 0.9 more often than not, so the cosine alone merged instructions that
had nothing in common (measured in scripts/eval_directives.py).
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
import uuid

import numpy as np
import orjson

from ..errors import NotFound
from ..graph.changes import ChangeSet
from ..index.lexical import tokenize
from ..store import journal
from ..store.events import record_event
from .signals import SIGNAL_TYPES, is_negated
from .story_clock import send_date_seconds
from .strategy import DAY

DEDUPE_SIMILARITY = 0.9
DEDUPE_WINDOW_S = 3600.0
# Beyond the hour, "the same instruction": this share of shared words (Dice). Of 1,034 pairs of different
# instructions of one type and language in scripts/data/directives.jsonl none reaches 0.7; of the 16 real
# repeats in directive_repeats.jsonl, 5 paraphrases reach 0.8 (every verbatim repeat is 1.0).
SAME_WORDS = 0.8
LOOP_SIMILARITY = 0.85
LOOP_WINDOW_S = 7 * DAY
LOOP_TYPES = ("correction", "error")
WORD_OVERLAP = 0.4


@dataclasses.dataclass
class Directive:
    """A directive memory as the dedupe and loop checks see it."""
    id: str
    type: str
    vector: np.ndarray
    moment: float                 # story time it was said (seconds), or when it was made
    seq_from: int | None = None
    text: str = ""
    in_loop: bool = False         # part of an open repair loop

    def repeats_any_time(self, loops: bool) -> bool:
        """Whether a repeat in the same words reinforces it however long after: always for preferences,
        decisions and workflows; a correction or error once its repair loop is recorded, or when loops are
        not looked for (before that, its repeat after the hour is the loop)."""
        return self.type not in LOOP_TYPES or not loops or self.in_loop


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(np.dot(a, b) / (na * nb)) if na and nb else 0.0


def word_overlap(a: str, b: str) -> float:
    """Dice coefficient of the two texts' search terms (Latin words, CJK bigrams)."""
    ta, tb = set(tokenize(a)), set(tokenize(b))
    return 2 * len(ta & tb) / (len(ta) + len(tb)) if ta and tb else 0.0


def similar(vector: np.ndarray, text: str, other: Directive) -> float | None:
    """The cosine to `other`, or None when the texts share too few words to be the same thing."""
    if word_overlap(text, other.text) < WORD_OVERLAP:
        return None
    return cosine(vector, other.vector)


def load_directives(conn: sqlite3.Connection, chat_id: str, embedder_id: str, *, types=SIGNAL_TYPES,
                    before_index: int | None = None) -> list[Directive]:
    """Active directive memories of `types` that have a vector from this embedder, with the story time of
    the message each came from; with `before_index`, only those not derived from messages at or after it
    (manual ones count)."""
    rows = conn.execute(
        f"SELECT n.id, n.type, n.embedding, n.created_at, n.seq_from, n.fields, m.send_date,"
        f" EXISTS (SELECT 1 FROM repair_loops l WHERE l.chat_id = n.chat_id AND l.status = 'open' AND"
        f"  (l.first_id = n.id OR l.second_id = n.id)) AS in_loop FROM nodes n"
        f" LEFT JOIN messages m ON m.chat_id = n.chat_id AND m.idx = n.seq_from"
        f" WHERE n.chat_id = ? AND n.archived = 0 AND n.type IN ({','.join('?' * len(types))})"
        " AND n.embedding IS NOT NULL AND n.embedder = ? AND (? IS NULL OR n.seq_from IS NULL OR n.seq_from < ?)"
        " ORDER BY n.seq_from, n.rowid",
        (chat_id, *types, embedder_id, before_index, before_index)).fetchall()
    out = []
    for r in rows:
        moment = send_date_seconds(r["send_date"])
        out.append(Directive(r["id"], r["type"], np.frombuffer(r["embedding"], dtype=np.float32),
                             r["created_at"] if moment is None else moment, r["seq_from"],
                             str(orjson.loads(r["fields"]).get("content", "")), bool(r["in_loop"])))
    return out


def find_duplicate(type_: str, vector: np.ndarray, text: str, directives: list[Directive],
                   moment: float, *, loops: bool = True) -> tuple[Directive, float] | None:
    """The most similar directive of the same type at > 0.9 said within an hour (the plan's bounds, both
    strict), or at any time when it is the same instruction (SAME_WORDS; `Directive.repeats_any_time`, with
    `loops`: whether repair loops are looked for), if any, the latest said of equals; never one that differs
    from the text in negation."""
    best = None
    negated = is_negated(text)
    for d in directives:
        if d.type != type_ or is_negated(d.text) != negated:
            continue
        if abs(moment - d.moment) >= DEDUPE_WINDOW_S and not (
                d.repeats_any_time(loops) and word_overlap(text, d.text) >= SAME_WORDS):
            continue
        sim = similar(vector, text, d)
        # ties (the same words said several times): the latest said
        if sim is not None and sim > DEDUPE_SIMILARITY and (
                best is None or (sim, d.moment) > (best[1], best[0].moment)):
            best = (d, sim)
    return best


def find_loop_partner(type_: str, vector: np.ndarray, text: str, directives: list[Directive], moment: float,
                      exclude: set[str] = frozenset()) -> tuple[Directive, float] | None:
    """For a correction or error: the most similar correction/error said within 7 days at > 0.85."""
    if type_ not in LOOP_TYPES:
        return None
    best = None
    for d in directives:
        if d.type not in LOOP_TYPES or d.id in exclude or abs(moment - d.moment) >= LOOP_WINDOW_S:
            continue
        sim = similar(vector, text, d)
        if sim is not None and sim > LOOP_SIMILARITY and (best is None or sim > best[1]):
            best = (d, sim)
    return best


def record_loop(cs: ChangeSet, first_id: str, second_id: str, type_: str, similarity: float,
                time_gap: float, *, at: float | None = None) -> str:
    """Insert a repair loop; journaled with the change set's message range (a rollback removes it)."""
    loop_id = f"loop_{uuid.uuid4().hex[:16]}"
    at = time.time() if at is None else at
    cs.conn.execute("INSERT INTO repair_loops (id, chat_id, type, first_id, second_id, similarity, time_gap, status,"
                    " created_at) VALUES (?,?,?,?,?,?,?, 'open', ?)",
                    (loop_id, cs.chat_id, type_, first_id, second_id, round(similarity, 6), round(time_gap, 3), at))
    if cs.msg_range is not None:
        journal.record(cs.conn, cs.chat_id, cs.batch, cs.msg_range[0], cs.msg_range[1], "repair_loops", loop_id,
                       None, cs.reason)
    record_event(cs.conn, cs.chat_id, "repair_loop", loop_id=loop_id, first_id=first_id, second_id=second_id,
                 type=type_, similarity=round(similarity, 4), time_gap_s=round(time_gap, 1))
    return loop_id


def loop_exists(conn: sqlite3.Connection, chat_id: str, a: str, b: str) -> bool:
    return conn.execute("SELECT 1 FROM repair_loops WHERE chat_id = ? AND ((first_id = ? AND second_id = ?) OR"
                        " (first_id = ? AND second_id = ?))", (chat_id, a, b, b, a)).fetchone() is not None


def story_now(conn: sqlite3.Connection, chat_id: str, wall_clock: float) -> float:
    """The chat's present in story time: its newest message's `send_date`, else the wall clock."""
    row = conn.execute("SELECT send_date FROM messages WHERE chat_id = ? ORDER BY idx DESC LIMIT 1",
                       (chat_id,)).fetchone()
    moment = send_date_seconds(row["send_date"]) if row is not None else None
    return wall_clock if moment is None else moment


def scan_loops(conn: sqlite3.Connection, chat_id: str, embedder_id: str, *, now: float) -> list[tuple[str, str, float, float]]:
    """The seed's detect_repair_loop over stored memories: pairs of corrections/errors of the story's last
    7 days at > 0.85 not yet recorded, as (earlier id, later id, similarity, time gap)."""
    present = story_now(conn, chat_id, now)
    items = [d for d in load_directives(conn, chat_id, embedder_id, types=LOOP_TYPES)
             if present - d.moment < LOOP_WINDOW_S]
    found = []
    for i, later in enumerate(items):
        for earlier in items[:i]:
            sim = similar(later.vector, later.text, earlier)
            if sim is not None and sim > LOOP_SIMILARITY and abs(later.moment - earlier.moment) < LOOP_WINDOW_S \
                    and not loop_exists(conn, chat_id, earlier.id, later.id):
                found.append((earlier.id, later.id, sim, later.moment - earlier.moment))
    return found


def list_loops(conn: sqlite3.Connection, chat_id: str | None, status: str | None = "open") -> list[dict]:
    """Repair loops whose memories still exist, newest first, with the memories' labels."""
    rows = conn.execute(
        "SELECT l.*, a.fields AS first_fields, b.fields AS second_fields FROM repair_loops l"
        " JOIN nodes a ON a.id = l.first_id JOIN nodes b ON b.id = l.second_id"
        " WHERE (? IS NULL OR l.chat_id = ?) AND (? IS NULL OR l.status = ?) ORDER BY l.created_at DESC LIMIT 1000",
        (chat_id, chat_id, status, status)).fetchall()
    out = []
    for r in rows:
        data = {k: r[k] for k in ("id", "chat_id", "type", "first_id", "second_id", "similarity", "time_gap",
                                  "status", "created_at", "resolved_at")}
        data["first"] = orjson.loads(r["first_fields"]).get("content", "")
        data["second"] = orjson.loads(r["second_fields"]).get("content", "")
        out.append(data)
    return out


def resolve_loop(conn: sqlite3.Connection, chat_id: str, loop_id: str) -> None:
    row = conn.execute("SELECT status FROM repair_loops WHERE id = ? AND chat_id = ?", (loop_id, chat_id)).fetchone()
    if row is None:
        raise NotFound(f"no repair loop {loop_id!r} in chat {chat_id!r}", field="loop_id")
    conn.execute("UPDATE repair_loops SET status = 'resolved', resolved_at = ? WHERE id = ?", (time.time(), loop_id))
    record_event(conn, chat_id, "repair_loop_resolved", loop_id=loop_id)
