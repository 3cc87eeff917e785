"""Recognising layer normalization as Keras freezes it (shared by the LayerNorm rules).

Keras 3 ``LayerNormalization`` (TF backend) becomes, with ``s = rsqrt(var + eps) [* gamma]``::

    mean = Mean(x, axes, keep_dims)          var = Mean(SquaredDifference(x, StopGradient(mean)))
    y    = x * s + (Neg(mean) * s [+ beta])

and tf_keras (when it does not use its fused path, e.g. epsilon < 1.001e-5 as in ConvNeXt) ends
in ``y = x * s + (beta - mean * s)`` (``tf.nn.batch_normalization`` over ``tf.nn.moments``).
Matched from the final Add, every binary op in either input order, gamma/beta/eps constant.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import (
    ADD_OPS,
    Builder,
    Match,
    Rule,
    commuted,
    dtype_of,
    producer_op,
    static_value,
)

LN_ANCHORS = ADD_OPS
#: What every LayerNorm rewrite removes: the Neg (left float in int8) and SquaredDifference.
LN_FIXES = frozenset({"Neg", "SquaredDifference", "StopGradient"})


@dataclass
class LayerNorm:
    """``y = (x - mean(x)) * rsqrt(var(x) + eps) * gamma + beta`` over ``axes``."""

    x: str
    axes: list[int]
    eps: float
    gamma: np.ndarray | None
    beta: np.ndarray | None
    nodes: list[NodeDef]


def match_layernorm(g: GraphIndex, root: NodeDef) -> LayerNorm | None:
    """The Keras 3 LayerNorm subgraph ending at ``root`` (an Add), or None."""
    if root.op not in ADD_OPS or dtype_of(root) != np.dtype(np.float32):
        return None
    for a, c in commuted(root):
        got = _scaled_x(g, a)
        if got is None:
            continue
        x, mul_x, scale_node, rsqrt, gamma = got
        shift = _shift(g, c, scale_node)
        if shift is None:
            continue
        mean_ref, shift_nodes, beta = shift
        mean = producer_op(g, mean_ref, "Mean")
        stats = _stats(g, x, mean, rsqrt) if mean is not None else None
        if stats is None:
            continue
        axes, eps, stat_nodes = stats
        nodes = [root, mul_x, scale_node, rsqrt, *shift_nodes, mean, *stat_nodes]
        return LayerNorm(x, axes, eps, gamma, beta, list({n.name: n for n in nodes}.values()))
    return None


def _scaled_x(g: GraphIndex, ref: str):
    """``x * s`` where s is Rsqrt(...) or Rsqrt(...) * gamma: (x, mul, s node, rsqrt, gamma)."""
    mul = producer_op(g, ref, "Mul")
    if mul is None:
        return None
    for x, s in commuted(mul):
        node = producer_op(g, s, ("Rsqrt", "Mul"))
        if node is None:
            continue
        if node.op == "Rsqrt":
            return x, mul, node, node, None
        for r, gm in commuted(node):
            rsqrt = producer_op(g, r, "Rsqrt")
            gamma = static_value(g, gm)
            if rsqrt is not None and gamma is not None:
                return x, mul, node, rsqrt, gamma[0]
    return None


def _shift(g: GraphIndex, ref: str, scale_node: NodeDef):
    """The shift term: ``Neg(mean) * s [+ beta]`` (Keras 3) or ``beta - mean * s``
    (``tf.nn.batch_normalization``, tf_keras). Returns (mean tensor, nodes, beta or None)."""
    def mean_times_s(mref: str, negated: bool):
        mul = producer_op(g, mref, "Mul")
        if mul is None:
            return None
        for n, s in commuted(mul):
            if producer_op(g, s, scale_node.op) is not scale_node:
                continue
            if not negated:
                return n, [mul]
            neg = producer_op(g, n, "Neg")
            if neg is not None:
                return neg.input[0], [mul, neg]
        return None

    sub = producer_op(g, ref, "Sub")
    if sub is not None:
        beta = static_value(g, sub.input[0])
        got = mean_times_s(sub.input[1], False) if beta is not None else None
        return None if got is None else (got[0], [sub, *got[1]], beta[0])
    got = mean_times_s(ref, True)
    if got is not None:
        return got[0], got[1], None
    add = producer_op(g, ref, tuple(ADD_OPS))
    for m, b in commuted(add) if add is not None else ():
        beta = static_value(g, b)
        got = mean_times_s(m, True) if beta is not None else None
        if got is not None:
            return got[0], [add, *got[1]], beta[0]
    return None


def _stats(g: GraphIndex, x: str, mean: NodeDef, rsqrt: NodeDef):
    """Check Rsqrt(Mean(SquaredDifference(x, [StopGradient] mean)) + eps); (axes, eps, nodes)."""
    if mean.input[0] != x or not mean.attr["keep_dims"].b:
        return None
    axes = static_value(g, mean.input[1])
    add = producer_op(g, rsqrt.input[0], tuple(ADD_OPS))
    if axes is None or add is None:
        return None
    for v, e in commuted(add):
        var = producer_op(g, v, "Mean")
        eps = static_value(g, e)
        if var is None or eps is None or eps[0].size != 1:
            continue
        vaxes = static_value(g, var.input[1])
        sqd = producer_op(g, var.input[0], "SquaredDifference")
        if vaxes is None or sqd is None or sorted(np.ravel(vaxes[0])) != sorted(np.ravel(axes[0])):
            continue
        for xx, mm in commuted(sqd):
            sg = producer_op(g, mm, ("StopGradient", "Identity"))
            src = sg.input[0] if sg is not None else mm
            if xx == x and producer_op(g, src, "Mean") is mean:
                extra = [add, var, sqd] + ([sg] if sg is not None else [])
                return [int(a) for a in np.ravel(axes[0])], float(np.ravel(eps[0])[0]), extra
    return None


def build_layernorm(b, ln: LayerNorm, mean_of) -> str:
    """Emit ``d = x - mean(x); (d * rsqrt(mean(d*d) + eps)) [* gamma] [+ beta]``.

    ``mean_of(b, ref, suffix) -> ref`` builds a keep-dims mean over the normalized axes. No Neg
    and no SquaredDifference: the TFLite converter leaves Neg in float in full int8.
    """
    d = b.op("Sub", [ln.x, mean_of(b, ln.x, "mean")], "centered")
    var = mean_of(b, b.op("Mul", [d, d], "squared"), "variance")
    r = b.op("Rsqrt", [b.op("AddV2", [var, b.const("epsilon", ln.eps)], "var_eps")], "rsqrt")
    y = b.op("Mul", [d, r], "normalized")
    if ln.gamma is not None:
        y = b.op("Mul", [y, b.const("gamma", ln.gamma)], "scaled")
    if ln.beta is not None:
        y = b.op("AddV2", [y, b.const("beta", ln.beta)], "shifted")
    return y


def reduce_mean_layernorm(b: Builder, ln: LayerNorm) -> str:
    """The LayerNorm of ``ln`` rebuilt with Mean over its own axes (mean, variance, rsqrt)."""
    axes = np.asarray(ln.axes, np.int32)

    def mean_of(bb: Builder, ref: str, suffix: str) -> str:
        ax = bb.const(f"{suffix}_axes", axes, dtype=np.int32)
        return bb.op("Mean", [ref, ax], suffix, attrs={"keep_dims": True, "Tidx": np.int32})

    return build_layernorm(b, ln, mean_of)


class LayerNormRule(Rule):
    """The shared match of the rules replacing a LayerNorm subgraph (Keras 3 / tf_keras)."""

    anchors = LN_ANCHORS
    fixes = LN_FIXES
    family = "layernorm"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ln = match_layernorm(g, node)
        if ln is None:
            return None
        return Match(root=node, nodes=ln.nodes, inputs={"x": ln.x}, extra={"ln": ln})
