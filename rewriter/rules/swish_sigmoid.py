"""Swish/SiLU as plain ``x * sigmoid(x)`` (``x * sigmoid(beta x)`` for beta != 1): exact.

Keras 3 ``swish``/``silu`` and ``tf.nn.silu`` freeze to ``IdentityN(Mul(x, Sigmoid(Mul(beta,
x))), x, beta)``: the IdentityN is the custom-gradient wrapper and ``beta`` a Const 1.0. This
rule drops the wrapper and the multiply by 1, leaving MUL and LOGISTIC. TF 2.21's converter
already emits LOGISTIC + MUL for the wrapped form, so on TFLite it is a clean-up (the planner
never selects it, IdentityN being plumbing); it matters for graph-level consumers that do not
understand IdentityN.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.rules._activation import (
    fconst,
    linear_of,
    same_tensor,
    scalar_const,
    single_consumer,
)
from rewriter.rules.base import Builder, Match, Reject, Rule, commuted, dtype_of


class SwishSigmoid(Rule):
    """swish(x) = x * sigmoid(beta*x) without the IdentityN wrapper, exact."""

    name = "swish_sigmoid"
    anchors = frozenset({"IdentityN"})
    fixes = frozenset({"IdentityN"})
    emits = frozenset({"Mul", "Sigmoid"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = data_inputs(node)
        if len(ins) != 3 or scalar_const(g, ins[2]) is None:
            return None
        mul = g.producer(ins[0])
        if mul is None or mul.op != "Mul" or not single_consumer(g, mul):
            return None
        for x, s in commuted(mul):
            sig = g.producer(s)
            if sig is None or sig.op != "Sigmoid":
                continue
            if not same_tensor(x, ins[1]):
                continue
            lin = linear_of(g, sig.input[0])
            if lin is not None and same_tensor(lin[0], x):
                return Match(root=node, nodes=[node, mul, sig] + lin[2], inputs={"x": x},
                             extra={"beta": lin[1]})
            if same_tensor(sig.input[0], x):
                return Match(root=node, nodes=[node, mul, sig], inputs={"x": x},
                             extra={"beta": 1.0})
        return None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        dt = dtype_of(m.nodes[1])
        if dt != np.dtype(np.float32):
            return Reject(f"dtype {dt} is not float32", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        arg = x
        if m.extra["beta"] != 1.0:
            arg = b.op("Mul", [x, fconst(b, "beta", m.extra["beta"])], "scaled")
        return b.op("Mul", [x, b.op("Sigmoid", [arg], "sigmoid")], "out")


RULES = (SwishSigmoid(),)
