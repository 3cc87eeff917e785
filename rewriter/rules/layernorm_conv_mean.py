"""LayerNorm over channels with the channel means as 1x1 convolutions (weights 1/C).

``mean_c(x) = conv2d(x, W)`` with ``W[0, 0, c, 0] = 1/C``: the same sum, done by the conv engine.
For targets that cannot reduce the depth axis: Vela's Ethos-U55 sends a MEAN over channels of a
[1, H, W, C] tensor to the CPU ("Unsupported depth-reduction") when H, W and C all exceed 1.
Rank-4 NHWC inputs normalized over the last axis only; the variance uses the same convolution
on ``(x - mean)^2``. Exact up to float32 summation order.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules._layernorm import (
    LN_FIXES,
    LayerNormRule,
    build_layernorm,
)
from rewriter.rules.base import Builder, Match, Reject, tensor_shape


class LayerNormConvMean(LayerNormRule):
    """LN over channels with mean_c(x) = conv1x1(x, 1/C), exact; no Mean over depth."""

    name = "layernorm_conv_mean"
    fixes = LN_FIXES | {"Mean"}
    emits = frozenset({"Conv2D", "Sub", "Mul", "Rsqrt", "AddV2"})
    exact = True
    priority = 1  # prefer layernorm_decompose where the target can reduce depth
    order = 50  # but run first when both are planned, so it sees the LN subgraphs

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shape = tensor_shape(g, m.inputs["x"])
        if shape is None or len(shape) != 4:
            return Reject(f"input shape {shape} is not rank 4 (NHWC)", m.root.name)
        if m.extra["ln"].axes not in ([3], [-1]):
            return Reject(f"normalizes over axes {m.extra['ln'].axes}, not channels",
                          m.root.name)
        if shape[3] is None:
            return Reject("channel count is not static", m.root.name)
        m.extra["channels"] = int(shape[3])
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        c = m.extra["channels"]
        weights = np.full((1, 1, c, 1), 1.0 / c)

        def mean_of(bb: Builder, ref: str, suffix: str) -> str:
            w = bb.const(f"{suffix}_weights", weights)
            return bb.op("Conv2D", [ref, w], suffix,
                         attrs={"strides": [1, 1, 1, 1], "padding": "VALID",
                                "data_format": "NHWC", "dilations": [1, 1, 1, 1]})

        return build_layernorm(b, m.extra["ln"], mean_of)


RULES = (LayerNormConvMean(),)
