"""Abs as ``relu(x) + relu(-1 * x)``: exact, for targets without ABS (the Edge TPU).

One of the two ReLUs is zero everywhere, the other is |x|. RELU, MUL and ADD are on the Edge TPU
and quantize in int8. The shorter ``max(x, -x)`` is *not* used: measured with TF 2.21 / LiteRT,
its full-int8 TFLite form (MUL, MAXIMUM) returns wrong values (max error 1.0 relative to the
output's scale on a conv output in [-1, 1]), because MAXIMUM shares one quantization scale
between its inputs and its output; ``relu(x) + relu(-x)`` has the int8 error of ABS itself
(0.0089 vs 0.0090 on the same model).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match


class AbsReluSum(UnaryFloatRule):
    """abs(x) = relu(x) + relu(-1 * x), exact."""

    name = "abs_relu_sum"
    anchors = frozenset({"Abs"})
    fixes = frozenset({"Abs"})
    emits = frozenset({"Relu", "Mul", "AddV2"})
    exact = True
    order = 120  # after the rules that take this op as part of a larger pattern (LayerNorm, GELU)
    family = "abs"

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        pos = b.op("Relu", [x], "pos")
        neg = b.op("Relu", [b.op("Mul", [x, fconst(b, "minus_one", -1.0)], "negated")], "neg")
        return b.op("AddV2", [pos, neg], "out")


RULES = (AbsReluSum(),)
