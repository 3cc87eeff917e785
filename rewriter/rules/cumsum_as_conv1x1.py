"""A cumulative sum as a 1x1 convolution with a triangular matrix of ones, exact.

``cumsum(x, axis)[..., j] = sum_i x[..., i] * T[i, j]`` with ``T[i, j] = 1`` where ``i <= j``
(``i < j`` when ``exclusive``; ``i >= j`` / ``i > j`` when ``reverse``), so with the summed axis
moved last (a TRANSPOSE when it is not), the whole sum is one CONV_2D with kernel ``T`` over that
axis as channels. Every product is by 1 or 0, so the result is the same sums in another order:
exact up to float32 summation order (cf. ExecuTorch's ``decompose_cumsum_pass``, a 1-D conv).

Why: TF 2.21's full-int8 converter leaves CUMSUM in float (DEQUANTIZE -> CUMSUM -> QUANTIZE,
predicted by ``check``), and neither the Edge TPU nor the Ethos-U55 has it; CONV_2D, RESHAPE and
TRANSPOSE they run, in int8 (the ones are exact int8 weights). Refused for axes longer than
:data:`MAX_LENGTH` (the kernel is ``n x n``).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, static_value, tensor_shape

#: Longest summed axis (the kernel holds n*n weights: 1024 -> 1M).
MAX_LENGTH = 1024
_CONV = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
         "dilations": [1, 1, 1, 1]}


def triangle(n: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """``T`` with ``(x @ T)[j]`` the (exclusive, reverse) cumulative sum of ``x`` at ``j``."""
    i, j = np.indices((n, n))
    keep = (i >= j if reverse else i <= j) & ~((i == j) & exclusive)
    return keep.astype(np.float64)


class CumsumAsConv1x1(Rule):
    """cumsum(x, axis) = conv1x1(x with axis last, T), T triangular ones; exact."""

    name = "cumsum_as_conv1x1"
    anchors = frozenset({"Cumsum"})
    fixes = frozenset({"Cumsum"})
    emits = frozenset({"Transpose", "Reshape", "Conv2D"})
    exact = True
    order = 160  # after sparsemax_pairwise, whose pattern holds a Cumsum

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        axis = static_value(g, node.input[1])
        shape = tensor_shape(g, m.inputs["x"])
        if axis is None or shape is None or any(d is None for d in shape) or not shape:
            return Reject(f"axis or shape not static (shape {shape})", node.name)
        rank = len(shape)
        a = int(np.ravel(axis[0])[0]) % rank
        if shape[a] > MAX_LENGTH:
            return Reject(f"summed axis of {shape[a]} is longer than {MAX_LENGTH}", node.name)
        m.extra.update(axis=a, shape=[int(d) for d in shape],
                       exclusive=node.attr["exclusive"].b, reverse=node.attr["reverse"].b)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        a, shape = m.extra["axis"], m.extra["shape"]
        rank, n = len(shape), shape[m.extra["axis"]]
        perm = [d for d in range(rank) if d != a] + [a]
        x = m.inputs["x"]
        if a != rank - 1:
            x = b.op("Transpose", [x, b.const("perm", perm, dtype=np.int32)], "axis_last",
                     attrs={"Tperm": np.int32})
        moved = [shape[d] for d in perm]
        rows = int(np.prod(moved[:-1])) if rank > 1 else 1
        flat = b.op("Reshape", [x, b.const("rows", [1, rows, 1, n], dtype=np.int32)], "rows_4d",
                    attrs={"Tshape": np.int32})
        t = triangle(n, m.extra["exclusive"], m.extra["reverse"]).reshape(1, 1, n, n)
        y = b.op("Conv2D", [flat, b.const("triangle", t)], "sums", attrs=_CONV)
        y = b.op("Reshape", [y, b.const("moved", moved, dtype=np.int32)], "moved_back",
                 attrs={"Tshape": np.int32})
        if a != rank - 1:
            back = np.argsort(perm).tolist()
            y = b.op("Transpose", [y, b.const("perm_back", back, dtype=np.int32)], "axis_back",
                     attrs={"Tperm": np.int32})
        return y


RULES = (CumsumAsConv1x1(),)
