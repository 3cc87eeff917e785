"""Tanh-approximate GELU (``approximate=True``) re-spelt as ``x * sigmoid(2u)``, exactly.

Keras and TF freeze ``0.5 x (1 + tanh(u))``, ``u = sqrt(2/pi) (x + 0.044715 x^3)``, with x^3 as
``Pow(x, 3)``; the TFLite converter fuses that into GELU (which the Edge TPU and TFLite Micro
lack) and POW is missing on most accelerators. ``0.5 (1 + tanh(u)) = sigmoid(2u)``, so the same
function is ``x * sigmoid(x (c1 + c3 x^2))`` with ``c1 = 2 sqrt(2/pi)``, ``c3 = 0.044715 c1``:
MUL, ADD and LOGISTIC only, which the converter leaves alone (checked by the test).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import FloatRule, match_gelu
from rewriter.rules.base import Builder, Match
from rewriter.rules.gelu_tanh_approx import sigmoid_of_tanh_form


class GeluTanhAsSigmoid(FloatRule):
    """0.5x(1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi)(x + 0.044715x^3), exact."""

    name = "gelu_tanh_as_sigmoid"
    anchors = frozenset({"Mul"})
    fixes = frozenset({"Pow", "Tanh"})
    emits = frozenset({"Mul", "AddV2", "Sigmoid"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        m = match_gelu(g, node)
        return m if m is not None and m.extra["form"] == "tanh" else None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return sigmoid_of_tanh_form(b, m.inputs["x"])


RULES = (GeluTanhAsSigmoid(),)
