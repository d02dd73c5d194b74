"""Node types and relations as data (ST-BME's default schema plus DNA directive types).

Code asks the schema ("is this type latest-only?", "which field is its label?") instead of
branching on type names.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class NodeType:
    name: str
    columns: tuple[str, ...]
    required: tuple[str, ...]
    label_fields: tuple[str, ...]      # first non-empty one is the node's label
    always_inject: bool = False        # core memory: considered first in every recall, whatever the query
    latest_only: bool = False          # one active node per name; updates merge into it
    section: str = "other"             # block section: state | episodic | reflective | rules | directives | other
    compression: tuple[int, int, int, int] | None = None  # threshold, fan_in, max_depth, keep_recent


T = NodeType
# The types a name makes: the anchors that memories are linked to by who and what they involve.
NAMED_TYPES = ("character", "location", "entity")
# A message's memory's fields the write path takes from the message itself: who said it and the chat's names
# it only addresses (graph/attribution.py). Never asked of the LLM, never shown as fields of their own.
MESSAGE_FIELDS = ("speaker", "addressed")
NODE_TYPES: dict[str, NodeType] = {t.name: t for t in (
    T("event", ("title", "summary", "participants", "status", *MESSAGE_FIELDS), ("summary",), ("title", "summary"),
      section="episodic", compression=(9, 3, 10, 6)),
    T("character", ("name", "traits", "state", "goal", "inventory", "core_note"), ("name",), ("name",),
      latest_only=True, section="state"),
    T("location", ("name", "state", "features", "danger"), ("name",), ("name",), latest_only=True, section="state"),
    T("entity", ("name", "kind", "note"), ("name",), ("name",), latest_only=True, section="state"),
    T("rule", ("title", "constraint", "scope", "status"), ("title", "constraint"), ("title", "constraint"),
      always_inject=True, section="rules"),
    T("thread", ("title", "summary", "status"), ("title",), ("title", "summary"),
      section="episodic", compression=(6, 3, 5, 3)),
    T("synopsis", ("summary", "scope"), ("summary",), ("summary",), always_inject=True, latest_only=True,
      section="reflective"),
    T("reflection", ("insight", "trigger", "suggestion"), ("insight",), ("insight",), section="reflective",
      compression=(6, 3, 3, 3)),
    T("summary", ("summary", "level", "range"), ("summary",), ("summary",), section="reflective"),
    T("pov_memory", ("summary", "belief", "emotion", "attitude", "certainty", "about"), ("summary",),
      ("summary",), section="episodic", compression=(8, 3, 4, 4)),
    # ST-BME injects every event and thread as "core"; with one event per message that floods the block,
    # so here only rules, the synopsis and user directives are core, and events compete on relevance.
    # DNA Memory directive types: the user steering the story.
    T("correction", ("content", "wrong", "right"), ("content",), ("content",), section="directives", always_inject=True),
    T("preference", ("content",), ("content",), ("content",), section="directives", always_inject=True),
    T("decision", ("content",), ("content",), ("content",), section="directives", always_inject=True),
    T("error", ("content",), ("content",), ("content",), section="directives", always_inject=True),
    T("workflow", ("content",), ("content",), ("content",), section="directives", always_inject=True),
)}

RELATIONS: frozenset[str] = frozenset({
    "related", "involved_in", "occurred_at", "advances", "updates", "contradicts", "evolves",
    "temporal_update", "mentions", "replies_to",
})
INHIBITORY_RELATIONS: frozenset[str] = frozenset({"contradicts"})


class Strength:
    """Strengths (0-1) the write path gives the edges it makes: how much one memory speaks for another."""

    SPEAKER = 0.9         # a speaker is involved in each of their messages
    MENTION = 0.7         # a recurring name is involved in a message that mentions it
    REPLY = 0.5           # a message replies to the one before it
    LINK = 0.8            # an LLM or user link that names no strength
    BATCH = 0.25          # memories made from the same messages belong together (weakly)
    STATE_CHANGE = 0.9    # a state-change event updates its memory; a correction updates or contradicts its target
    TEMPORAL = 0.95       # the source of a state change, to the memory it changed
    EVOLVED = 0.7         # an A-MEM suggested connection
    REFLECTION = 0.75     # a reflection evolves from the events it reflects on

# Field order of a node's text for embedding and lexical search (ST-BME's order; other fields follow).
TEXT_FIELD_ORDER = ("summary", "insight", "content", "title", "name", "state", "traits", "constraint", "goal",
                    "participants", "suggestion", "status", "scope")


def node_type(name: str) -> NodeType | None:
    return NODE_TYPES.get(name)


def normalize_relation(relation: str) -> str:
    """Unknown relations become 'related' (as ST-BME does)."""
    return relation if relation in RELATIONS else "related"
