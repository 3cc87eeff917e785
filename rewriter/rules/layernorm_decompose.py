"""LayerNorm as Mean/Sub/Mul/Rsqrt/Add, without the Neg and SquaredDifference Keras 3 emits.

``y = (x - mean(x)) * rsqrt(mean((x - mean(x))^2) + eps) * gamma + beta`` over the same axes.
Same function as Keras 3's ``x * s + (-mean * s + beta)`` (``s = rsqrt(var + eps) * gamma``), and
centring first avoids its cancellation when |mean| >> std. Exists for full-int8 conversion: the
converter leaves the Neg in float (DEQUANTIZE -> NEG -> QUANTIZE); every op here quantizes.
"""

from __future__ import annotations

import numpy as np

from rewriter.graph import GraphIndex, NodeDef
from rewriter.rules._layernorm import LN_ANCHORS, LN_FIXES, build_layernorm, match_layernorm
from rewriter.rules.base import Builder, Match, Rule


class LayerNormDecompose(Rule):
    """LN(x) = (x - mean) * rsqrt(mean((x - mean)^2) + eps) * gamma + beta, exact, no Neg."""

    name = "layernorm_decompose"
    anchors = LN_ANCHORS
    fixes = LN_FIXES
    family = "layernorm"
    emits = frozenset({"Mean", "Sub", "Mul", "Rsqrt", "AddV2"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ln = match_layernorm(g, node)
        if ln is None:
            return None
        return Match(root=node, nodes=ln.nodes, inputs={"x": ln.x}, extra={"ln": ln})

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        axes = np.asarray(m.extra["ln"].axes, np.int32)

        def mean_of(bb: Builder, ref: str, suffix: str) -> str:
            ax = bb.const(f"{suffix}_axes", axes, dtype=np.int32)
            return bb.op("Mean", [ref, ax], suffix, attrs={"keep_dims": True, "Tidx": np.int32})

        return build_layernorm(b, m.extra["ln"], mean_of)


RULES = (LayerNormDecompose(),)
