"""tf_keras LayerNorm's training-mode FusedBatchNorm through an L2 normalization, exact.

tf_keras' ``LayerNormalization`` on its fused path (epsilon >= 1.001e-5, its default 1e-3)
reshapes x to [1, R, D, 1] and runs ``FusedBatchNormV3(is_training=True, data_format=NCHW)``:
per-"channel" r batch statistics over D are each row's mean and variance, a LayerNorm of every
row. The converter lowers it with RSQRT and SQUARED_DIFFERENCE, which the Edge TPU lacks
(layernorm_from_fused_bn rewrites it with RSQRT, for targets that have it). Here x is seen as
[1, R, H*W] (1s removed), layernorm_l2norm's form runs over its last axis (PAD, ADD,
L2_NORMALIZATION, SLICE: within every documented Edge TPU limit), the per-row scale and
offset are applied after, and the result is reshaped back to [1, R, H, W].
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules.base import Builder, Match, Reject, tensor_shape
from rewriter.rules.layernorm_from_fused_bn import LayerNormFromFusedBatchNorm
from rewriter.rules.layernorm_l2norm import L2_EPS, LayerNormL2Norm, l2norm_layernorm


class LayerNormL2NormFromFusedBatchNorm(LayerNormFromFusedBatchNorm):
    """FusedBatchNorm(is_training, NCHW [1, R, H, W]) = layernorm_l2norm's form over
    [1, R, H*W] with the per-row scale and offset, exact."""

    name = "layernorm_l2norm_fused_bn"
    emits = LayerNormL2Norm.emits
    fused = LayerNormL2Norm.fused
    family = "layernorm_from_fused_bn"  # the alternative to that rule where RSQRT is missing
    priority = 2

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        """layernorm_from_fused_bn's checks (pattern too), then NCHW, batch 1, static shape."""
        reject = super().check(g, m)
        if reject is not None:
            return reject
        node, ln = m.root, m.extra["ln"]
        if not node.attr["data_format"].s.decode().startswith("NC"):
            return Reject("NHWC batch statistics normalize across rows, not along the last "
                          "axis", node.name)
        shape = tensor_shape(g, node.input[0])
        if any(d is None for d in shape) or shape[0] != 1:
            return Reject(f"input shape {shape} is not a static [1, C, H, W]", node.name)
        rows, n = int(shape[1]), int(shape[2] * shape[3])
        if n * ln.eps < L2_EPS:
            return Reject(f"H * W * epsilon = {n * ln.eps:g} is below {L2_EPS:g}", node.name)
        m.extra.update(shape=[int(d) for d in shape], eps=ln.eps,
                       gamma=None if ln.gamma is None else ln.gamma.reshape(rows, 1),
                       beta=None if ln.beta is None else ln.beta.reshape(rows, 1))
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        shape = m.extra["shape"]
        flat = [1, shape[1], shape[2] * shape[3]]
        x = b.op("Reshape", [m.inputs["x"], b.const("rows", flat, dtype=np.int32)], "as_rows",
                 attrs={"Tshape": np.int32})
        y = l2norm_layernorm(b, x, flat, m.extra["eps"], m.extra["gamma"], m.extra["beta"])
        return b.op("Reshape", [y, b.const("back", shape, dtype=np.int32)], "as_nchw",
                    attrs={"Tshape": np.int32})


RULES = (LayerNormL2NormFromFusedBatchNorm(),)
