"""SELU as ``l*relu(x) + l*a*exp(min(x, 0)) - l*a``: exact (l = 1.0507..., a = 1.6732...).

TF's ``Selu`` op is ``l * (x > 0 ? x : a (exp(x) - 1))``; the converter lowers it to GREATER,
MUL, EXP, SUB, MUL, SELECT (SELECT is on no accelerator, and TFLite Micro has no kernel for
it). This form is ``l * ELU_a(x)`` written with RELU, SUB, EXP, MUL and ADD only (for x > 0,
exp(0) - 1 = 0). ``min(x, 0)`` is ``x - relu(x)``, not MINIMUM: the int8 MINIMUM kernel shares
one scale between input and output, so the quantizer gave x the range [lo, 0] and clipped the
positive half relu(x) reads (measured before: int8 cosine 0.81 in a conv/SELU net on Ethos-U).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


class SeluExact(UnaryFloatRule):
    """selu(x) = l*relu(x) + l*a*(exp(x - relu(x)) - 1), exact."""

    name = "selu_exact"
    anchors = frozenset({"Selu"})
    fixes = frozenset({"Selu"})
    emits = frozenset({"Relu", "Sub", "Exp", "Mul", "AddV2"})
    exact = True

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        la = SELU_SCALE * SELU_ALPHA
        relu = b.op("Relu", [x], "relu")
        pos = b.op("Mul", [relu, fconst(b, "scale", SELU_SCALE)], "pos")
        exp = b.op("Exp", [b.op("Sub", [x, relu], "neg_part")], "exp")  # min(x, 0), int8-safe
        neg = b.op("AddV2", [b.op("Mul", [exp, fconst(b, "scale_alpha", la)], "scaled_exp"),
                             fconst(b, "minus_scale_alpha", -la)], "neg")
        return b.op("AddV2", [pos, neg], "out")


RULES = (SeluExact(),)
