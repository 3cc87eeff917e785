"""LeakyReLU(a) as ``relu(x) + (-a) * relu(-x)``, the form the TFLite converter turns into PRELU.

Exact for every a: for x >= 0 the second term is 0; for x < 0 it is ``-a * -x = a x``. TF 2.21's
converter fuses ``AddV2(Relu(x), Mul(Relu(Neg(x)), c))`` with a constant ``c`` of rank
``rank(x) - 1`` into ``PRELU(x, alpha = -c)`` (checked by conversion: a scalar or a full-rank
``c`` is not fused and leaves RELU, NEG, MUL, ADD). So ``c`` is stored with shape
``[1] * (rank - 1)``, which needs the static rank of x (read once per graph through TensorFlow
shape inference). PRELU is on the Edge TPU, Ethos-U, TFLite Micro and the GPU delegate, and
quantizes in full int8.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules._activation import float_dtype_reason, static_rank
from rewriter.rules.base import Builder, Match, Reject
from rewriter.rules.leaky_relu_max import LeakyReluRule


class LeakyReluPrelu(LeakyReluRule):
    """leaky_relu(x, a) = relu(x) + (-a) * relu(-x) (converted to PRELU), exact."""

    name = "leaky_relu_prelu"
    emits = frozenset({"Relu", "Neg", "Mul", "AddV2"})
    exact = True
    priority = -1  # one PRELU after conversion beats MAXIMUM + MUL where the target has both

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        if reason:
            return Reject(reason, m.root.name)
        rank = static_rank(g, m.inputs["x"])
        if rank is None or rank < 2:
            return Reject(f"input rank is {'unknown' if rank is None else rank}; the PReLU "
                          "form needs a static rank >= 2 to shape alpha", m.root.name)
        m.extra["rank"] = rank
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        neg_alpha = np.full([1] * (m.extra["rank"] - 1), -m.extra["alpha"], dtype=b.dtype)
        c = b.const("neg_alpha", neg_alpha, dtype=b.dtype)
        neg = b.op("Relu", [b.op("Neg", [x], "neg")], "neg_relu")
        return b.op("AddV2", [b.op("Relu", [x], "relu"), b.op("Mul", [neg, c], "neg_part")],
                    "out")


RULES = (LeakyReluPrelu(),)
