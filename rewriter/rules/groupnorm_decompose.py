"""GroupNormalization in rank 4: per-channel spatial means, averaged over each group by a 1x1
convolution, exact.

Keras 3 ``GroupNormalization(groups=G)`` on ``x`` of shape ``[1, H, W, C]`` freezes as a
LayerNorm (the Keras 3 form :mod:`rewriter.rules._layernorm` matches, with its Neg and
SquaredDifference) over axes (1, 2, 4) of ``x`` reshaped to ``[1, H, W, G, C/G]``, then reshaped
back. Rank-5 tensors are what the Edge TPU (3 innermost dimensions) and Vela (MEAN "Batch > 1")
refuse, and the converter leaves the Neg and the Square in float in full int8. Since every
channel of a group has ``H*W`` values, a group's mean is the mean of its channels' spatial means::

    mu  = conv1x1(mean_hw(x), A)        A[c, c'] = 1/(C/G) when c, c' are in one group, else 0
    d   = x - mu                        var = conv1x1(mean_hw(d * d), A)
    y   = d * (rsqrt(var + eps) * gamma) + beta           (gamma, beta per channel)

``mu`` and ``var`` come out per channel (each channel gets its group's value), ``[1, 1, 1, C]``,
so nothing is rank 5 and no Neg, SquaredDifference or Square is left: MEAN (over height and
width), CONV_2D, SUB, MUL, RSQRT, ADD. Exact up to float32 summation order.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._layernorm import LN_FIXES, match_layernorm
from rewriter.rules.base import (
    ADD_OPS,
    Builder,
    Match,
    Reject,
    Rule,
    producer_op,
    tensor_shape,
)

_CONV = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
         "dilations": [1, 1, 1, 1]}


class GroupNormDecompose(Rule):
    """GN(x) = (x - A mean_hw(x)) * rsqrt(A mean_hw(d^2) + eps) * gamma + beta in rank 4, exact."""

    name = "groupnorm_decompose"
    anchors = frozenset({"Reshape"})
    fixes = LN_FIXES  # Keras 3 GroupNormalization always holds the Neg
    emits = frozenset({"Mean", "Conv2D", "Sub", "Mul", "Rsqrt", "AddV2"})
    exact = True
    family = "groupnorm"
    order = 40  # before the LayerNorm rules take the rank-5 LayerNorm inside apart

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        add = producer_op(g, node.input[0], tuple(ADD_OPS))
        ln = match_layernorm(g, add) if add is not None else None
        split = producer_op(g, ln.x, "Reshape") if ln is not None else None
        if split is None:
            return None
        return Match(root=node, nodes=[node, *ln.nodes, split], inputs={"x": split.input[0]},
                     extra={"ln": ln, "split": split})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        ln, root = m.extra["ln"], m.root
        x4, x5 = tensor_shape(g, m.inputs["x"]), tensor_shape(g, ln.x)
        out = tensor_shape(g, root.name)
        if x4 is None or x5 is None or any(d is None for d in (*x4, *x5)):
            return Reject(f"shapes {x4} -> {x5} are not static", root.name)
        if len(x4) != 4 or len(x5) != 5 or list(x5[:3]) != list(x4[:3]) or (
                x5[3] * x5[4] != x4[3]) or list(out or []) != list(x4):
            return Reject(f"not a group split: {list(x4)} -> {list(x5)} -> {out}", root.name)
        if sorted(a % 5 for a in ln.axes) != [1, 2, 4]:
            return Reject(f"normalizes over axes {ln.axes} of the grouped tensor, not (1, 2, 4)",
                          root.name)
        c = int(x4[3])
        for name, v in (("gamma", ln.gamma), ("beta", ln.beta)):
            if v is not None and np.size(v) not in (1, c):
                return Reject(f"{name} has {np.size(v)} values for {c} channels", root.name)
        m.extra.update(channels=c, groups=int(x5[3]))
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        ln, c, groups = m.extra["ln"], m.extra["channels"], m.extra["groups"]
        d = group_centered(b, m.inputs["x"], c, groups)
        var = group_mean(b, b.op("Mul", [d, d], "squared"), c, groups, "variance")
        scale = b.op("Rsqrt", [b.op("AddV2", [var, b.const("epsilon", ln.eps)], "var_eps")],
                     "rsqrt")
        if ln.gamma is not None:
            gamma = np.broadcast_to(np.ravel(ln.gamma), (c,)).reshape(1, 1, 1, c)
            scale = b.op("Mul", [scale, b.const("gamma", gamma)], "scale")
        y = b.op("Mul", [d, scale], "normalized")
        if ln.beta is not None:
            beta = np.broadcast_to(np.ravel(ln.beta), (c,)).reshape(1, 1, 1, c)
            y = b.op("AddV2", [y, b.const("beta", beta)], "shifted")
        return y


def group_mean(b: Builder, ref: str, c: int, groups: int, suffix: str) -> str:
    """Each channel's group mean of ``ref`` [1, H, W, C], shape [1, 1, 1, C]: a spatial MEAN,
    then a 1x1 convolution with the block-diagonal 1/(C/G) kernel."""
    per = c // groups
    a = np.kron(np.eye(groups), np.full((per, per), 1.0 / per)).reshape(1, 1, c, c)
    hw = b.const(f"{suffix}_hw_axes", np.asarray([1, 2]), dtype=np.int32)
    spatial = b.op("Mean", [ref, hw], f"{suffix}_hw", attrs={"keep_dims": True, "Tidx": np.int32})
    return b.op("Conv2D", [spatial, b.const(f"{suffix}_group_average", a)], suffix, attrs=_CONV)


def group_centered(b: Builder, x: str, c: int, groups: int) -> str:
    """``x - group_mean(x)``."""
    return b.op("Sub", [x, group_mean(b, x, c, groups, "mean")], "centered")


RULES = (GroupNormDecompose(),)
