"""The JSON Schema of each memory task's answer, the shapes the prompts in prompts.py describe in words.

Sent as OpenAI's structured-output `response_format` ({"type": "json_schema"}), which local servers turn into
a grammar the sampler must follow (llama.cpp and llama-cpp-python, Ollama, vLLM, LM Studio). Why: a small
local model told the shape in words answers JSON of its own design (SmolLM2-135M keyed its answer by message
numbers and names and never wrote an `operations` list: no memory in 24 messages, issue 20 item 9); held to the
schema it writes the operations, and the length caps stop a field from running on to the token limit.

The schemas describe, they do not validate: the stages still read every answer tolerantly (aliases, missing
keys), so a server that ignores the schema loses nothing. Not `strict`: OpenAI's strict mode wants every
property required, and most of these are optional.
"""

from __future__ import annotations

from typing import Iterable

TEXT_CHARS = 400     # a memory field; the prompts ask for 80-260 characters
SHORT_CHARS = 120    # a title, a name, a reason, a relation
TAG_CHARS = 40
KEY = {"type": "string", "maxLength": 12}          # M3, N1, G2, R4 (a model may still write another)


def key(letters: str) -> dict:
    """A key of one of these letters (M3 an existing memory, N1 a new one, G2 a group, R4 a candidate)."""
    return {"type": "string", "pattern": f"^[{letters}][0-9]{{1,3}}$"}


TEXT = {"type": "string", "maxLength": TEXT_CHARS}
SAID = {"type": "string", "minLength": 2, "maxLength": TEXT_CHARS}   # a field that must say something
SHORT = {"type": "string", "maxLength": SHORT_CHARS}
TAGS = {"type": "array", "items": {"type": "string", "maxLength": TAG_CHARS}, "maxItems": 8}
FIELDS = {"type": "object", "additionalProperties": {
    "anyOf": [TEXT, {"type": "array", "items": SHORT, "maxItems": 8}]}}


def _object(required: Iterable[str] = (), **properties) -> dict:
    return {"type": "object", "properties": properties, "required": list(required)}


def _list_of(item: dict, most: int) -> dict:
    return {"type": "array", "items": item, "maxItems": most}


_NEIGHBOUR_UPDATE = _object(("nodeId",), nodeId=KEY, newContext={"anyOf": [TEXT, {"type": "null"}]},
                            newTags={"anyOf": [TAGS, {"type": "null"}]})
_EVOLVE_DECISION = _object(("should_evolve",), should_evolve={"type": "boolean"}, reason=SHORT,
                           suggested_connections=_list_of(KEY, 6), neighbor_updates=_list_of(_NEIGHBOUR_UPDATE, 6))


def extract_schema(types: dict[str, tuple[tuple[str, ...], tuple[str, ...]]], relations: Iterable[str],
                   most_operations: int) -> dict:
    """The extraction's operations. `types`: each type it may create, with its (columns, required columns).

    One shape per kind of operation, so a held model cannot leave out what makes it mean something: a create
    names its type and that type's required fields, an update and a delete the key of an existing memory."""
    link = _object(("target", "relation"), target=key("MN"), relation={"enum": sorted(relations)},
                   strength={"type": "number"})
    optional = {"importance": {"type": "integer"}, "tags": TAGS, "links": _list_of(link, 6)}
    creates = [_object(("op", "type", "fields"), op={"const": "create"}, ref=key("N"), type={"const": name},
                       fields=_object(required, **{c: SAID if c in required else TEXT for c in columns}),
                       **optional, evolve=_EVOLVE_DECISION)
               for name, (columns, required) in types.items()]
    update = _object(("op", "id", "fields"), op={"const": "update"}, id=key("M"), fields=FIELDS,
                     source=key("MN"), **optional)
    delete = _object(("op", "id"), op={"const": "delete"}, id=key("M"))
    return _object(("operations",), operations=_list_of({"anyOf": [*creates, update, delete]}, most_operations))


_SUMMARY = _object(("summary",), summary=SAID)

ANSWER_SCHEMAS: dict[str, dict] = {
    "dedupe": _object(("decisions",), decisions=_list_of(_object(
        ("new", "action"), new=key("N"), action={"enum": ["add", "merge", "skip"]}, target=key("M"),
        fields=FIELDS), 24)),
    "evolve": _object(("results",), results=_list_of(_object(
        ("new", "should_evolve"), new=key("N"), should_evolve={"type": "boolean"}, reason=SHORT,
        suggested_connections=_list_of(KEY, 6),
        # the prompt's words, or the seed's (the same as in the extraction's evolve decision)
        neighbor_updates=_list_of({"anyOf": [
            _object(("key",), key=KEY, new_context={"anyOf": [TEXT, {"type": "null"}]},
                    new_tags={"anyOf": [TAGS, {"type": "null"}]}),
            _NEIGHBOUR_UPDATE]}, 6)), 24)),
    "summary": _SUMMARY,
    "rollup": _SUMMARY,
    "synopsis": _SUMMARY,
    "reflect": _object(("insight", "trigger", "suggestion", "importance"), insight=SAID, trigger=TEXT,
                       suggestion=TEXT, importance={"type": "integer"}),
    "compress": _object(("groups",), groups=_list_of(_object(
        ("key", "fields"), key=key("G"), fields=_object(("title", "summary"), title=SHORT, summary=SAID)), 24)),
    "rerank": _object(("selected",), selected=_list_of(key("R"), 40)),
}


# How an OpenAI-compatible server is asked for JSON, best first. "json_schema" is OpenAI's structured output
# (llama.cpp's own server, Ollama, vLLM, LM Studio, OpenAI); "json_object+schema" the older form with the
# schema beside JSON mode (llama-cpp-python's server knows only this one; Anyscale, Together); "json_object"
# is JSON mode without a schema. A server that rejects one is asked with the next.
ANSWER_FORMATS = ("json_schema", "json_object+schema", "json_object")


def response_format(kind: str, task: str, schema: dict | None) -> dict:
    """The `response_format` of a request, of one of ANSWER_FORMATS."""
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": f"stbme_{task}", "schema": schema, "strict": False}}
    if kind == "json_object+schema":
        return {"type": "json_object", "schema": schema}
    return {"type": "json_object"}
