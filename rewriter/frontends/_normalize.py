"""Graph normalisation after freezing: drop custom-gradient markers and the placeholders control
flow lowering leaves, inline function calls, split grouped convolutions, lower functional loops.

Keras 3 wraps grouped convolutions (e.g. ConvNeXt's depthwise 7x7, ``Conv2D(groups=C)``) in
jit-compiled functions, which ``convert_variables_to_constants_v2`` cannot inline
(``_XlaMustCompile``): the frozen graph keeps ``StatefulPartitionedCall`` nodes that tf2onnx
cannot export and that hide their ops from the op tables. Here each call of a function without
nested calls is inlined (nodes renamed ``<call>/<node>``). A grouped ``Conv2D`` (Keras 3 or
tf_keras ``groups > 1``: RegNet, ResNeXt, ConvNeXt's depthwise conv), which TF's CPU kernels
cannot run once frozen, is rewritten by rule ``grouped_conv_split`` (depthwise when each group
has one input channel, else split/conv/concat). A graph frozen with functional ``While``/``If``
is lowered to TF1 control flow (:func:`lower_control_flow`), the form every other front end
produces and rule ``while_unroll`` reads. All of it is exact: the same arithmetic, expressed
with other nodes.
"""

from __future__ import annotations

from typing import Any

from rewriter.ir.graph import GraphDef, GraphIndex, parse_input
from rewriter.ir.loops import FUNCTIONAL_COND_OPS, FUNCTIONAL_LOOP_OPS
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.rules.base import Reject

CALL_OPS = frozenset({"StatefulPartitionedCall", "PartitionedCall"})


def normalize(graph_def: GraphDef, keep: list[str]) -> tuple[GraphDef, list[str]]:
    """The normalised graph and notes saying what changed (empty when nothing did).

    ``keep`` are the signature's tensors: when anything changed, nodes none of them depends on
    (e.g. a replaced filter and its reads) are pruned.
    """
    notes: list[str] = []
    leftovers = drop_unused_control_flow_inputs(graph_def)
    markers = _strip_custom_gradients(graph_def)
    if markers:
        notes.append(f"removed {markers} tf.custom_gradient marker(s) (e.g. Keras 3 swish): an "
                     "inference graph has no use for them, and they stop SavedModel export and "
                     "int8 calibration")
    inlined = _inline_calls(graph_def)
    if inlined:
        notes.append(f"inlined {inlined} function call(s) (e.g. Keras 3 jit-compiled convs)")
    converted = _split_grouped_convs(graph_def, keep)
    if converted:
        notes.append(f"{converted} grouped Conv2D rewritten by rule grouped_conv_split "
                     "(depthwise, or split/conv/concat per group; exact): TF's CPU kernels "
                     "and the edge targets have no grouped convolution")
    if notes or leftovers:
        g = GraphIndex(graph_def)
        g.prune(keep)
        graph_def = g.to_graph_def()
    return graph_def, notes


def lower_control_flow(model: Model) -> Model:
    """A model whose graph holds functional ``While``/``If`` (a graph frozen without lowering)
    with them lowered to TF1 control flow, as every other front end freezes them; the model
    itself when it holds none.

    TensorFlow does the lowering (``convert_variables_to_constants_v2`` with control flow
    lowered, the route the Keras and SavedModel front ends take); the signature is rebound to
    the lowered graph's tensors. Call it only once the graph has passed the safety scan: the
    lowering runs Grappler, which folds constants.
    """
    functional = FUNCTIONAL_LOOP_OPS | FUNCTIONAL_COND_OPS
    count = sum(n.op in functional for n in model.graph_def.node)
    if not count:
        return model
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    graph_def = type(model.graph_def)()
    graph_def.CopyFrom(model.graph_def)
    for node in _control_flow_nodes(graph_def, functional):  # frozen with lowering disabled
        node.attr["_lower_using_switch_merge"].b = True
    frozen = convert_variables_to_constants_v2(
        model.with_graph(graph_def).concrete_function(constants=True))
    keep = [t.name for t in list(frozen.inputs) + list(frozen.outputs)]
    graph_def, notes = normalize(frozen.graph.as_graph_def(), keep)
    inputs = [TensorSpec(s.name, t.name, s.shape, s.dtype)
              for s, t in zip(model.inputs, frozen.inputs, strict=True)]
    outputs = [TensorSpec(s.name, t.name, s.shape, s.dtype)
               for s, t in zip(model.outputs, frozen.outputs, strict=True)]
    note = (f"lowered {count} functional control-flow op(s) (While/If) to TF1 control flow, "
            "as the Keras and SavedModel front ends freeze them")
    src = Source(model.source.path, model.source.format,
                 [*model.source.notes, note, *notes])
    return Model(graph_def, inputs, outputs, src)


