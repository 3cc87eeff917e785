"""LayerNorm as Mean/Sub/Mul/Rsqrt/Add, without the Neg and SquaredDifference Keras 3 emits.

``y = (x - mean(x)) * rsqrt(mean((x - mean(x))^2) + eps) * gamma + beta`` over the same axes.
Same function as Keras 3's ``x * s + (-mean * s + beta)`` (``s = rsqrt(var + eps) * gamma``), and
centring first avoids its cancellation when |mean| >> std. Exists for full-int8 conversion: the
converter leaves the Neg in float (DEQUANTIZE -> NEG -> QUANTIZE); every op here quantizes.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex
from rewriter.rules._layernorm import (
    LayerNormRule,
    reduce_mean_layernorm,
)
from rewriter.rules.base import Builder, Match


class LayerNormDecompose(LayerNormRule):
    """LN(x) = (x - mean) * rsqrt(mean((x - mean)^2) + eps) * gamma + beta, exact, no Neg."""

    name = "layernorm_decompose"
    emits = frozenset({"Mean", "Sub", "Mul", "Rsqrt", "AddV2"})
    exact = True

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return reduce_mean_layernorm(b, m.extra["ln"])


RULES = (LayerNormDecompose(),)
