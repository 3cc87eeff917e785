"""conv(x, W, groups=g) = concat_i conv(x_i, W_i) (split/concat), or a depthwise conv, exact.

A grouped ``Conv2D`` (Keras ``Conv2D(groups=g)``: RegNet, ResNeXt) is a ``Conv2D`` whose filter
has ``C_in / g`` input channels: output channels ``[i*O/g, (i+1)*O/g)`` read input channels
``[i*C_in/g, (i+1)*C_in/g)`` only. TensorFlow's CPU kernels cannot run it once frozen ("Fused
conv implementation does not support grouped convolutions"), and neither the Edge TPU, Ethos-U
nor TFLite Micro has a grouped CONV_2D. The same sums, written with ops every one runs:

* one input channel per group (``g == C_in``): ``DepthwiseConv2dNative`` with the filter
  reshaped from ``[kh, kw, 1, C_in*M]`` to ``[kh, kw, C_in, M]`` (output channel ``c*M + m``
  reads input channel ``c`` in both); needs equal strides in h and w (TF's depthwise kernel);
* otherwise ``Split`` the input into ``g`` channel groups, one ``Conv2D`` per group with its
  slice of the filter, ``ConcatV2`` of the results; more than :data:`MAX_CONCAT_INPUTS` groups
  are concatenated in a tree of such concats (TFLite Micro's CONCATENATION takes at most 10
  inputs: ``kMaxInputNum``; RegNetX002 has up to 46 groups).

Both are exact: each output is the same products summed in the same order. The front ends
apply this rule while loading (the original graph cannot run in TF otherwise), so it is not in
the planner's catalogue.
"""

from __future__ import annotations

import numpy as np

from rewriter.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, static_value, tensor_shape

#: The most inputs one emitted concat has (TFLite Micro's CONCATENATION limit, kMaxInputNum).
MAX_CONCAT_INPUTS = 10


class GroupedConvSplit(Rule):
    """Grouped Conv2D -> depthwise conv (one channel per group) or split/conv/concat, exact."""

    name = "grouped_conv_split"
    anchors = frozenset({"Conv2D"})
    fixes = frozenset({"Conv2D"})  # grouped ones; applied at load time, not planned
    emits = frozenset({"DepthwiseConv2dNative", "Split", "Conv2D", "ConcatV2"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        data = [r for r in node.input if not r.startswith("^")]
        if len(data) != 2:
            return None
        w = static_value(g, data[1])
        shape = tensor_shape(g, data[0])
        fmt = node.attr["data_format"].s.decode() if "data_format" in node.attr else "NHWC"
        axis = 1 if fmt == "NCHW" else -1
        if w is None or w[0].ndim != 4 or not shape or len(shape) != 4 or shape[axis] is None:
            return None
        cin, per_group, cout = int(shape[axis]), int(w[0].shape[2]), int(w[0].shape[3])
        if per_group == cin:
            return None  # an ordinary convolution
        if per_group == 0 or cin % per_group or cout % (cin // per_group):
            return Reject(f"filter has {per_group} input channels per group for {cin} input "
                          f"channels and {cout} outputs: not a grouped convolution", node.name)
        return Match(root=node, nodes=[node], inputs={"x": data[0]},
                     consts={"w": w[0]}, extra={"groups": cin // per_group, "cin": cin})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        fmt = m.root.attr["data_format"].s.decode() if "data_format" in m.root.attr else "NHWC"
        if fmt != "NHWC":
            return Reject(f"data_format {fmt} (only NHWC is split)", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        conv, w = m.root, m.consts["w"]
        groups, cin = m.extra["groups"], m.extra["cin"]
        strides = list(conv.attr["strides"].list.i)
        if groups == cin and strides[1] == strides[2]:
            return self._depthwise(conv, w, cin, m.inputs["x"], b)
        parts = b.op("Split", [b.const("axis", 3, dtype=np.int32), m.inputs["x"]], "split",
                     attrs={"num_split": groups})
        step = w.shape[3] // groups
        outs = []
        for i in range(groups):
            kernel = b.const(f"filter_{i}", w[:, :, :, i * step:(i + 1) * step])
            x_i = parts if i == 0 else f"{parts}:{i}"
            outs.append(b.copy_of(conv, [x_i, kernel], f"conv_{i}"))
        return _concat_tree(outs, b.const("concat_axis", 3, dtype=np.int32), b)

    @staticmethod
    def _depthwise(conv: NodeDef, w: np.ndarray, cin: int, x: str, b: Builder) -> str:
        kernel = b.const("depthwise_filter",
                         w.reshape(w.shape[0], w.shape[1], cin, w.shape[3] // cin))
        node = NodeDef()
        node.CopyFrom(conv)
        node.op = "DepthwiseConv2dNative"
        for attr in ("use_cudnn_on_gpu", "explicit_paddings"):  # Conv2D-only attributes
            if attr in node.attr and not (attr == "explicit_paddings"
                                          and node.attr["padding"].s == b"EXPLICIT"):
                del node.attr[attr]
        return b.copy_of(node, [x, kernel], "depthwise")


def _concat_tree(parts: list[str], axis: str, b: Builder, level: int = 0) -> str:
    """Concat of ``parts`` along ``axis`` with at most MAX_CONCAT_INPUTS inputs per node (a
    concat of concats of consecutive runs is the same tensor)."""
    if len(parts) > MAX_CONCAT_INPUTS:
        runs = [parts[i:i + MAX_CONCAT_INPUTS] for i in range(0, len(parts), MAX_CONCAT_INPUTS)]
        parts = [_concat_tree(run, axis, b, level + 1) if len(run) > 1 else run[0]
                 for run in runs]
        return _concat_tree(parts, axis, b, level)
    suffix = "concat" if level == 0 else f"concat_{level}"
    return b.op("ConcatV2", [*parts, axis], suffix, attrs={"N": len(parts), "Tidx": np.int32})


#: Not in the planner's catalogue: the front ends apply it while loading (a grouped Conv2D cannot
#: even run in TF), so no target plan ever needs it and ``check`` never offers it for other convs.
RULES = ()
