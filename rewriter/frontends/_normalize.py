"""Graph normalisation after freezing: drop custom-gradient markers, inline function calls, make
grouped convs depthwise.

Keras 3 wraps grouped convolutions (e.g. ConvNeXt's depthwise 7x7, ``Conv2D(groups=C)``) in
jit-compiled functions, which ``convert_variables_to_constants_v2`` cannot inline
(``_XlaMustCompile``): the frozen graph keeps ``StatefulPartitionedCall`` nodes that tf2onnx
cannot export and that hide their ops from the op tables. Here each call of a function without
nested calls is inlined (nodes renamed ``<call>/<node>``), and a ``Conv2D`` whose filter has one
input channel per group, i.e. a depthwise convolution that TF's CPU kernels cannot run as a
grouped Conv2D, becomes ``DepthwiseConv2dNative`` with the filter reshaped from
``[kh, kw, 1, C*M]`` to ``[kh, kw, C, M]`` (output channel ``c*M + m`` reads input channel ``c``
in both). Both are exact: the same arithmetic, expressed with other nodes.
"""

from __future__ import annotations

from typing import Any

from rewriter.graph import GraphDef, GraphIndex, make_const, parse_input

CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def normalize(graph_def: GraphDef, keep: list[str]) -> tuple[GraphDef, list[str]]:
    """The normalised graph and notes saying what changed (empty when nothing did).

    ``keep`` are the signature's tensors: when anything changed, nodes none of them depends on
    (e.g. a replaced filter and its reads) are pruned.
    """
    notes: list[str] = []
    markers = _strip_custom_gradients(graph_def)
    if markers:
        notes.append(f"removed {markers} tf.custom_gradient marker(s) (e.g. Keras 3 swish): an "
                     "inference graph has no use for them, and they stop SavedModel export and "
                     "int8 calibration")
    inlined = _inline_calls(graph_def)
    if inlined:
        notes.append(f"inlined {inlined} function call(s) (e.g. Keras 3 jit-compiled convs)")
    converted = _grouped_to_depthwise(graph_def)
    if converted:
        notes.append(f"{converted} grouped Conv2D with one input channel per group expressed "
                     "as DepthwiseConv2dNative (exact)")
    if notes:
        g = GraphIndex(graph_def)
        g.prune(keep)
        graph_def = g.to_graph_def()
    return graph_def, notes


def _strip_custom_gradients(graph_def: GraphDef) -> int:
    """Drop ``_gradient_op_type`` from nodes (tf.custom_gradient's IdentityN wrappers).

    The forward computation is unchanged, and so is the gradient: without the marker, IdentityN
    passes gradients straight to the ops that compute its first output (the custom gradient
    Keras registers only saves memory). Returns how many nodes carried one.
    """
    count = 0
    for node in graph_def.node:
        if "_gradient_op_type" in node.attr:
            del node.attr["_gradient_op_type"]
            count += 1
    return count


def _inline_calls(graph_def: GraphDef) -> int:
    """Inline calls of library functions that make no calls themselves; returns how many."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    library = {f.signature.name: f for f in graph_def.library.function}
    count = 0
    for _ in range(8):  # nested calls become inlinable once their callee is inlined
        calls = [n for n in graph_def.node if n.op in CALL_OPS
                 and n.attr["f"].func.name in library
                 and not any(b.op in CALL_OPS for b in library[n.attr["f"].func.name].node_def)]
        if not calls:
            break
        for call in calls:
            _inline_one(graph_def, call, library[call.attr["f"].func.name],
                        function_def_to_graph_def)
            count += 1
    used = {n.attr["f"].func.name for n in graph_def.node if n.op in CALL_OPS}
    keep = [f for f in graph_def.library.function if f.signature.name in used]
    del graph_def.library.function[:]
    graph_def.library.function.extend(keep)
    return count


def _inline_one(graph_def: GraphDef, call: Any, fdef: Any, to_graph_def: Any) -> None:
    body, flat_names = to_graph_def(fdef)
    prefix = call.name
    args = [a.name for a in fdef.signature.input_arg]
    data_inputs = [r for r in call.input if not r.startswith("^")]
    arg_map = dict(zip(args, data_inputs))

    def remap(ref: str) -> str:
        name, idx, ctrl = parse_input(ref)
        if name in arg_map:
            return ("^" + parse_input(arg_map[name])[0]) if ctrl else arg_map[name]
        new = f"{prefix}/{name}"
        return ("^" + new) if ctrl else (new if idx == 0 else f"{new}:{idx}")

    new_nodes = []
    for node in body.node:
        if node.name in arg_map:  # the argument placeholders are the call's inputs
            continue
        n = type(node)()
        n.CopyFrom(node)
        n.name = f"{prefix}/{node.name}"
        del n.input[:]
        n.input.extend(remap(r) for r in node.input)
        new_nodes.append(n)
    outputs = []
    for out in fdef.signature.output_arg:
        ret = fdef.ret[out.name]
        outputs.append(remap(flat_names.get(ret, ret)))
    # consumers of call:i read the inlined output i
    for node in graph_def.node:
        refs = list(node.input)
        changed = False
        for i, ref in enumerate(refs):
            name, idx, ctrl = parse_input(ref)
            if name == call.name:
                refs[i] = ("^" + parse_input(outputs[0])[0]) if ctrl else outputs[idx]
                changed = True
        if changed:
            del node.input[:]
            node.input.extend(refs)
    kept = [n for n in graph_def.node if n.name != call.name]
    del graph_def.node[:]
    graph_def.node.extend(kept + new_nodes)


def _grouped_to_depthwise(graph_def: GraphDef) -> int:
    """Conv2D with a const filter [kh, kw, 1, C*M] on a C-channel input -> depthwise."""
    convs = [n for n in graph_def.node if n.op == "Conv2D"]
    if not convs:
        return 0
    g = GraphIndex(graph_def)
    candidates = []
    for conv in convs:
        w = g.const_value(conv.input[1])
        if w is not None and w.ndim == 4 and w.shape[2] == 1:
            candidates.append((conv, w))
    if not candidates:
        return 0
    channels = _input_channels(graph_def, [c.input[0] for c, _ in candidates])
    count = 0
    for conv, w in candidates:
        cin = channels.get(conv.input[0])
        if not cin or cin == 1 or w.shape[3] % cin:
            continue
        node = g[conv.name]
        old_filter = g.skip_identity(node.input[1])
        filt = make_const(g.unique_name(f"{conv.name}/depthwise_filter"),
                          w.reshape(w.shape[0], w.shape[1], cin, w.shape[3] // cin))
        g.add(filt)
        g.set_inputs(node, [node.input[0], filt.name, *node.input[2:]])
        node.op = "DepthwiseConv2dNative"
        for attr in ("use_cudnn_on_gpu", "explicit_paddings"):  # Conv2D-only attributes
            if attr in node.attr:
                del node.attr[attr]
        if old_filter is not None and not g.consumers(old_filter.name):
            g.remove(old_filter.name)
        count += 1
    if count:
        out = g.to_graph_def()
        del graph_def.node[:]
        graph_def.node.extend(out.node)
    return count


def _input_channels(graph_def: GraphDef, refs: list[str]) -> dict[str, int]:
    """Static channel counts (last dim) of the tensors ``refs``, from TF shape inference."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    out: dict[str, int] = {}
    for ref in refs:
        name, idx, _ = parse_input(ref)
        shape = graph.get_tensor_by_name(f"{name}:{idx}").shape
        if shape.rank and shape[-1] is not None:
            out[ref] = int(shape[-1])
    return out

