"""The encoder of the bundled model as an ONNX graph, built from its own tensors (e5_file.py).

What the graph takes: the embedded tokens [batch, length, hidden] (word + position + token type, added
in numpy: the 250k-row word table stays 4-bit and only the rows a batch uses are expanded) and each
row's token count [batch] (right padding). What it gives: each row's mean-pooled last hidden state.

The layers use ONNX Runtime's fused CPU operators: `Attention` (com.microsoft: the Q/K/V projection,
the scaled softmax over the real keys and the context in one kernel), `LayerNormalization`, and the
exact (erf) `Gelu` the model was trained with. ONNX Runtime fuses the residual adds into the layer
norms and the biases into GELU when it loads the graph.

`weights`: "float32" keeps the 4-bit weights expanded to float32 (the numpy engine's arithmetic);
"int8" quantizes the matrix products dynamically (int8 weights, activations quantized per call).

`python -m stbme.embed.e5_graph WEIGHTS KIND OUT` builds the graph of a weights file and writes it to OUT:
the server runs this in a child process (local.py), so it never imports the `onnx` package.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .e5_file import Layer, ModelWeights, Q4Matrix, load

OPSET = 17              # LayerNormalization
IR_VERSION = 8          # what opset 17 needs; the onnx package would write its newest, which older runtimes refuse
MS_DOMAIN = "com.microsoft"
WEIGHT_KINDS = ("float32", "int8")


def build(weights: ModelWeights, kind: str = "float32"):
    """The graph (an onnx.ModelProto) of the encoder in `weights`, its matrix products in `kind`."""
    from onnx import TensorProto, helper, numpy_helper

    if kind not in WEIGHT_KINDS:
        raise ValueError(f"unknown weight kind {kind!r} (one of {', '.join(WEIGHT_KINDS)})")
    w = weights
    nodes, inits = [], []

    def const(name: str, value: np.ndarray, dtype=np.float32) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=dtype), name))
        return name

    def layer_norm(x: str, ln: tuple[np.ndarray, np.ndarray], out: str) -> str:
        nodes.append(helper.make_node("LayerNormalization", [x, const(out + ".w", ln[0]), const(out + ".b", ln[1])],
                                      [out], axis=-1, epsilon=float(w.eps)))
        return out

    def dense(x: str, matrix: Q4Matrix, bias: np.ndarray, out: str) -> str:
        if kind == "int8":
            q, scale = _int8_columns(matrix.dense())
            nodes.append(helper.make_node(
                "DynamicQuantizeMatMul",
                [x, const(out + ".q", q, np.int8), const(out + ".s", scale), "", const(out + ".b", bias)],
                [out], domain=MS_DOMAIN))
            return out
        nodes.append(helper.make_node("MatMul", [x, const(out + ".w", matrix.dense())], [out + ".mm"]))
        nodes.append(helper.make_node("Add", [out + ".mm", const(out + ".b", bias)], [out]))
        return out

    def attention(x: str, layer: Layer, out: str) -> str:
        if kind == "int8":
            q, scale = _int8_columns(layer.qkv_w.dense())
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [x + ".q", x + ".s", x + ".z"]))
            nodes.append(helper.make_node(
                "QAttention", [x + ".q", const(out + ".q", q, np.int8), const(out + ".b", layer.qkv_b), x + ".s",
                               const(out + ".s", scale), "lengths", x + ".z",
                               const(out + ".z", np.zeros(len(scale)), np.int8)],
                [out], domain=MS_DOMAIN, num_heads=w.heads))
            return out
        nodes.append(helper.make_node(
            "Attention", [x, const(out + ".w", layer.qkv_w.dense()), const(out + ".b", layer.qkv_b), "lengths"],
            [out], domain=MS_DOMAIN, num_heads=w.heads))
        return out

    x = layer_norm("embedded", w.embed_ln, "emb.ln")
    for i, layer in enumerate(w.layers):
        p = f"l{i}."
        context = attention(x, layer, p + "ctx")
        attn = dense(context, layer.out_w, layer.out_b, p + "ao")
        nodes.append(helper.make_node("Add", [x, attn], [p + "res1"]))
        x = layer_norm(p + "res1", layer.attn_ln, p + "aln")
        mid = dense(x, layer.ffn_in_w, layer.ffn_in_b, p + "fi")
        nodes.append(helper.make_node("Gelu", [mid], [p + "gelu"], domain=MS_DOMAIN))
        out = dense(p + "gelu", layer.ffn_out_w, layer.ffn_out_b, p + "fo")
        nodes.append(helper.make_node("Add", [x, out], [p + "res2"]))
        x = layer_norm(p + "res2", layer.ffn_ln, p + "oln")

    # Mean over each row's real tokens: sum(x * mask) / count.
    nodes += [
        helper.make_node("Unsqueeze", ["mask", "axis2"], ["mask3"]),
        helper.make_node("Mul", [x, "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask", "axis1"], ["count"], keepdims=1),
        helper.make_node("Div", ["summed", "count"], ["pooled"]),
    ]
    const("axis2", np.array([2]), np.int64)
    const("axis1", np.array([1]), np.int64)
    graph = helper.make_graph(
        nodes, "multilingual-e5-small",
        inputs=[helper.make_tensor_value_info("embedded", TensorProto.FLOAT, ["batch", "length", w.hidden]),
                helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
                helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "length"])],
        outputs=[helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", w.hidden])],
        initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET),
                                                  helper.make_opsetid(MS_DOMAIN, 1)],
                             producer_name="stbme", ir_version=IR_VERSION)


def save(data: bytes, path: Path) -> None:
    """Write a serialized graph to `path` whole or not at all (a kill mid-write leaves only a .part file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=path.name, suffix=".part", delete=False) as fh:
        try:
            fh.write(data)
        except BaseException:
            fh.close()
            os.unlink(fh.name)
            raise
    os.replace(fh.name, path)


def _int8_columns(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[in, out] float32 -> int8 [in, out] and a scale per output column (symmetric, zero point 0)."""
    scale = np.maximum(np.abs(matrix).max(axis=0), 1e-12) / 127.0
    return np.clip(np.rint(matrix / scale), -127, 127).astype(np.int8), scale.astype(np.float32)


def main(argv: list[str]) -> int:
    weights_path, kind, out = argv
    save(build(load(Path(weights_path)), kind).SerializeToString(), Path(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
