"""Cut points: start a model after a front end (``--inputs``), end it before a tail (``--outputs``).

A model's deployable part is often not the whole model: an audio model computes its spectrogram
(STFT, CQT, log, per-clip normalisation) where a DSP or the CPU does it better, and a detector
ends in non-maximum suppression that no accelerator runs. ``--inputs T`` makes tensor ``T`` a
new input (everything only needed to compute it is dropped); ``--outputs T`` makes ``T`` an
output (everything after it is dropped). Names are, in this order: a signature name (a
SavedModel key, a Keras input/output name), a Keras layer name (its output), a graph tensor
``node:i`` or a node name (output 0), or the last part of exactly one node's name (a SavedModel
inlines its functions under ``StatefulPartitionedCall/...``).

The cut is exact: the remaining graph computes the same tensors. It refuses, with the reason, a
cut that does not separate the model (an original input still read after it) and names that
are not in the model (with the closest names).
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace

from rewriter.errors import UserError
from rewriter.frontends._common import cut_label, static_shape
from rewriter.frontends.options import LoadOptions
from rewriter.ir.graph import GraphIndex, make_const, make_node, node_dtype, parse_input
from rewriter.ir.model import Model, Source, TensorSpec

#: Ops whose value is only the static shape of their input (folded before cutting an input).
_SHAPE_OPS = {"Shape": "shape", "Size": "size", "Rank": "rank"}


def apply_cut(model: Model, options: LoadOptions,
              aliases: Mapping[str, str] | None = None) -> Model:
    """``model`` cut at ``options.inputs`` / ``options.outputs`` (None: unchanged there).

    ``aliases`` maps names the front end knows (signature keys, Keras layer names) to graph
    tensors; they are tried before graph node names.
    """
    if not options.inputs and not options.outputs:
        return model
    known = dict(aliases or {})
    known.update({s.name: s.tensor for s in list(model.inputs) + list(model.outputs)})
    g = GraphIndex(model.graph_def)
    outputs = list(model.outputs)
    notes = list(model.source.notes)
    if options.outputs:
        outputs = _unique([_output_spec(g, name, known, model) for name in options.outputs])
        notes.append("ends at --outputs " + ", ".join(f"{o.name} ({o.tensor})" for o in outputs))
    inputs = list(model.inputs)
    origins: dict[str, str] = {}  # a new input's placeholder tensor -> the tensor it replaces
    if options.inputs:
        inputs = _unique(_cut_inputs(g, model, options, known, outputs, notes, origins))
    g.prune([o.tensor for o in outputs] + [i.tensor for i in inputs])
    return Model(g.to_graph_def(), inputs, outputs,
                 Source(model.source.path, model.source.format, notes),
                 prefix=_prefix(model, inputs, origins))


def _prefix(model: Model, inputs: Sequence[TensorSpec], origins: Mapping[str, str]
            ) -> Model | None:
    """The original graph from its inputs up to the new inputs (outputs named as them), or
    None when the cut starts at no new tensor."""
    outs = [replace(s, tensor=origins[s.tensor]) for s in inputs if s.tensor in origins]
    if not outs:
        return None
    g = GraphIndex(model.graph_def)
    g.prune([o.tensor for o in outs])
    kept = {n.name for n in g}
    return Model(g.to_graph_def(), [s for s in model.inputs if s.node in kept], outs,
                 Source(model.source.path, model.source.format, []))


def _unique(specs: list[TensorSpec]) -> list[TensorSpec]:
    """Specs with distinct names: a repeated short name becomes its node's path (``/`` as ``_``)."""
    seen = [s.name for s in specs]
    return [replace(s, name=s.node.replace("/", "_")) if seen.count(s.name) > 1 else s
            for s in specs]


def resolve(g: GraphIndex, name: str, known: Mapping[str, str], flag: str) -> str:
    """The graph tensor (``node:i``) that ``name`` denotes; UserError with close names."""
    if name in known:
        return known[name]
    node, idx, ctrl = parse_input(name)
    if not ctrl and node in g:
        return f"{node}:{idx}"
    scoped = [n.name for n in g if n.name.endswith("/" + node)]
    if not ctrl and len(scoped) == 1:  # a name inside a called function: ".../logmel"
        return f"{scoped[0]}:{idx}"
    candidates = {k: k for k in known}
    for n in g:
        if n.op != "Const":
            candidates.setdefault(n.name, n.name)
            candidates.setdefault(n.name.rsplit("/", 1)[-1], n.name)
    close = list(dict.fromkeys(candidates[c] for c in difflib.get_close_matches(
        name, list(candidates), n=4, cutoff=0.6)))
    hint = f"; closest: {', '.join(close)}" if close else ""
    raise UserError(f"{flag} names {name!r}, which is neither a signature name nor a layer nor "
                    f"a node of the graph{hint} (the report's node names are the graph's)")


def _output_spec(g: GraphIndex, name: str, known: Mapping[str, str], model: Model) -> TensorSpec:
    tensor = resolve(g, name, known, "--outputs")
    for spec in model.outputs:
        if spec.tensor == tensor:
            return spec
    if parse_input(tensor)[0] in {s.node for s in model.inputs}:
        raise UserError(f"--outputs {name!r} is a model input: an output must be computed")
    return TensorSpec(name if name in known else cut_label(name), tensor, (), "float32")



