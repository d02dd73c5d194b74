"""The part of a long memory that answers the question. A long message is stored in pieces of about 120
tokens, and ten of them do not fit an 800-token block beside the directives; showing, of a long piece, the
sentences that share the question's rarer words, each with the sentence after it (an answer often follows
the sentence that names its subject: "Mara moved out. She's staying near the north quay now."), keeps room
for more memories. The memory itself is unchanged; only its line in the block is shorter.
"""

from __future__ import annotations

import functools
import re

from ..index.lexical import odd_stems
from ..tokens import estimate_tokens

_SENTENCE_END = re.compile(r"(?<=[.!?。！？…])[\"'”’」』)）*]*\s*|\n+")  # closing quotes and asterisks stay
GAP = " … "


def sentences(text: str) -> list[str]:
    """Sentences with their closing punctuation and quotes, whitespace trimmed."""
    return list(_sentences(text))


@functools.lru_cache(maxsize=4096)
def _sentences(text: str) -> tuple[str, ...]:
    # The same memories are split again and again (the block, the latest word): remembered.
    out, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.end() > start:
            piece = text[start:match.end()].strip()
            if piece:
                out.append(piece)
            start = match.end()
    tail = text[start:].strip()
    return tuple(out + [tail] if tail else out)


def focus(text: str, weights: dict[str, float], max_tokens: int) -> str:
    """`text` when it fits `max_tokens` or shares no weighted word; else its best sentences (each with the
    next one) in story order, gaps marked, within about `max_tokens` (the caller still caps the line).
    Whether it fits is estimated, not counted: a memory seen for the first time would otherwise be
    tokenized whole only to decide that, and the limit is a soft one (the block counts its lines exactly)."""
    if max_tokens <= 0 or not weights or estimate_tokens(text) <= max_tokens:
        return text
    parts = sentences(text)
    # A weight's term (tokenize's) is found as a part of the lowercased sentence or, since a stem is not always a
    # part of its word ("jori" of "Jory"), as one of the sentence's odd stems; only a memory that has such a
    # stem of a weighted term has its sentences searched for it (lexical.odd_stems: no sentence is tokenized).
    odd = not odd_stems(text).isdisjoint(weights)
    scored = []
    for i, sentence in enumerate(parts):
        folded, stems = sentence.lower(), odd_stems(sentence) if odd else frozenset()
        score = sum(w for term, w in weights.items() if term in folded or term in stems)
        if score > 0:
            scored.append((-score, i))
    if not scored:
        return text
    chosen: set[int] = set()
    used = 0
    for _, i in sorted(scored):
        for j in (i, i + 1):
            if j >= len(parts) or j in chosen:
                continue
            cost = estimate_tokens(parts[j]) + 1   # a soft budget: the block counts the line exactly
            if chosen and used + cost > max_tokens:
                break
            chosen.add(j)
            used += cost
        if used >= max_tokens:
            break
    out, last = [], None
    for j in sorted(chosen):
        if last is not None and j != last + 1:
            out.append(GAP.strip())
        out.append(parts[j])
        last = j
    text_out = " ".join(out)
    if chosen and min(chosen) > 0:
        text_out = GAP.lstrip() + text_out
    if chosen and max(chosen) < len(parts) - 1:
        text_out += GAP.rstrip()
    return text_out
