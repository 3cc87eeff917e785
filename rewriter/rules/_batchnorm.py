"""Recognising inference batch normalization in the forms TF emits (shared by the BN rules).

* fused: ``FusedBatchNorm`` / ``V2`` / ``V3`` (tf_keras, TF1) with ``is_training = false``;
* unfused: ``tf.nn.batch_normalization`` as Keras 3 freezes it,
  ``x * S + C`` where ``S = rsqrt(var + eps) [* gamma]`` and ``C = beta - mean * S`` (or
  ``-mean * S``) are subgraphs of constants. Matched as ``Add(Mul(x, S), C)`` in any input order,
  with S required to contain an ``Rsqrt`` (what makes it a normalization rather than any affine).

Either way the result is ``y = x * scale + offset`` with float64 ``scale``/``offset``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import ADD_OPS, Reject, commuted, dtype_of, producer_op, static_value

FUSED_OPS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})
#: Op types whose removal a BN rule can promise (the unfused form loses its Rsqrt and Sub).
BN_FIXES = FUSED_OPS | {"Rsqrt", "Sub"}
BN_ANCHORS = FUSED_OPS | ADD_OPS


@dataclass
class BatchNorm:
    """``y = x * scale + offset``; ``channel_axis`` is where per-channel vectors apply."""

    x: str
    scale: np.ndarray
    offset: np.ndarray
    nodes: list[NodeDef]
    form: str  # "fused" | "unfused"
    channel_last: bool = True


def match_batchnorm(g: GraphIndex, node: NodeDef) -> BatchNorm | Reject | None:
    """A BN rooted at ``node``, a Reject saying why it cannot be folded, or None."""
    if node.op in FUSED_OPS:
        return _fused(g, node)
    if node.op in ADD_OPS:
        return _unfused(g, node)
    return None


def _fused(g: GraphIndex, node: NodeDef) -> BatchNorm | Reject:
    if node.attr["is_training"].b:
        return Reject("is_training is true (batch statistics), not an inference BN", node.name)
    if dtype_of(node) != np.dtype(np.float32):
        return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
    vals = []
    for role, ref in zip(("scale", "offset", "mean", "variance"), node.input[1:5], strict=True):
        got = static_value(g, ref)
        if got is None:
            return Reject(f"{role} input {ref} is not a constant", node.name)
        vals.append(got[0].astype(np.float64))
    gamma, beta, mean, var = vals
    if mean.size == 0 or var.size == 0:
        return Reject("mean/variance are empty (training-mode BN)", node.name)
    eps = float(node.attr["epsilon"].f) if "epsilon" in node.attr else 1e-4  # op default
    scale = gamma / np.sqrt(var + eps)
    fmt = node.attr["data_format"].s.decode() if "data_format" in node.attr else "NHWC"
    return BatchNorm(node.input[0], scale, beta - mean * scale, [node], "fused",
                     channel_last=not fmt.startswith("NC"))


def _unfused(g: GraphIndex, node: NodeDef) -> BatchNorm | None:
    if dtype_of(node) != np.dtype(np.float32):
        return None
    for a, c in commuted(node):
        mul = producer_op(g, a, "Mul")
        cval = static_value(g, c) if mul is not None else None
        if cval is None:
            continue
        for x, s in commuted(mul):
            sval = static_value(g, s)
            if sval is None or static_value(g, x) is not None:
                continue
            if not any(g[n].op == "Rsqrt" for n in sval[1]):
                return None
            names = dict.fromkeys([node.name, mul.name, *sval[1], *cval[1]])
            return BatchNorm(x, sval[0], cval[0], [g[n] for n in names], "unfused")
    return None


def per_channel(bn: BatchNorm, channels: int) -> tuple[np.ndarray, np.ndarray] | None:
    """scale and offset as vectors of length ``channels`` along the last axis, or None when they
    vary along another axis."""
    out = []
    for v in (bn.scale, bn.offset):
        v = np.asarray(v, np.float64)
        if v.ndim > 1 and any(d != 1 for d in v.shape[:-1]):
            return None
        flat = v.reshape(-1)
        if flat.size == 1:
            flat = np.full(channels, flat[0])
        if flat.size != channels:
            return None
        out.append(flat)
    return out[0], out[1]
