"""Neg as ``x * -1``: exact, so the int8 converter quantizes it.

The TFLite converter (TF 2.21) leaves ``NEG`` in float32 in full-int8 conversion
(``DEQUANTIZE -> NEG -> QUANTIZE``), so on an int8 accelerator it runs on the CPU and splits the
graph (an STFT/CQT front end negates the imaginary part; LayerNorm negates the mean). A MUL by
the constant -1 is quantized (and folded into a preceding convolution's weights when there is
one: measured, no MUL is left after ``conv * -1``).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import UnaryFloatRule, fconst
from rewriter.rules.base import Builder, Match


class NegAsMul(UnaryFloatRule):
    """neg(x) = x * -1, exact."""

    name = "neg_as_mul"
    anchors = frozenset({"Neg"})
    fixes = frozenset({"Neg"})
    emits = frozenset({"Mul"})
    exact = True
    order = 120  # after the rules that take this op as part of a larger pattern (LayerNorm, GELU)
    family = "neg"

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return b.op("Mul", [m.inputs["x"], fconst(b, "minus_one", -1.0)], "out")


RULES = (NegAsMul(),)
