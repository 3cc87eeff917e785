"""LeakyReLU(a) as ``max(x, a*x)``: exact for 0 <= a <= 1.

For x >= 0, ``x >= a x`` when a <= 1; for x < 0, ``a x >= x`` when a <= 1; with a >= 0 the
maximum is the LeakyReLU branch in both cases (for a > 1 it would pick the wrong branch, for
a < 0 the max is not LeakyReLU either). MAXIMUM and MUL are on the Edge TPU (LEAKY_RELU is not,
google-coral/edgetpu#597); the converter keeps them as MAXIMUM + MUL (float and int8, checked).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import fconst, float_dtype_reason
from rewriter.rules.base import Builder, Match, Reject, Rule


def leaky_alpha(node: NodeDef) -> float:
    """The ``alpha`` attribute of a LeakyRelu node (TF's default 0.2 when absent)."""
    return float(node.attr["alpha"].f) if "alpha" in node.attr else 0.2


class LeakyReluRule(Rule):
    """The shared match of the LeakyReLU rules: one ``LeakyRelu`` node and its alpha."""

    anchors = frozenset({"LeakyRelu"})
    fixes = frozenset({"LeakyRelu"})
    family = "leaky_relu"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]},
                     extra={"alpha": leaky_alpha(node)})


class LeakyReluMax(LeakyReluRule):
    """leaky_relu(x, a) = max(x, a*x) for 0 <= a <= 1, exact."""

    name = "leaky_relu_max"
    emits = frozenset({"Maximum", "Mul"})
    exact = True

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        if reason:
            return Reject(reason, m.root.name)
        a = m.extra["alpha"]
        if not 0.0 <= a <= 1.0:
            return Reject(f"alpha {a:g} is outside [0, 1], where max(x, a*x) is not LeakyReLU",
                          m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        ax = b.op("Mul", [x, fconst(b, "alpha", m.extra["alpha"])], "scaled")
        return b.op("Maximum", [x, ax], "out")


RULES = (LeakyReluMax(),)
