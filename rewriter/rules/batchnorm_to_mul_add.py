"""Inference batch normalization as one Mul and one Add with folded constants.

``y = (x - mean) * gamma / sqrt(var + eps) + beta = x * scale + offset`` with
``scale = gamma / sqrt(var + eps)`` and ``offset = beta - mean * scale``, computed in float64 and
stored float32. Matches ``FusedBatchNorm``/``V3`` and the unfused Keras 3 subgraph (see
:mod:`rewriter.rules._batchnorm`). Used where the BN cannot fold into a producing convolution.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._batchnorm import BN_ANCHORS, BN_FIXES, BatchNorm, match_batchnorm
from rewriter.rules.base import Builder, Match, Reject, Rule


class BatchNormToMulAdd(Rule):
    """BN(x) = x * (gamma / sqrt(var + eps)) + (beta - mean * gamma / sqrt(var + eps)), exact."""

    name = "batchnorm_to_mul_add"
    anchors = BN_ANCHORS
    fixes = BN_FIXES
    emits = frozenset({"Mul", "AddV2"})
    exact = True
    priority = 1  # after batchnorm_fold_into_conv

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        bn = match_batchnorm(g, node)
        if not isinstance(bn, BatchNorm):
            return bn
        return Match(root=node, nodes=bn.nodes, inputs={"x": bn.x}, extra={"bn": bn})

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        bn: BatchNorm = m.extra["bn"]
        scale, offset = bn.scale, bn.offset
        if bn.form == "fused" and not bn.channel_last:  # NCHW: per-channel along axis 1
            scale, offset = scale.reshape(-1, 1, 1), offset.reshape(-1, 1, 1)
        mul = b.op("Mul", [m.inputs["x"], b.const("scale", np.asarray(scale))], "mul")
        return b.op("AddV2", [mul, b.const("offset", np.asarray(offset))], "out")


RULES = (BatchNormToMulAdd(),)
