"""Frozen GraphDef front end: ``.pb`` (binary) and ``.pbtxt`` (text) files.

Inputs are the Placeholders and outputs the graph's sinks when that is unambiguous; otherwise
``--inputs``/``--outputs`` are required and the error lists the candidates. A graph that still
holds variables is not frozen: the error says to give the checkpoint with its ``.meta`` instead.
Ops that touch the file system, the network or Python on the path from the inputs to the outputs
are refused unless ``--unsafe`` (:mod:`rewriter.frontends.safety`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rewriter.errors import UserError
from rewriter.frontends._common import (
    check_shape_overrides,
    graph_sinks,
    set_placeholder_shapes,
    static_shape,
)
from rewriter.frontends._normalize import drop_unused_control_flow_inputs, lower_control_flow
from rewriter.frontends.cut import apply_cut
from rewriter.frontends.options import LoadOptions
from rewriter.frontends.safety import graph_findings, refuse
from rewriter.ir.graph import GraphDef, np_dtype
from rewriter.ir.model import Model, Source, TensorSpec

_VARIABLE_OPS = {"VariableV2", "VarHandleOp", "Variable"}


def read_graphdef(path: str, text: bool = False) -> GraphDef:
    """Parse a GraphDef file; UserError when it is not one."""
    from google.protobuf import message, text_format

    data = Path(path).read_bytes()
    gd = GraphDef()
    try:
        if text:
            text_format.Parse(data.decode("utf-8"), gd)
        else:
            gd.ParseFromString(data)
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as exc:
        kind = "text (.pbtxt)" if text else "binary"
        raise UserError(f"{path}: not a valid {kind} GraphDef ({str(exc)[:120] or 'parse error'});"
                        " is the file truncated or of another format?") from None
    if not gd.node:
        raise UserError(f"{path}: GraphDef has no nodes; is it a frozen graph?")
    for node in gd.node:
        if not node.name or not node.op:
            raise UserError(f"{path}: not a valid GraphDef (a node has no name or op); "
                            "is the file truncated or of another format?")
    return gd


def load_graphdef(path: str, options: LoadOptions, text: bool = False) -> Model:
    gd = read_graphdef(path, text)
    drop_unused_control_flow_inputs(gd)  # left by TF's loop lowering; not model inputs
    fmt = "graphdef_text" if text else "graphdef"
    model = model_from_graphdef(gd, path, fmt, options)
    # What running the model executes: the outputs' ancestors, up to the fed inputs.
    refuse(path, graph_findings(gd, fetches=[o.tensor for o in model.outputs],
                                feeds=[i.tensor for i in model.inputs]), options.unsafe)
    return lower_control_flow(model)  # functional While/If as the other front ends have them


def model_from_graphdef(gd: GraphDef, path: str, fmt: str, options: LoadOptions,
                        notes: list[str] | None = None) -> Model:
    """Bind a frozen GraphDef to a signature from options or from its Placeholders and sinks."""
    notes = list(notes or [])
    cut_options = options
    nodes = {n.name: n for n in gd.node}
    variables = [n.name for n in gd.node if n.op in _VARIABLE_OPS]
    if variables:
        raise UserError(f"{path}: graph is not frozen (it has variables, e.g. {variables[0]!r});"
                        " give the TF1 checkpoint prefix (with its .meta) instead")
    if options.outputs:
        out_names = options.outputs
    else:
        sinks = graph_sinks(gd)
        if len(sinks) == 1 or (sinks and all(nodes[s].op == "Identity" for s in sinks)):
            out_names = sinks
        else:
            shown = ", ".join(sinks[:8]) + (" ..." if len(sinks) > 8 else "")
            raise UserError(f"{path}: cannot tell the outputs ({len(sinks)} candidate sinks: "
                            f"{shown}); name them with --outputs")
    gd, more = _inference_part(gd, path, out_names, options)
    notes.extend(more)
    nodes = {n.name: n for n in gd.node}
    placeholders = {n.name for n in gd.node if n.op == "Placeholder"}
    cut = bool(options.inputs) and any(r.split(":")[0] not in placeholders
                                       for r in options.inputs or [])
    if options.inputs and not cut:
        in_names = options.inputs
    else:  # an --inputs tensor inside the graph: bind the Placeholders, then cut (frontends.cut)
        in_names = [n.name for n in gd.node if n.op == "Placeholder"]
        if not in_names:
            raise UserError(f"{path}: graph has no Placeholder; name its inputs with --inputs")
    check_shape_overrides(options, [n.split(":")[0] for n in in_names])
    if cut:
        options = replace(options, input_shapes={k: v for k, v in options.input_shapes.items()
                                                 if k in placeholders})
    inputs = []
    for ref in in_names:
        name = ref.split(":")[0]
        node = nodes.get(name)
        if node is None:
            raise UserError(f"{path}: --inputs names {name!r}, which is not a node of the graph")
        try:
            dtype = np_dtype(node.attr["dtype"].type).name
        except KeyError:
            raise UserError(f"{path}: input {name!r} has an unsupported dtype") from None
        shp = node.attr["shape"].shape if "shape" in node.attr else None
        dims = None if shp is None or shp.unknown_rank else [
            None if d.size < 0 else int(d.size) for d in shp.dim]
        shape = static_shape(name, dims, options, notes, dtype)
        inputs.append(TensorSpec(name, _tensor(ref), shape, dtype))
    outputs = []
    for ref in out_names:
        name = ref.split(":")[0]
        if name not in nodes:
            raise UserError(f"{path}: --outputs names {name!r}, which is not a node of the graph")
        outputs.append(TensorSpec(name, _tensor(ref), (), "float32"))
    set_placeholder_shapes(gd, inputs)
    model = Model(gd, inputs, outputs, Source(path, fmt, notes))
    return apply_cut(model, replace(cut_options, outputs=None)) if cut else model


def _inference_part(gd: GraphDef, path: str, outputs: list[str], options: LoadOptions
                    ) -> tuple[GraphDef, list[str]]:
    """The outputs' ancestors, with ``--set`` values and training flags baked in and their
    conds folded (:mod:`rewriter.frontends.tf1_graph`); unknown ops refused (exit 2)."""
    from rewriter.frontends.tf1_graph import check_registered, inference_subgraph, settle

    pruned = inference_subgraph(gd, outputs)
    notes = []
    dropped = [n.name for n in gd.node if n.op == "Placeholder"
               and n.name not in {m.name for m in pruned.node}]
    if dropped and len(pruned.node) < len(gd.node):
        notes.append(f"placeholder(s) {', '.join(dropped[:6])} do not reach the outputs: "
                     "not inputs")
    keep = set(options.inputs or [])
    settings = {k: v for k, v in options.settings.items() if k not in keep}
    pruned, more, _ = settle(pruned, settings, outputs)
    notes.extend(more)
    check_registered(pruned, path)
    return pruned, notes


def _tensor(ref: str) -> str:
    return ref if ":" in ref else f"{ref}:0"
