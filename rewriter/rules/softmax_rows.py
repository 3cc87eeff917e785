"""A softmax over the last axis of a tensor with several rows, one softmax per row: exact.

``softmax(x)[..., r, :]`` depends only on row r, so splitting the rows apart (SPLIT along each
axis larger than 1, outermost first), taking the softmax of each ``[1, ..., 1, N]`` row and
concatenating the results back (CONCATENATION) computes the same tensor with the same kernel.
The Edge TPU's documented table maps a SOFTMAX only on a "1-D input tensor with a max of 16,000
elements": attention's softmax over [1, H, T, S] scores is not, each of its H * T rows is.
Rows longer than 16,000 are refused (they would stay off the Edge TPU anyway), and so are more
than 1,024 rows (that many ops would not be worth it).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, tensor_shape

#: The Edge TPU's documented SOFTMAX limit (elements of its 1-D input).
MAX_ROW = 16000
#: More rows than this would emit too many ops to be worth it; refused.
MAX_ROWS = 1024


class SoftmaxRows(Rule):
    """softmax(x) over [..., R, N] = concat over rows r of softmax(x[..., r:r+1, :]), exact."""

    name = "softmax_rows"
    anchors = frozenset({"Softmax"})
    fixes = frozenset({"Softmax"})
    emits = frozenset({"Split", "Softmax", "ConcatV2"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        shape = tensor_shape(g, node.input[0])
        if shape is not None and all(d == 1 for d in shape[:-1]):
            return None  # one row already (this rule's own output among them)
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        shape = tensor_shape(g, m.inputs["x"])
        if shape is None or any(d is None for d in shape):
            return Reject(f"input shape {shape} is not static", node.name)
        rows = int(np.prod(shape[:-1]))
        if shape[-1] > MAX_ROW:
            return Reject(f"rows of {shape[-1]} elements are longer than {MAX_ROW}", node.name)
        if rows > MAX_ROWS:
            return Reject(f"{rows} rows, more than {MAX_ROWS}", node.name)
        m.extra["shape"] = [int(d) for d in shape]
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        shape = m.extra["shape"]

        def rows(ref: str, axis: int, tag: str) -> str:
            if axis == len(shape) - 1:
                return b.op("Softmax", [ref], f"softmax_{tag}")
            if shape[axis] == 1:
                return rows(ref, axis + 1, tag)
            n = shape[axis]
            dim = b.const(f"axis_{axis}_{tag}", axis, np.int32)
            split = b.op("Split", [dim, ref], f"split_{tag}", attrs={"num_split": n})
            parts = [rows(f"{split}:{i}" if i else split, axis + 1, f"{tag}_{i}")
                     for i in range(n)]
            return b.op("ConcatV2", [*parts, dim], f"concat_{tag}",
                        attrs={"N": n, "Tidx": np.int32})

        return rows(m.inputs["x"], 0, "r")


RULES = (SoftmaxRows(),)
