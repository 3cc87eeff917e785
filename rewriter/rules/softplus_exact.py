"""Softplus as ``relu(x) + log(1 + exp(-|x|))``: exact, and stable where TFLite's is not.

``log(1 + e^x) = max(x, 0) + log(1 + e^-|x|)`` for every x. The converter's own lowering is
``log(exp(x) + 1)``, which overflows to inf for x > 88 in float32 (checked: the converted
``tf.nn.softplus`` returns inf at x = 90); this form does not. ``-|x|``
is ``|x| * -1`` rather than NEG, which full-int8 conversion leaves in float.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match


class SoftplusExact(UnaryFloatRule):
    """softplus(x) = relu(x) + log(1 + exp(-|x|)), exact."""

    name = "softplus_exact"
    anchors = frozenset({"Softplus"})
    fixes = frozenset({"Softplus"})
    emits = frozenset({"Relu", "Abs", "Mul", "Exp", "AddV2", "Log"})
    exact = True

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        mabs = b.op("Mul", [b.op("Abs", [x], "abs"), fconst(b, "minus_one", -1.0)], "minus_abs")
        one_p = b.op("AddV2", [b.op("Exp", [mabs], "exp"), fconst(b, "one", 1.0)], "one_plus")
        return b.op("AddV2", [b.op("Relu", [x], "relu"), b.op("Log", [one_p], "log")], "out")


RULES = (SoftplusExact(),)
