"""The systems the recall evaluation compares: the product through its HTTP API, and the baselines on
the raw messages (plain BM25, the local model alone, their reciprocal-rank fusion)."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from . import bm25
from .embedcache import EmbeddingCache
from .metrics import DIRECTIVE_TYPES, Outcome, answer_found
from .sidecar import RECENT_MESSAGES, Client, chains, processed_length

RANK_DEPTH = 40          # memories asked for when reading the product's ranking
RANK_BUDGET = 16000      # the largest budget the product accepts: the ranking is not cut by tokens
EXCLUDE_RECENT = 4       # recall.exclude_recent_messages: the product skips the prompt's last messages


def question_message(chat: dict, q: dict) -> dict:
    return {"role": "user", "name": chat["user"], "text": q["query"],
            "send_date": q.get("send_date") or chat["question_send_date"]}


def asked_after(chat: dict, q: dict) -> list[dict]:
    """The messages a question is asked after: the chat, then the turns just before it (a public set's
    question asked in a conversation of its own) when it has them."""
    return chat["messages"] + q.get("context", [])


def long_query(chat: dict, q: dict) -> str:
    """The question sent after the RECENT_MESSAGES turns before it, as one long input (a pasted scene)."""
    before = asked_after(chat, q)
    return "\n".join([m["text"] for m in before[-RECENT_MESSAGES:]] + [q["query"]])


def as_long_inputs(chats: list[dict]) -> list[dict]:
    """The chats with every question asked as a long input (long_query), for the baselines of that ablation."""
    return [dict(c, questions=[dict(q, query=long_query(c, q)) for q in c["questions"]]) for c in chats]


def candidates_end(chat: dict, q: dict | None = None) -> int:
    """Messages [0, end) of the chat are searchable when a question is asked: the product skips memories of
    the last EXCLUDE_RECENT messages of the chat as it stands then (the question and its context included)."""
    context = len(q.get("context", [])) if q else 0
    return min(len(chat["messages"]), len(chat["messages"]) + context + 1 - EXCLUDE_RECENT)


def group_label(chat: dict) -> str:
    """What the tables group a chat's questions by: its language, and for a public set its split."""
    return f"{chat['lang']}-{chat['split']}" if chat.get("split") else chat["lang"]


def _range(memory: dict) -> tuple[int, int]:
    seq = memory.get("seq_range")
    return (seq[0], seq[1]) if seq else (-1, -1)


async def product_outcomes(client: Client, chats: list[dict], *, suffix: str, budget: int,
                           details: dict | None = None, long_input: bool = False) -> list[Outcome]:
    """Ask every question of every chat (chats concurrently, questions in turn): sync the question as the
    chat's newest user message, read the ranking (a large budget) and the block (the chat's budget).
    `long_input`: the question is sent after the four turns before it, as one long input (a pasted scene)."""

    async def one_chat(chat: dict) -> list[Outcome]:
        chat_id = chat["chat_id"] + suffix
        messages = chat["messages"]
        n = len(messages)
        base_chain = chains(messages)
        outcomes = []
        for q in chat["questions"]:
            before = asked_after(chat, q)
            recent = [{"role": m["role"], "name": m["name"], "text": m["text"]} for m in before[-RECENT_MESSAGES:]]
            asked = dict(q, query=long_query(chat, q)) if long_input else q
            full = before + [question_message(chat, asked)]
            await client.sync(chat_id, full, start=n, chain=base_chain + chains(full[n:], base_chain[-1]))
            # The turns before the question were said a while ago: their memories are made (else whether
            # a recall meets them, or the memories of the question before, depends on timing).
            await client.settle(chat_id, processed_length(full))
            # Only look: a recall that reinforces what it shows would make each pass depend on the passes
            # before it (the DNA weight is part of the score), and ablations are compared pass to pass.
            body = {"query": asked["query"], "recent": recent, "reinforce": False}
            ranked = (await client.recall(chat_id, {**body, "budget_tokens": RANK_BUDGET,
                                                    "max_memories": RANK_DEPTH}))["memories"]
            # The evidence ranking: core memories (pinned, rules, synopsis, directives) have their own place
            # in the block and never take an evidence slot; they count in the block ("dirs").
            ranking = [m for m in ranked if not m.get("core")]
            block = await client.recall(chat_id, {**body, "budget_tokens": budget})
            out = Outcome(q["id"], group_label(chat), q["category"], q["evidence"], [_range(m) for m in ranking],
                          block=[_range(m) for m in block["memories"]],
                          directives_block=sum(m["type"] in DIRECTIVE_TYPES for m in block["memories"]),
                          answer_in_block=answer_found(q["answer"], block["text"]) if q.get("answer") else None)
            if q["stale"]:
                out.stale_in_block = await _stale_in_block(client, chat_id, q, block["memories"])
            outcomes.append(out)
            if details is not None:
                details[q["id"]] = {"ranking": [_brief(m) for m in ranking[:10]],
                                    "block": [_brief(m) for m in block["memories"]], "block_tokens": block["tokens"]}
        return outcomes

    results = await asyncio.gather(*(one_chat(c) for c in chats))
    return [o for chat_outcomes in results for o in chat_outcomes]


