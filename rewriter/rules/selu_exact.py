"""SELU as ``l*relu(x) + l*a*exp(min(x, 0)) - l*a``: exact (l = 1.0507..., a = 1.6732...).

TF's ``Selu`` op is ``l * (x > 0 ? x : a (exp(x) - 1))``; the converter lowers it to GREATER,
MUL, EXP, SUB, MUL, SELECT_V2 (SELECT is on no accelerator). This form is ``l * ELU_a(x)``
written with RELU, MINIMUM, EXP, MUL and ADD only (for x > 0, exp(0) - 1 = 0).
"""

from __future__ import annotations

from rewriter.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


class SeluExact(UnaryFloatRule):
    """selu(x) = l*relu(x) + l*a*(exp(min(x, 0)) - 1), exact."""

    name = "selu_exact"
    anchors = frozenset({"Selu"})
    fixes = frozenset({"Selu"})
    emits = frozenset({"Relu", "Minimum", "Exp", "Mul", "AddV2"})
    exact = True

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        la = SELU_SCALE * SELU_ALPHA
        pos = b.op("Mul", [b.op("Relu", [x], "relu"), fconst(b, "scale", SELU_SCALE)], "pos")
        exp = b.op("Exp", [b.op("Minimum", [x, fconst(b, "zero", 0.0)], "neg_part")], "exp")
        neg = b.op("AddV2", [b.op("Mul", [exp, fconst(b, "scale_alpha", la)], "scaled_exp"),
                             fconst(b, "minus_scale_alpha", -la)], "neg")
        return b.op("AddV2", [pos, neg], "out")


RULES = (SeluExact(),)
