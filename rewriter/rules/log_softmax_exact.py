"""LogSoftmax as ``d + log(sum(exp(d))) * -1``, ``d = x - max(x)`` over the last axis: exact.

For targets that run EXP, LOG, SUM and REDUCE_MAX in int8 but have no LOG_SOFTMAX (Ethos-U55
and U65: Vela leaves LOG_SOFTMAX to the CPU). Subtracting the maximum keeps ``exp`` in (0, 1]
and the sum in [1, C], which is also what makes the int8 form quantize well. The last step is
an ADD of ``log(...) * -1``, not a SUB: TF 2.21's converter fuses ``d - log(sum(exp(d)))`` back
into LOG_SOFTMAX (checked, int8 and float); with the MUL it keeps the ops. SUM, not MEAN: Vela
runs MEAN over the channel axis of a 4-D tensor on the CPU.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import FloatRule, fconst
from rewriter.rules._unary import unary_node
from rewriter.rules.base import Builder, Match


class LogSoftmaxExact(FloatRule):
    """log_softmax(x) = d + -1 * log(sum(exp(d))), d = x - max(x), exact."""

    name = "log_softmax_exact"
    anchors = frozenset({"LogSoftmax"})
    fixes = frozenset({"LogSoftmax"})
    emits = frozenset({"Max", "Sub", "Exp", "Sum", "Log", "Mul", "AddV2"})
    exact = True
    family = "log_softmax"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return unary_node(node)

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        axis = b.const("axis", [-1], np.int32)
        reduce = {"keep_dims": True, "Tidx": np.int32}
        d = b.op("Sub", [x, b.op("Max", [x, axis], "max", attrs=reduce)], "shifted")
        total = b.op("Sum", [b.op("Exp", [d], "exp"), axis], "sum", attrs=reduce)
        minus_log = b.op("Mul", [b.op("Log", [total], "log"), fconst(b, "minus_one", -1.0)],
                         "minus_log")
        return b.op("AddV2", [d, minus_log], "out")


RULES = (LogSoftmaxExact(),)