def _control_flow_nodes(graph_def: GraphDef, ops: frozenset[str]) -> list[Any]:
    """Nodes of ``ops`` in the graph and in its library's functions."""
    out = [n for n in graph_def.node if n.op in ops]
    for fn in graph_def.library.function:
        out.extend(n for n in fn.node_def if n.op in ops)
    return out


def drop_unused_control_flow_inputs(graph_def: GraphDef) -> int:
    """Remove the unread ``unused_control_flow_input*`` Placeholders TF's control-flow lowering
    leaves behind (they would look like model inputs); returns how many."""
    read = {parse_input(r)[0] for n in graph_def.node for r in n.input}
    keep = [n for n in graph_def.node if not (
        n.op == "Placeholder" and n.name.startswith("unused_control_flow_input")
        and n.name not in read)]
    dropped = len(graph_def.node) - len(keep)
    if dropped:
        del graph_def.node[:]
        graph_def.node.extend(keep)
    return dropped


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

    call_name = call.name
    # consumers of call:i read the inlined output i
    outputs = []
    for out in fdef.signature.output_arg:
        ret = fdef.ret[out.name]
        outputs.append(remap(flat_names.get(ret, ret)))
    for node in graph_def.node:
        refs = list(node.input)
        changed = False
        for i, ref in enumerate(refs):
            name, idx, ctrl = parse_input(ref)
            if name == call_name:
                refs[i] = ("^" + parse_input(outputs[0])[0]) if ctrl else outputs[idx]
                changed = True
        if changed:
            del node.input[:]
            node.input.extend(refs)
    # In place: rebuilding the node list would copy every node (weights included) once per
    # call, and Python protobuf frees the old copies only with the whole message (ConvNeXtTiny:
    # 18 calls, +1.8 GB while loading).
    index = next(i for i, n in enumerate(graph_def.node) if n.name == call_name)
    del graph_def.node[index]
    for node in body.node:
        if node.name in arg_map:  # the argument placeholders are the call's inputs
            continue
        n = graph_def.node.add()
        n.CopyFrom(node)
        n.name = f"{prefix}/{node.name}"
        del n.input[:]
        n.input.extend(remap(r) for r in node.input)


def _split_grouped_convs(graph_def: GraphDef, keep: list[str]) -> int:
    """Apply rule grouped_conv_split to every grouped Conv2D; returns how many."""
    from rewriter.rules.grouped_conv_split import GroupedConvSplit

    if not any(n.op == "Conv2D" for n in graph_def.node):
        return 0
    rule, g = GroupedConvSplit(), GraphIndex(graph_def)
    protected = {parse_input(k)[0] for k in keep}
    count = 0
    for node in [n for n in g if n.op == "Conv2D"]:
        m = rule.match(g, node)
        if m is not None and not isinstance(m, Reject):
            rule.apply(g, m, protected)
            count += 1
    if count:
        out = g.to_graph_def()
        del graph_def.node[:]
        graph_def.node.extend(out.node)
    return count

