"""sum(x, axis) = x[..., 0, ...] + x[..., 1, ...] + ... + x[..., K-1, ...], exact for K <= 8.

A Sum over one axis of static size ``K`` is the AddV2 chain of its ``K`` one-element StridedSlices
(strides 1, no masks), each keeping the axis as size 1; without ``keep_dims`` a Reshape drops it.
The Edge TPU has no SUM (Basic Pitch's CQT magnitude sums ``re**2 + im**2`` over an axis of size
2 before its SQRT, and is cut there); ADD, STRIDED_SLICE and RESHAPE it runs. The additions are
done left to right as a float32 reduction may not be, so the result equals TF's up to float32
rounding (1e-6 relative). Only small axes (``K <= MAX_TERMS``): a longer chain costs ``K - 1``
ADDs, where a mean-like reduction has other rewrites. ``targeted``: only the Sums the target
refuses are rewritten (a target with SUM keeps it).

In int8 each partial sum gets its own scale: one int8 step of rounding per addition.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, tensor_shape

#: Largest reduced axis rewritten (the chain has MAX_TERMS - 1 additions).
MAX_TERMS = 8


class SumAsAdds(Rule):
    """Sum over one axis of size K <= 8 -> AddV2 chain of its K slices, exact."""

    name = "sum_as_adds"
    anchors = frozenset({"Sum"})
    fixes = frozenset({"Sum"})
    emits = frozenset({"StridedSlice", "AddV2", "Reshape"})
    exact = True
    targeted = True  # only the Sums the target refuses

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]},
                     extra={"axes": node.input[1]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        if dtype_of(m.root) != np.float32:
            return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
        axes = g.const_value(m.extra["axes"])
        if axes is None:
            return Reject("the reduction axes are not a constant", m.root.name)
        axes = np.ravel(axes)
        if axes.size != 1:
            return Reject(f"reduces {axes.size} axes {axes.tolist()}, not one", m.root.name)
        shape = tensor_shape(g, m.inputs["x"])
        if shape is None or any(d is None for d in shape):
            return Reject(f"input shape {shape} is not static", m.root.name)
        axis = int(axes[0]) % len(shape)
        if not 1 <= shape[axis] <= MAX_TERMS:
            return Reject(f"reduced axis has {shape[axis]} elements, not 1 to {MAX_TERMS}",
                          m.root.name)
        m.extra.update(shape=[int(d) for d in shape], axis=axis)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        shape, axis = m.extra["shape"], m.extra["axis"]
        rank, total = len(shape), None
        for i in range(shape[axis]):
            begin = [i if a == axis else 0 for a in range(rank)]
            end = [i + 1 if a == axis else d for a, d in enumerate(shape)]
            term = b.op("StridedSlice", [m.inputs["x"], b.const(f"begin{i}", begin, np.int32),
                                         b.const(f"end{i}", end, np.int32),
                                         b.const(f"strides{i}", np.ones(rank), np.int32)],
                        f"term{i}", attrs={"Index": np.int32, "begin_mask": 0, "end_mask": 0,
                                           "ellipsis_mask": 0, "new_axis_mask": 0,
                                           "shrink_axis_mask": 0})
            total = term if total is None else b.op("AddV2", [total, term], f"sum{i}")
        if m.root.attr["keep_dims"].b:
            return total
        out = [d for a, d in enumerate(shape) if a != axis]
        return b.op("Reshape", [total, b.const("shape", out, np.int32)], "drop_axis",
                    attrs={"Tshape": np.int32})


RULES = (SumAsAdds(),)
