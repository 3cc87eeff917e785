"""Mish ``x * tanh(softplus(x))`` as ``x * s(2 - s) / (1 + (1 - s)^2)``, s = sigmoid(x): exact.

With ``1 + e^x = 1/(1 - s)``: ``tanh(log(1 + e^x)) = ((1+e^x)^2 - 1)/((1+e^x)^2 + 1)
= (1 - (1-s)^2)/(1 + (1-s)^2) = s(2 - s)/(1 + (1-s)^2)``. The division is by
``d = 1 + (1-s)^2`` in [1, 2], built as ``rsqrt(d) * rsqrt(d)`` (RSQRT and MUL: Ethos-U55 and
TFLite Micro int8 have them, not DIV). Matches the Keras 3 / tf_keras frozen form
``Mul(x, Tanh(Softplus(x)))`` in either operand order; no Exp, Log or Tanh is left.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import (
    FloatRule,
    fconst,
    reciprocal_small,
    same_tensor,
)
from rewriter.rules.base import Builder, Match, commuted


class MishSigmoid(FloatRule):
    """mish(x) = x * s(2-s) * rsqrt(1 + (1-s)^2)^2, s = sigmoid(x), exact."""

    name = "mish_sigmoid"
    anchors = frozenset({"Mul"})
    fixes = frozenset({"Softplus", "Tanh"})
    emits = frozenset({"Sigmoid", "Sub", "AddV2", "Mul", "Rsqrt"})
    exact = True
    order = 90  # before softplus_exact, which would break the Mish pattern up

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        for x, t in commuted(node):
            tanh = g.producer(t)
            if tanh is None or tanh.op != "Tanh":
                continue
            sp = g.producer(tanh.input[0])
            if sp is None or sp.op != "Softplus" or not same_tensor(sp.input[0], x):
                continue
            return Match(root=node, nodes=[node, tanh, sp], inputs={"x": x})
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        one = fconst(b, "one", 1.0)
        s = b.op("Sigmoid", [x], "sigmoid")
        u = b.op("Sub", [one, s], "one_minus_s")
        num = b.op("Mul", [s, b.op("AddV2", [u, one], "two_minus_s")], "num")
        den = b.op("AddV2", [b.op("Mul", [u, u], "u_sq"), one], "den")
        return b.op("Mul", [b.op("Mul", [x, num], "x_num"), reciprocal_small(b, den, "den")],
                    "out")


RULES = (MishSigmoid(),)
