"""Fold shape plumbing to constants once shapes are static.

``Shape(x)`` of a tensor whose shape TensorFlow infers fully (batch fixed, as after loading with
static input shapes) is a constant, and so is every StridedSlice / Pack / ConcatV2 / Prod / Fill /
GatherV2 / Range / Cast / integer arithmetic over constants. Each such node becomes one ``Const``
holding its value (computed with numpy, cast to the node's output dtype), under the node's own
name. Float arithmetic is left alone (the BatchNorm rules read those subgraphs). Exact.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, node_dtype
from rewriter.rules.base import Builder, Match, Reject, Rule, static_value

#: Ops folded whatever their dtype (they move shapes around or fill constants).
PLUMBING = frozenset({"Shape", "Size", "Rank", "StridedSlice", "Pack", "ConcatV2", "Prod",
                      "Fill", "GatherV2", "Range", "Cast"})
#: Arithmetic folded only on integers (shape math such as batch * height).
INT_ARITH = frozenset({"Mul", "Add", "AddV2", "Sub", "FloorDiv", "Maximum", "Minimum",
                       "Sum"})
#: Largest folded constant, in elements (a Fill of a big tensor stays a Fill).
MAX_ELEMENTS = 1 << 16


def _out_dtype(node: NodeDef) -> np.dtype | None:
    """The dtype a node produces: output-type attributes first (Shape's out_type, Cast's DstT)."""
    return node_dtype(node, ("out_type", "DstT", "T", "dtype"))


class FoldShapeConstants(Rule):
    """shape(x) -> Const when x's shape is static; const-only plumbing -> Const. Exact."""

    name = "fold_shape_constants"
    anchors = PLUMBING | INT_ARITH
    fixes = PLUMBING
    emits = frozenset({"Const"})
    exact = True
    order = 10  # before the rules that read the folded values

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        dtype = _out_dtype(node)
        if dtype is None or (node.op in INT_ARITH and dtype.kind not in "iu"):
            return None
        got = static_value(g, node.name)
        if got is None:
            return None
        value = got[0]
        if value.size > MAX_ELEMENTS:
            return Reject(f"folded value would have {value.size} elements "
                          f"(limit {MAX_ELEMENTS})", node.name)
        return Match(root=node, nodes=[node], consts={"value": value.astype(dtype)})

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        value = m.consts["value"]
        return b.const("value", value, dtype=value.dtype)


RULES = (FoldShapeConstants(),)
