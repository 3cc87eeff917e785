"""pack(x_0, ..., x_n-1, axis=0) of [1, ...] tensors = reshape(pack(x_0, ..., x_n-1, axis=1)), exact.

Packing n tensors of shape ``[1, d...]`` on axis 0 gives ``[n, 1, d...]`` with element
``[t, 0, i...] = x_t[0, i...]``; packing them on axis 1 gives ``[1, n, d...]`` with element
``[0, t, i...] = x_t[0, i...]``: the same values in the same row-major order, so a RESHAPE to
``[n, 1, d...]`` makes the two equal. An unrolled recurrent layer's sequence output is such a
pack (rule ``while_unroll``: one ``[1, units]`` state per step, stacked time-major as the loop's
TensorList/TensorArray did), and the Edge TPU refuses PACK along the batch axis (its documented
table: "No packing in batch dimension"), cutting the graph there. Pure data movement, so exact;
the Transpose that usually follows (time-major to batch-major) then only moves a size-1 axis,
which the TFLite converter turns into a RESHAPE and folds.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, tensor_shape


class PackOffBatchAxis(Rule):
    """Pack on axis 0 of ``[1, ...]`` items -> Reshape of their Pack on axis 1, exact."""

    name = "pack_off_batch_axis"
    anchors = frozenset({"Pack"})
    fixes = frozenset({"Pack"})
    emits = frozenset({"Pack", "Reshape"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        if node.attr["axis"].i != 0:
            return None  # negative axes count from the output's end: never the batch axis here
        items = [r for r in node.input if not r.startswith("^")]
        return Match(root=node, nodes=[node], inputs={f"x{i}": r for i, r in enumerate(items)},
                     extra={"items": items})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shapes = [tensor_shape(g, r) for r in m.extra["items"]]
        first = shapes[0] if shapes else None
        if first is None or any(s != first for s in shapes) or any(d is None for d in first):
            return Reject(f"item shapes {shapes[:3]} are not one static shape", m.root.name)
        if not first or first[0] != 1:
            return Reject(f"items of shape {list(first)} do not start with a size-1 axis "
                          "(only then is the pack on axis 1 the same data)", m.root.name)
        m.extra["shape"] = [len(shapes), *(int(d) for d in first)]
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        packed = b.copy_of(m.root, m.extra["items"], "pack_axis_1")
        g[packed].attr["axis"].i = 1
        shape = b.const("shape", m.extra["shape"], np.int32)
        return b.op("Reshape", [packed, shape], "reshape", attrs={"Tshape": np.int32},
                    dtype=dtype_of(m.root))


RULES = (PackOffBatchAxis(),)
