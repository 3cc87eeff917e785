"""tf_keras LayerNormalization: a training-mode FusedBatchNorm on a reshaped input, decomposed.

tf_keras normalizes the last axes by reshaping x to [1, R, D, 1] and running
``FusedBatchNormV3(is_training=True, data_format=NCHW)`` with scale = ones, offset = zeros: batch
statistics per "channel" r over D are exactly the per-row mean and (biased) variance. Rewritten
as ``(x - mean) * rsqrt(mean((x - mean)^2) + eps) * scale + offset`` over the non-channel axes
(Mean/Sub/Mul/Rsqrt/Add; the scale/offset multiply is dropped when they are ones/zeros). The
surrounding Reshapes and the layer's gamma/beta Mul/Add stay. Exact.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._batchnorm import FUSED_OPS
from rewriter.rules._layernorm import LayerNorm, reduce_mean_layernorm
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, static_value, tensor_shape


class LayerNormFromFusedBatchNorm(Rule):
    """FusedBatchNorm(is_training=True) = (x - mean) * rsqrt(var + eps) * scale + offset, exact."""

    name = "layernorm_from_fused_bn"
    anchors = FUSED_OPS
    fixes = FUSED_OPS
    emits = frozenset({"Mean", "Sub", "Mul", "Rsqrt", "AddV2"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        if not node.attr["is_training"].b:
            return None  # inference BN: the batchnorm rules' business
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        shape = tensor_shape(g, node.input[0])
        if shape is None or len(shape) != 4:
            return Reject(f"input shape {shape} is not a known rank-4 shape", node.name)
        vals = [static_value(g, ref) for ref in node.input[1:3]]
        if any(v is None for v in vals):
            return Reject("scale or offset is not constant", node.name)
        nchw = node.attr["data_format"].s.decode().startswith("NC")
        bshape = (-1, 1, 1) if nchw else (-1,)
        scale, offset = (v[0].astype(np.float64).reshape(bshape) for v in vals)
        eps = float(node.attr["epsilon"].f) if "epsilon" in node.attr else 1e-4
        m.extra["ln"] = LayerNorm(node.input[0], [0, 2, 3] if nchw else [0, 1, 2], eps,
                                  None if np.all(scale == 1) else scale,
                                  None if np.all(offset == 0) else offset, [node])
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return reduce_mean_layernorm(b, m.extra["ln"])


RULES = (LayerNormFromFusedBatchNorm(),)
