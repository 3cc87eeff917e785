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

:func:`regroup` is the inverse, for the exported file only: where the target runs a grouped
``CONV_2D`` itself (its op table says ``grouped_conv = true``: Vela splits one into per-group
convolutions in its own graph optimiser, LiteRT's kernels take it), the split/conv/concat left
in the graph is put back into one grouped ``Conv2D`` before conversion, so the converter folds
what follows the convolution (a BatchNormalization's multiply and add, a bias) into it as it
does for the plain converter's file. Measured with Vela 5.2 on ethos-u55-128
(tests/families ``tf_keras_grouped_conv``): the split form left 2 MUL + 2 ADD after the concats
and took 0.0927 ms against the plain converter's 0.0845 ms. The TF graph, the SavedModel and
the verification in TF keep the split form (TF's CPU kernels cannot run the grouped one).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphDef, GraphIndex, NodeDef, make_const, parse_input
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


def regroup(graph_def: GraphDef, keep: list[str]) -> tuple[GraphDef, int]:
    """``graph_def`` with every split/conv/concat of :class:`GroupedConvSplit` put back into one
    grouped ``Conv2D`` (exact: the same filter, the same sums); and how many were.

    A region is regrouped only when it is exactly that shape: a ``Split`` on axis 3 whose
    outputs each feed one ``Conv2D`` (same attributes, constant filters of one shape, NHWC),
    concatenated on axis 3 in split order (a tree of ``ConcatV2``), nothing else reading the
    split, the convolutions or the inner concats, none of them a signature tensor (``keep``).
    The grouped conv takes the root concat's name (the rule gives the root concat the grouped
    conv's own name), so its readers and a signature output are unchanged.
    """
    g = GraphIndex(graph_def)
    protected = {parse_input(k)[0] for k in keep}
    count = 0
    for node in [n for n in g if n.op == "ConcatV2"]:
        if node.name not in g.nodes:
            continue
        found = _grouped_region(g, node, protected)
        if found is None:
            continue
        split, convs = found
        count += 1
        filters = [g.const_value(c.input[1]) for c in convs]
        first = convs[0]
        for n in {c.name for c in convs} | _inner_concats(g, node) | {split.name}:
            g.remove(n)
        kernel = make_const(g.unique_name(f"{node.name}/grouped_filter"),
                            np.concatenate(filters, axis=3))
        g.add(kernel)
        conv = NodeDef()
        conv.CopyFrom(first)
        conv.name = node.name
        del conv.input[:]
        conv.input.extend([split.input[1], kernel.name])
        g.remove(node.name)
        g.add(conv)
    return (g.to_graph_def() if count else graph_def), count


def _leaves(g: GraphIndex, concat: NodeDef) -> list[str] | None:
    """The data inputs of a concat tree on axis 3, inner concats flattened, in order."""
    refs = [r for r in concat.input if not r.startswith("^")]
    if len(refs) != len(concat.input) or len(refs) < 2:
        return None
    axis = g.const_value(refs[-1])
    if axis is None or int(axis) not in (3, -1):
        return None
    out: list[str] = []
    for ref in refs[:-1]:
        src = g.producer(ref)
        if src is not None and src.op == "ConcatV2" and len(g.consumers(src.name)) == 1:
            inner = _leaves(g, src)
            if inner is not None:
                out.extend(inner)
                continue
        out.append(ref)
    return out


def _inner_concats(g: GraphIndex, concat: NodeDef) -> set[str]:
    names: set[str] = set()
    for ref in concat.input[:-1]:
        src = g.producer(ref)
        if src is not None and src.op == "ConcatV2" and len(g.consumers(src.name)) == 1:
            names |= {src.name} | _inner_concats(g, src)
    return names


def _grouped_region(g: GraphIndex, concat: NodeDef,
                    protected: set[str]) -> tuple[NodeDef, list[NodeDef]] | None:
    """(the Split, the per-group Conv2Ds in order) when ``concat`` closes a split grouped conv."""
    leaves = _leaves(g, concat)
    if leaves is None:
        return None
    convs = [g.producer(r) for r in leaves]
    if any(c is None or c.op != "Conv2D" or parse_input(r)[1] != 0 or len(c.input) != 2
           for c, r in zip(convs, leaves, strict=True)):
        return None
    split = g.producer(convs[0].input[0])
    if split is None or split.op != "Split" or split.attr["num_split"].i != len(convs):
        return None
    axis = g.const_value(split.input[0])
    if axis is None or int(axis) not in (3, -1):
        return None
    filters = [g.const_value(c.input[1]) for c in convs]
    if any(f is None or f.ndim != 4 or f.shape != filters[0].shape for f in filters):
        return None
    attrs = {k: v for k, v in convs[0].attr.items()}
    for i, c in enumerate(convs):
        name, idx, _ = parse_input(c.input[0])
        if name != split.name or idx != i or dict(c.attr.items()) != attrs:
            return None
        if len(g.consumers(c.name)) != 1:
            return None
    fmt = attrs["data_format"].s.decode() if "data_format" in attrs else "NHWC"
    region = {split.name, *(c.name for c in convs), *_inner_concats(g, concat)}
    if fmt != "NHWC" or region & protected:
        return None
    if {c.name for c in g.consumers(split.name)} != {c.name for c in convs}:
        return None
    return split, convs


#: Not in the planner's catalogue: the front ends apply it while loading (a grouped Conv2D cannot
#: even run in TF), so no target plan ever needs it and ``check`` never offers it for other convs.
RULES = ()
