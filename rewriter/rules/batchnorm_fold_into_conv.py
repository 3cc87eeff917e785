"""Fold inference batch normalization into the convolution or MatMul that produces its input.

``BN(conv(x, W) + b) = conv(x, W * scale) + (b * scale + offset)`` per output channel, with
``scale = gamma / sqrt(var + eps)`` and ``offset = beta - mean * scale`` (float64, cast once).
For ``DepthwiseConv2dNative`` the output channel ``c * M + m`` scales kernel slice ``[:, :, c, m]``;
for ``MatMul`` the kernel's output axis (1, or 0 with ``transpose_b``). Refused (and left to
``batchnorm_to_mul_add``) when the producer has other consumers or non-constant weights.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.rules._batchnorm import (
    BN_ANCHORS,
    BN_FIXES,
    BatchNorm,
    match_batchnorm,
    per_channel,
)
from rewriter.rules.base import ADD_OPS, Builder, Match, Reject, Rule, const_operand, static_value

CONV_OPS = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})


class BatchNormFoldIntoConv(Rule):
    """BN(conv(x, W) + b) = conv(x, W * scale) + (b * scale + offset), exact."""

    name = "batchnorm_fold_into_conv"
    anchors = BN_ANCHORS
    fixes = BN_FIXES
    emits = frozenset({"BiasAdd"})
    exact = True
    priority = 0

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        bn = match_batchnorm(g, node)
        if not isinstance(bn, BatchNorm) or not bn.channel_last:
            return None
        conv, bias_node, bias = _producer(g, bn.x)
        if conv is None:
            return None
        nodes = [*bn.nodes, conv] + ([bias_node] if bias_node is not None else [])
        return Match(root=node, nodes=nodes, inputs={"x": conv.input[0]},
                     extra={"bn": bn, "conv": conv, "bias": bias})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        conv: NodeDef = m.extra["conv"]
        fmt = conv.attr["data_format"].s.decode() if "data_format" in conv.attr else "NHWC"
        if fmt not in ("NHWC", ""):
            return Reject(f"{conv.op} data_format is {fmt}, not NHWC", conv.name)
        if conv.op == "MatMul" and conv.attr["transpose_a"].b:
            return Reject("MatMul has transpose_a", conv.name)
        w = static_value(g, conv.input[1])
        if w is None:
            return Reject(f"{conv.op} weights {conv.input[1]} are not constant", conv.name)
        m.consts["kernel"] = w[0].astype(np.float64)
        channels = _out_channels(conv, m.consts["kernel"])
        bias = m.extra["bias"]
        bias = np.zeros(channels) if bias is None else np.asarray(bias, np.float64)
        vecs = per_channel(m.extra["bn"], channels)
        if vecs is None or bias.reshape(-1).size not in (1, channels):
            return Reject("batch-norm constants are not per output channel", m.root.name)
        m.consts["scale"], m.consts["offset"] = vecs
        m.consts["bias"] = np.broadcast_to(bias.reshape(-1), (channels,))
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        conv: NodeDef = m.extra["conv"]
        scale, offset = m.consts["scale"], m.consts["offset"]
        kernel = _scale_kernel(conv, m.consts["kernel"], scale)
        new_w = b.const("kernel", kernel)
        new_conv = b.copy_of(conv, [conv.input[0], new_w], conv.op.lower())
        new_b = b.const("bias", m.consts["bias"] * scale + offset)
        return b.op("BiasAdd", [new_conv, new_b], "out", attrs={"data_format": "NHWC"})


def _producer(g: GraphIndex, ref: str
              ) -> tuple[NodeDef | None, NodeDef | None, np.ndarray | None]:
    """(conv, bias-add node, bias value) for ``conv [+ bias]`` producing ``ref``."""
    name, idx, _ = parse_input(ref)
    node = g.nodes.get(name)
    if node is None or idx != 0:
        return None, None, None
    if node.op in CONV_OPS:
        return node, None, None
    if node.op == "BiasAdd" or node.op in ADD_OPS:
        if node.op == "BiasAdd":
            got = static_value(g, node.input[1])
            pair = (node.input[0], got[0]) if got is not None else None
        else:
            pair = _static_operand(g, node)
        if pair is None:
            return None, None, None
        src, idx2, _ = parse_input(pair[0])
        conv = g.nodes.get(src)
        if conv is not None and idx2 == 0 and conv.op in CONV_OPS:
            return conv, node, pair[1]
    return None, None, None


def _static_operand(g: GraphIndex, node: NodeDef) -> tuple[str, np.ndarray] | None:
    got = const_operand(g, node)
    if got is not None:
        return got
    for a, c in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
        val = static_value(g, c)
        if val is not None and static_value(g, a) is None:
            return a, val[0]
    return None


def _out_channels(conv: NodeDef, kernel: np.ndarray) -> int:
    if conv.op == "Conv2D":
        return int(kernel.shape[3])
    if conv.op == "DepthwiseConv2dNative":
        return int(kernel.shape[2] * kernel.shape[3])
    return int(kernel.shape[0 if conv.attr["transpose_b"].b else 1])


def _scale_kernel(conv: NodeDef, kernel: np.ndarray, scale: np.ndarray) -> np.ndarray:
    if conv.op == "Conv2D":
        return kernel * scale.reshape(1, 1, 1, -1)
    if conv.op == "DepthwiseConv2dNative":
        return kernel * scale.reshape(1, 1, kernel.shape[2], kernel.shape[3])
    if conv.attr["transpose_b"].b:
        return kernel * scale.reshape(-1, 1)
    return kernel * scale.reshape(1, -1)


RULES = (BatchNormFoldIntoConv(),)
