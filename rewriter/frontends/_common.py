"""Shared front-end steps: static input shapes, freezing concrete functions, graph sinks."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends.options import LoadOptions
from rewriter.ir.graph import GraphDef, parse_input
from rewriter.ir.model import TensorSpec

#: Ops that are never a model output (training, saving, initialisation, plumbing).
NON_OUTPUT_OPS = frozenset({
    "NoOp", "Const", "Placeholder", "PlaceholderWithDefault", "Assert", "SaveV2", "RestoreV2",
    "MergeV2Checkpoints", "SaveSlices", "Save", "Restore", "RestoreSlice", "ShardedFilename",
    "StringJoin", "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "VarHandleOp",
    "VariableV2", "Variable", "VarIsInitializedOp", "IsVariableInitialized", "ScalarSummary",
    "HistogramSummary", "MergeSummary", "ImageSummary", "Print", "PrintV2",
})


def static_shape(name: str, shape: Sequence[int | None] | None, options: LoadOptions,
                 notes: list[str], dtype: Any = "float32") -> tuple[int, ...]:
    """The static shape of input ``name`` (see :func:`_static_shape`), checked against the
    limits of :mod:`rewriter.frontends.limits` before anything is built at that shape."""
    from rewriter.frontends.limits import check_input_shape

    result = _static_shape(name, shape, options, notes)
    check_input_shape(name, result, dtype)
    return result


def _static_shape(name: str, shape: Sequence[int | None] | None, options: LoadOptions,
                  notes: list[str]) -> tuple[int, ...]:
    """The static shape of input ``name``: ``--input-shape`` wins, else batch None -> 1.

    Any other unknown dimension is an error naming the flag that fixes it.
    """
    override = options.input_shapes.get(name)
    if override is not None:
        if shape is not None and len(shape) != len(override):
            raise UserError(f"--input-shape {name}: rank {len(override)} given, but the model's "
                            f"input has rank {len(shape)} (shape {_fmt(shape)})")
        if shape is not None:
            for want, have in zip(override, shape):
                if have is not None and want != have:
                    raise UserError(f"--input-shape {name}:{_fmt(override)} conflicts with the "
                                    f"model's fixed input shape {_fmt(shape)}")
        if shape is None or any(d is None for d in shape):
            notes.append(f"input {name!r}: shape fixed to {_fmt(override)} by --input-shape")
        return tuple(override)
    if shape is None:
        raise UserError(f"input {name!r} has unknown rank; give --input-shape {name}:D0,D1,... "
                        f"(--input-shape {name}: for a scalar, or --set {name}=VALUE to bake a "
                        "scalar placeholder in)")
    dims = list(shape)
    if dims and dims[0] is None:
        dims[0] = 1
        notes.append(f"input {name!r}: batch dimension fixed to 1 (edge targets need static "
                     "shapes; use --input-shape to choose another)")
    if any(d is None for d in dims):
        example = ",".join("N" if d is None else str(d) for d in dims)
        raise UserError(f"input {name!r} has dynamic dimensions {_fmt(shape)}; give "
                        f"--input-shape {name}:{example} with N replaced by a size")
    return tuple(int(d) for d in dims)


def check_shape_overrides(options: LoadOptions, input_names: Sequence[str]) -> None:
    """``--input-shape`` may name the model's inputs and the tensors ``--inputs`` cuts at."""
    cut = [n.split(":")[0] for n in options.inputs or []] + [cut_label(n)
                                                             for n in options.inputs or []]
    unknown = sorted(set(options.input_shapes) - set(input_names) - set(cut))
    if unknown:
        raise UserError(f"--input-shape names unknown input(s) {', '.join(unknown)}; "
                        f"the model's inputs are: {', '.join(input_names)}")


def freeze_concrete_function(fn) -> tuple[GraphDef, object, list[str]]:
    """A frozen, normalised GraphDef of a concrete function (variables become Consts), the
    frozen function, and notes on what normalisation changed."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from rewriter.frontends._normalize import normalize

    frozen = convert_variables_to_constants_v2(fn)
    keep = [t.name for t in list(frozen.inputs) + list(frozen.outputs)]
    graph_def, notes = normalize(frozen.graph.as_graph_def(), keep)
    return graph_def, frozen, notes


def graph_sinks(graph_def: GraphDef) -> list[str]:
    """Nodes whose outputs no other node reads, excluding non-output ops."""
    consumed: set[str] = set()
    for node in graph_def.node:
        for ref in node.input:
            consumed.add(parse_input(ref)[0])
    return [n.name for n in graph_def.node
            if n.name not in consumed and n.op not in NON_OUTPUT_OPS]


def set_placeholder_shapes(graph_def: GraphDef, specs: Sequence[TensorSpec]) -> None:
    """Write the static shapes of ``specs`` into their Placeholder nodes."""
    by_node = {s.node: s for s in specs}
    for node in graph_def.node:
        spec = by_node.get(node.name)
        if spec is None or node.op not in ("Placeholder", "PlaceholderWithDefault"):
            continue
        shape = node.attr["shape"].shape
        shape.Clear()
        for d in spec.shape:
            shape.dim.add().size = int(d)
        if "_output_shapes" in node.attr:
            del node.attr["_output_shapes"]


def _fmt(shape: Sequence[int | None] | None) -> str:
    if shape is None:
        return "<unknown>"
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def cut_label(name: str) -> str:
    """A signature name for a cut at graph tensor ``name``: its last path component without
    ``:0``, made a valid key (``StatefulPartitionedCall/boxes_raw`` -> ``boxes_raw``)."""
    base = name.rsplit("/", 1)[-1]
    base = base[:-2] if base.endswith(":0") else base
    base = re.sub(r"[^A-Za-z0-9_.\-]", "_", base)
    return base if base[:1].isalpha() else f"t_{base}"