def _brief(memory: dict) -> dict:
    return {"type": memory["type"], "label": memory["label"], "seq": memory.get("seq_range"),
            "score": memory["score"], "parts": memory.get("score_parts")}


async def _stale_in_block(client: Client, chat_id: str, q: dict, block: list[dict]) -> bool:
    """Does the block hold a memory of a stale message that still says the old value?"""
    old = q["stale_answer"].casefold()
    for memory in block:
        a, b = _range(memory)
        if any(a <= s <= b for s in q["stale"]):
            node = await client.node(chat_id, memory["id"])
            if old in json.dumps(node["fields"], ensure_ascii=False).casefold():
                return True
    return False


def speaker_text(message: dict) -> str:
    """A message as "Speaker: text", the way the product indexes and embeds a message's memory."""
    return f"{message['name']}: {message['text']}" if message.get("name") else message["text"]


BASELINE_TEXTS = {"bare": lambda m: m["text"], "speaker": speaker_text}


def baseline_outcomes(chats: list[dict], cache: EmbeddingCache | None, forms=("bare", "speaker"),
                      vector_forms=("bare", "speaker")) -> dict[str, list[Outcome]]:
    """Plain BM25, the local model alone and their fusion (BM25 weight 2), each over the messages a question
    may find (the same window the product searches), as bare text and as "Speaker: text"."""
    systems: dict[str, list[Outcome]] = {}
    for chat in chats:
        queries = [q["query"] for q in chat["questions"]]
        query_vecs = cache.embed(queries, "query", chat["chat_id"]) if cache is not None else None
        for form, text_of in BASELINE_TEXTS.items():
            if form not in forms:
                continue
            docs = [text_of(m) for m in chat["messages"]]
            index = bm25.BM25(docs)
            doc_vecs = cache.embed(docs, "passage", f"{chat['chat_id']} {form}") \
                if cache is not None and form in vector_forms else None
            for i, q in enumerate(chat["questions"]):
                end = candidates_end(chat, q)
                lexical = [d for d in bm25.ranking(index.scores(q["query"])) if d < end]
                item = lambda ranked: [(d, d) for d in ranked[:RANK_DEPTH]]  # noqa: E731
                label = group_label(chat)
                systems.setdefault(f"BM25 {form}", []).append(
                    Outcome(q["id"], label, q["category"], q["evidence"], item(lexical)))
                if doc_vecs is None:
                    continue
                sims = doc_vecs[:end] @ query_vecs[i]
                vector = [int(d) for d in np.lexsort((np.arange(len(sims)), -sims))]
                systems.setdefault(f"e5 {form}", []).append(
                    Outcome(q["id"], label, q["category"], q["evidence"], item(vector)))
                fused = bm25.rrf([(2.0, lexical), (1.0, vector)])
                systems.setdefault(f"RRF {form}", []).append(
                    Outcome(q["id"], label, q["category"], q["evidence"], item(fused)))
    return systems
