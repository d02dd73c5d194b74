"""Default prompts of the memory tasks, as data. Each can be replaced by the setting `prompts.<task>`.

The first line of every system message is a task marker (`[stbme:extract]`) that the code adds, so an
override cannot lose it; test servers route by it and logs show it. The chat's language is appended.
"""

from __future__ import annotations

from typing import Callable

LANGUAGES = {"en": "English", "zh": "Chinese (简体中文)"}

DEFAULTS: dict[str, str] = {
    "extract": """You maintain the long-term memory of a roleplay chat as a graph of memories.
Read the NEW messages (earlier ones are context only) and answer with JSON operations:
{"operations": [
 {"op": "create", "ref": "N1", "type": "<type>", "fields": {...}, "importance": 1-10, "tags": [...],
  "links": [{"target": "M3 or N2", "relation": "<relation>", "strength": 0.8}]},
 {"op": "update", "id": "M2", "fields": {only the changed fields}, "source": "N1"},
 {"op": "delete", "id": "M4"}]}
Rules:
- Existing memories are listed with keys M1, M2...; refer to them only by these keys. New memories get refs N1, N2...
- Grade what happened: A = turning point (importance 8-10, always record), B = progress (5-7), C = filler (skip).
  Few high-value operations; an empty "operations" list is fine.
- One event per NEW reply that moves the story (A or B), none for filler; an event has a short title and a
  summary of at most 150 characters.
- A character or location that already exists is UPDATED (its key), never created again. A state change
  (injury, new item, moved, new goal) is an update of the state/inventory/goal fields; give "source" = the
  ref or key of the event that caused it.
- Relations: related, involved_in, occurred_at, advances, updates, contradicts, evolves, temporal_update.
  A new fact that makes an old one untrue: link it to the old one with "contradicts".
- Only what the text shows; no guesses. Abstract, do not copy the prose.""",
    "dedupe": """Each NEW memory below is very similar to existing memories (keys M1, M2...).
Decide for each one: "add" (genuinely new), "merge" (it corrects or adds detail to one existing memory:
give "target" and "fields" = the merged fields of that memory), or "skip" (the same facts already exist).
Answer JSON: {"decisions": [{"new": "N1", "action": "add|merge|skip", "target": "M2", "fields": {...}}]}""",
    "evolve": """Memory evolution. New memories were just added. For each one, its nearest existing memories are
listed with keys (M1, M2...). Decide whether the new memory changes how an old one should be understood
(a revealed identity re-colours earlier motives; a discovered property changes a place). Do not force links.
Answer JSON: {"results": [{"new": "N1", "should_evolve": true|false, "reason": "...",
 "suggested_connections": ["M1"],
 "neighbor_updates": [{"key": "M2", "new_context": "how it reads now, or null", "new_tags": ["tag"] or null}]}]}
new_tags are the memory's tags now ([] for none); null keeps them.
Every neighbor update must say something that is not already in that memory.""",
    "summary": """Summarise where the story stands after the messages below, in 80-220 characters: the current
situation, what changed, the core tension. No predictions. Do not repeat the earlier summaries.
Answer JSON: {"summary": "..."}""",
    "rollup": """Fold these consecutive story summaries (oldest first) into one summary of 120-260 characters that
keeps the turning points and the current state. Answer JSON: {"summary": "..."}""",
    "synopsis": """Write the synopsis of the whole story so far in at most 200 characters: the core conflict, the key
turns, where the main characters stand. Answer JSON: {"summary": "..."}""",
    "reflect": """Reflect on the recent story. Give one insight that is a judgement about a trend (not a recap), what
triggered it, and a suggestion for how the story or the characters might be handled.
Answer JSON: {"insight": "...", "trigger": "...", "suggestion": "...", "importance": 5-10}""",
    "compress": """Compress each group of old memories (oldest first) into one memory, as memory decays: details fade
first; causes, irreversible outcomes, promises and foreshadowing stay. 120-220 characters per summary.
Answer JSON: {"groups": [{"key": "G1", "fields": {"title": "...", "summary": "..."}}]}""",
    "rerank": """Pick the memories that help write the next reply: the current scene first, then causal history,
then active rules and promises, then minimal background. Fewer is better.
Answer JSON: {"selected": ["R3", "R1"]} (keys, most useful first).""",
}


EVOLVE_WITH_EXTRACTION = """Evolution: when a memory you create changes how an existing memory should be understood (a
revealed identity re-colours earlier motives; a discovered property changes a place), add to that create operation:
 "evolve": {"should_evolve": true, "reason": "...", "suggested_connections": ["M2", "N1"],
  "neighbor_updates": [{"nodeId": "M2", "newContext": "how it reads now", "newTags": ["tag"]}]}
Connections may name existing memories (M keys) or other new ones (N refs). newContext or newTags null: unchanged
(newTags [] removes its tags). Only real changes; do not force links."""


def system_prompt(task: str, setting: Callable[[str], object], language: str, appendix: str = "") -> str:
    """The system message of a task: marker, the user's override or the default, a fixed appendix (schema,
    extra duties), the chat's language. Nothing in it changes from call to call within a chat, so it is the
    prompt prefix an API can cache."""
    override = str(setting(f"prompts.{task}") or "").strip()
    body = override or DEFAULTS[task]
    lang = LANGUAGES.get(language, language)
    extra = f"\n{appendix}" if appendix else ""
    return (f"[stbme:{task}]\n{body}{extra}\n"
            f"Write all memory text in {lang}, the language of the chat. Keys stay as given.")
