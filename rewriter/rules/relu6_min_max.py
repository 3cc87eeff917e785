"""ReLU6 as ``min(max(x, 0), 6)``: exact, for targets without RELU6 (ONNX runtimes without Clip).

Both sides clamp x to [0, 6]. Note: the TFLite converter folds MINIMUM(MAXIMUM(x, 0), 6) back
into RELU6 (TF 2.21, float and int8), so on TFLite targets, which all have RELU6, this rule is
a no-op after conversion; it exists for the ONNX-side and GraphDef-side targets.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match


class Relu6MinMax(UnaryFloatRule):
    """relu6(x) = min(max(x, 0), 6), exact."""

    name = "relu6_min_max"
    anchors = frozenset({"Relu6"})
    fixes = frozenset({"Relu6"})
    emits = frozenset({"Maximum", "Minimum"})
    exact = True

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        low = b.op("Maximum", [m.inputs["x"], fconst(b, "zero", 0.0)], "max0")
        return b.op("Minimum", [low, fconst(b, "six", 6.0)], "out")


RULES = (Relu6MinMax(),)
