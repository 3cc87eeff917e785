"""GELU (erf/erfc form) as ``x * sigmoid(1.702 x)`` (two ops: LOGISTIC and MUL).

The cheapest GELU for targets without Exp; :mod:`gelu_tanh_approx` is 43x tighter for two
more MULs and an ADD, so the planner prefers it whenever both fit.

Measured (float64, 240,001 points over [-12, 12]): max |new - GELU| = 2.03e-2 (at x = -2.27),
stated as 2.1e-2.
"""

from __future__ import annotations

from rewriter.graph import GraphIndex, NodeDef
from rewriter.rules._activation import fconst, float_dtype_reason, match_gelu
from rewriter.rules.base import Bound, Builder, Match, Reject, Rule


class GeluSigmoidApprox(Rule):
    """GELU(x) ~ x * sigmoid(1.702 x) (max abs error 2.1e-2)."""

    name = "gelu_sigmoid_approx"
    anchors = frozenset({"Mul"})
    #: Mul: the graph-level check reports a Keras 3 GELU as its final Mul, which the converter
    #: turns into GELU (the Erfc is absorbed into it).
    fixes = frozenset({"Erfc", "Erf", "Mul"})
    emits = frozenset({"Mul", "Sigmoid"})
    exact = False
    family = "gelu"
    order = 90  # before erf_poly, which would otherwise take the Erf(c) out of the GELU
    bound = Bound(2.1e-2, (-12.0, 12.0))

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        m = match_gelu(g, node)
        return m if m is not None and m.extra["form"] in ("erf", "erfc") else None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        return Reject(reason, m.root.name) if reason else None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        s = b.op("Sigmoid", [b.op("Mul", [x, fconst(b, "k", 1.702)], "scaled")], "sigmoid")
        return b.op("Mul", [x, s], "out")


RULES = (GeluSigmoidApprox(),)