def _cut_inputs(g: GraphIndex, model: Model, options: LoadOptions, known: Mapping[str, str],
                outputs: Sequence[TensorSpec], notes: list[str],
                origins: dict[str, str]) -> list[TensorSpec]:
    """Replace each ``--inputs`` tensor by a Placeholder of its static shape and dtype."""
    facts = _tensor_facts(model)
    old = {s.tensor: s for s in model.inputs}
    specs: list[TensorSpec] = []
    for name in options.inputs or []:
        tensor = resolve(g, name, known, "--inputs")
        if tensor in old:
            specs.append(old[tensor])
            continue
        if tensor not in facts:
            raise UserError(f"--inputs {name!r} ({tensor}) is not a tensor of the inference graph")
        dims, dtype = facts[tensor]
        key = name if name in known else cut_label(name)
        shape = static_shape(key, dims, options, notes)
        placeholder = make_node("Placeholder", g.unique_name(f"{parse_input(tensor)[0]}/input"),
                                [], {"shape": _shape_attr(shape)}, dtype=dtype,
                                dtype_attr="dtype")
        g.add(placeholder)
        g.redirect(tensor, placeholder.name + ":0")
        specs.append(TensorSpec(key, placeholder.name + ":0", shape, dtype))
        origins[placeholder.name + ":0"] = tensor
    _fold_static_shapes(g, facts)
    _drop_control_edges(g)
    _check_separated(g, model, specs, outputs)
    notes.append("starts at --inputs " + ", ".join(f"{s.name} {list(s.shape)} {s.dtype}"
                                                   for s in specs))
    return specs


def _tensor_facts(model: Model) -> dict[str, tuple[list[int | None] | None, str]]:
    """Static shape and dtype of every tensor of the graph at the model's input shapes."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
    out: dict[str, tuple[list[int | None] | None, str]] = {}
    for op in graph.get_operations():
        for t in op.outputs:
            dims = t.shape.as_list() if t.shape.rank is not None else None
            try:
                dtype = t.dtype.as_numpy_dtype().dtype.name
            except (TypeError, AttributeError, KeyError):  # resource, variant: never a cut point
                continue
            out[t.name] = (dims, dtype)
    return out


def _shape_attr(shape: Sequence[int]):
    from tensorflow.core.framework import attr_value_pb2

    av = attr_value_pb2.AttrValue()
    for d in shape:
        av.shape.dim.add().size = int(d)
    return av


def _fold_static_shapes(g: GraphIndex, facts: Mapping[str, tuple]) -> None:
    """Shape/Size/Rank of a statically shaped tensor become Consts, so reading the shape of a
    tensor before the cut does not keep the front end alive (``tf.shape(spectrogram)[0]``)."""
    import numpy as np

    for node in list(g):
        kind = _SHAPE_OPS.get(node.op)
        data = [r for r in node.input if not r.startswith("^")]
        if kind is None or not data:
            continue
        src, idx, _ = parse_input(data[0])
        dims = facts.get(f"{src}:{idx}", (None, ""))[0]
        if dims is None or any(d is None for d in dims):
            continue
        dtype = node_dtype(node, ("out_type",)) or np.dtype(np.int32)
        value = {"shape": np.asarray(dims), "size": np.asarray(int(np.prod(dims))),
                 "rank": np.asarray(len(dims))}[kind].astype(dtype)
        g.remove(node.name)  # its readers stay indexed under its name, which the Const takes
        g.add(make_const(node.name, value))


def _drop_control_edges(g: GraphIndex) -> None:
    """Control edges of a frozen inference graph outside while loops only order Asserts and
    NoOps; a cut through the front end would otherwise keep it alive through them. Inside a
    lowered loop (Enter .. Exit: a Keras LSTM) they put constants in the loop's frame, and
    are kept (without them TF refuses the graph: "inputs from different frames")."""
    framed = _in_loop_frames(g)
    for node in list(g):
        if node.name not in framed and any(r.startswith("^") for r in node.input):
            g.set_inputs(node, [r for r in node.input if not r.startswith("^")])


def _in_loop_frames(g: GraphIndex) -> set[str]:
    """Nodes downstream of a loop's Enter nodes up to its Exit nodes (data or control edges)."""
    readers: dict[str, list[str]] = {}
    for node in g:
        for ref in node.input:
            readers.setdefault(parse_input(ref)[0], []).append(node.name)
    queue = deque(n.name for n in g if n.op in ("Enter", "RefEnter"))
    seen: set[str] = set()
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        if g[name].op not in ("Exit", "RefExit"):
            queue.extend(readers.get(name, ()))
    return {n for n in seen if g[n].op not in ("Enter", "RefEnter")}


def _check_separated(g: GraphIndex, model: Model, specs: Sequence[TensorSpec],
                     outputs: Sequence[TensorSpec]) -> None:
    """Every original input still read by the outputs must be one of the new inputs."""
    kept = {s.node for s in specs}
    reader: dict[str, str] = {}
    queue = deque(parse_input(o.tensor)[0] for o in outputs)
    seen: set[str] = set()
    while queue:
        name = queue.popleft()
        if name in seen or name not in g:
            continue
        seen.add(name)
        for ref in g[name].input:
            src = parse_input(ref)[0]
            reader.setdefault(src, name)
            queue.append(src)
    for spec in model.inputs:
        if spec.node in seen and spec.node not in kept:
            raise UserError(f"--inputs does not separate the model from its input {spec.name!r}: "
                            f"node {reader.get(spec.node, '?')!r} still reads it after the cut; "
                            f"name it in --inputs too, or cut below that node")
