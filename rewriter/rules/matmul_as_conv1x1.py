"""A matmul with constant weights over several rows, as a 1x1 convolution: exact.

``y[..., m, :] = x[..., m, :] @ W`` for every row m is ``conv2d(x4, W[None, None])`` where ``x4``
is x seen as rank 4 (leading 1s added): the convolution applies the same K x N weights at every
position. The TFLite converter turns a MatMul or BatchMatMul with constant weights into a
FULLY_CONNECTED whose output keeps every row ([T, N], [1, T, N], [1, H, W, N]); the Edge TPU
maps a FULLY_CONNECTED only when its "output tensor is one-dimensional" (its documented table),
so Dense layers on sequences (transformers) and on feature maps (ConvNeXt's pointwise MLP) stop
the compiler. As a CONV_2D they run.

tf_keras' ``EinsumDense`` (``rows + K, K + N -> rows + N``, as in MultiHeadAttention) is the same
matmul with x seen as [rows, prod K]. Keras' ``Dense`` on rank > 2 freezes as ``Reshape(x, [M, K]) -> MatMul -> Reshape``; when x came
through such a Reshape from a tensor of rank <= 4 whose last axis is K, the convolution reads that
tensor directly, so no reshape regroups dimensions (one would move data on the Edge TPU, which
warns that "certain reshapes might not be mapped"). The result is reshaped to the matmul's own
output shape, which the converter folds into the Reshape that follows.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import (
    Builder,
    Match,
    Reject,
    Rule,
    dtype_of,
    producer_op,
    static_value,
    tensor_shape,
)

MATMUL_OPS = frozenset({"MatMul", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"})


def _flag(node: NodeDef, *names: str) -> bool:
    return any(node.attr[n].b for n in names if n in node.attr)


class MatMulAsConv1x1(Rule):
    """x @ W (W constant, x with several rows) = conv2d(x as rank 4, W as a 1x1 kernel), exact."""

    name = "matmul_as_conv1x1"
    anchors = MATMUL_OPS
    fixes = MATMUL_OPS
    emits = frozenset({"Reshape", "Conv2D"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = [r for r in node.input if not r.startswith("^")]
        if len(ins) != 2 or g.const_value(ins[0]) is not None:
            return None
        weights = static_value(g, ins[1])
        shape = tensor_shape(g, ins[0])
        if weights is None or (shape is not None and len(shape) >= 2
                               and all(d == 1 for d in shape[:-1])):
            return None  # one row: the FULLY_CONNECTED's output is one-dimensional already
        return Match(root=node, nodes=[node], inputs={"x": ins[0]},
                     consts={"w": np.asarray(weights[0], np.float64)})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        if node.op == "Einsum":
            return self._check_einsum(g, m)
        if _flag(node, "transpose_a", "adj_x"):
            return Reject("the activation operand is transposed", node.name)
        w = m.consts["w"]
        if w.ndim > 2 and any(d != 1 for d in w.shape[:-2]):
            return Reject(f"weights {list(w.shape)} are batched", node.name)
        w = w.reshape(w.shape[-2:]) if w.ndim >= 2 else None
        if w is None:
            return Reject("weights are not a matrix", node.name)
        m.consts["w"] = w.T if _flag(node, "transpose_b", "adj_y") else w
        shape = tensor_shape(g, m.inputs["x"])
        out = tensor_shape(g, f"{node.name}:0")
        if shape is None or out is None or any(d is None for d in (*shape, *out)):
            return Reject(f"input shape {shape} is not static", node.name)
        if len(shape) > 4 or len(shape) < 2:
            return Reject(f"input rank {len(shape)} is not 2..4", node.name)
        m.extra["x"], m.extra["shape"] = self._source(g, m.inputs["x"], list(shape))
        m.extra["out"] = [int(d) for d in out]
        return None

    @staticmethod
    def _check_einsum(g: GraphIndex, m: Match) -> Reject | None:
        """tf_keras ``EinsumDense``: ``rows + K, K + N -> rows + N`` (e.g. ``abc,cde->abde``),
        a matmul of x seen as [rows, prod K] with the kernel seen as [prod K, prod N]."""
        node = m.root
        eq = node.attr["equation"].s.decode().replace(" ", "")
        shape = tensor_shape(g, m.inputs["x"])
        out = tensor_shape(g, f"{node.name}:0")
        if shape is None or out is None or any(d is None for d in (*shape, *out)):
            return Reject(f"input shape {shape} is not static", node.name)
        lhs, _, res = eq.partition("->")
        a, _, w = lhs.partition(",")
        k = [c for c in a if c in w and c not in res]
        rows, n = a[:len(a) - len(k)], w[len(k):]
        if not k or a[len(rows):] != "".join(k) or not w.startswith("".join(k)) \
                or res != rows + n or len(m.consts["w"].shape) != len(w):
            return Reject(f"equation {eq!r} is not rows+K,K+N->rows+N", node.name)
        if len(rows) + 1 > 4:
            return Reject(f"{len(rows)} row axes: more than 3", node.name)
        kk = int(np.prod(shape[len(rows):]))
        m.consts["w"] = m.consts["w"].reshape(kk, -1)
        m.extra["x"], m.extra["shape"] = m.inputs["x"], [int(d) for d in shape[:len(rows)]] + [kk]
        m.extra["out"] = [int(d) for d in out]
        return None

    @staticmethod
    def _source(g: GraphIndex, x: str, shape: list[int]) -> tuple[str, list[int]]:
        """x, or the tensor a Keras Tensordot reshaped into x when it has rank <= 4 and the same
        last axis (the convolution reads it without regrouping dimensions)."""
        reshape = producer_op(g, x, "Reshape")
        if reshape is not None and len(shape) == 2:
            src = reshape.input[0]
            full = tensor_shape(g, src)
            if (full is not None and all(d is not None for d in full) and 2 <= len(full) <= 4
                    and full[-1] == shape[-1]):
                return src, [int(d) for d in full]
        return x, shape

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x, shape, w = m.extra["x"], m.extra["shape"], m.consts["w"]
        if len(shape) < 4 or list(tensor_shape(g, x) or ()) != shape:
            shape4 = [1] * (4 - len(shape)) + shape
            x = b.op("Reshape", [x, b.const("shape4", shape4, dtype=np.int32)], "as_rank4",
                     attrs={"Tshape": np.int32})
        kernel = b.const("kernel", w.reshape(1, 1, *w.shape))
        y = b.op("Conv2D", [x, kernel], "conv1x1",
                 attrs={"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
                        "dilations": [1, 1, 1, 1]})
        return b.op("Reshape", [y, b.const("out_shape", m.extra["out"], dtype=np.int32)],
                    "rows", attrs={"Tshape": np.int32})


RULES = (MatMulAsConv1x1(),)
