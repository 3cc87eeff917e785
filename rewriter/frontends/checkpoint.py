"""TF1 checkpoint front end: a checkpoint with its ``.meta`` graph, frozen with its values.

The path may be the prefix (``model.ckpt``, or ``DIR/`` for files named ``.meta``/``.index``),
the ``.meta`` or ``.index`` file, or the directory (:mod:`rewriter.frontends.ckpt_files`: a
``checkpoint`` file naming another machine's paths falls back to the files beside it). Outputs
come from ``--outputs``, else a ``serving_default`` SignatureDef in the MetaGraph, else the
inference graph's one sink (:func:`~rewriter.frontends.tf1_graph.output_candidates`).

Nothing of the training graph is imported: the outputs' ancestors are copied out of the parsed
MetaGraph (:mod:`rewriter.frontends.tf1_graph`), training flags and ``--set`` placeholders are
baked in and their conds folded, and each variable becomes a Const holding its value read from
the checkpoint by TensorFlow's checkpoint reader, under the key the graph's own saver restores
it from. No saver op runs, so the safety scan (:mod:`rewriter.frontends.safety`) judges only the
inference graph; ops touching the file system, the network or Python there are refused unless
``--unsafe``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError, first_line
from rewriter.frontends.ckpt_files import checkpoint_prefix
from rewriter.frontends.graphdef import model_from_graphdef
from rewriter.frontends.options import LoadOptions
from rewriter.frontends.safety import graph_findings, refuse
from rewriter.frontends.tf1_graph import (
    collection_roots,
    inference_subgraph,
    output_candidates,
)
from rewriter.ir.graph import GraphDef, make_const, parse_input
from rewriter.ir.model import Model

_VARIABLE_OPS = ("VariableV2", "Variable")


def resolve_prefix(path: str) -> str:
    """The checkpoint prefix for a prefix, a .meta/.index file or a checkpoint directory."""
    return checkpoint_prefix(path)[0]


def load_checkpoint(path: str, options: LoadOptions) -> Model:
    prefix, where = checkpoint_prefix(path)
    meta = prefix + ".meta"
    if not Path(meta).exists():
        raise UserError(f"{path}: no {Path(meta).name} next to the checkpoint; rewriter needs the "
                        "graph (.meta) to know the model (or give a SavedModel / frozen .pb)")
    if not Path(prefix + ".index").exists():
        raise UserError(f"{path}: no {Path(prefix).name}.index: the checkpoint's values are "
                        "missing (only the .meta graph is there)")
    meta_def = read_meta_graph(meta)
    notes = [where] if where else []
    outputs = options.outputs or _outputs_from_signature(meta_def)
    if outputs is None:
        outputs = _infer_outputs(meta_def, meta)
        notes.append(f"outputs: {', '.join(outputs)} (the inference graph's only sink; choose "
                     "others with --outputs)")
    inputs = options.inputs or _inputs_from_signature(meta_def)
    keys = _saver_keys(meta_def)
    graph_def = inference_subgraph(meta_def.graph_def, outputs)
    refuse(meta, graph_findings(graph_def, fetches=outputs, feeds=_tensors(inputs or [])),
           options.unsafe)
    graph_def, read = _freeze(graph_def, prefix, keys, path)
    notes.append(f"checkpoint {Path(prefix).name or Path(prefix).parent.name + '/'} frozen with "
                 f"its .meta: {read} variable(s) of the inference graph (gradients, optimizer, "
                 "saver and summaries not imported)")
    opts = dataclasses.replace(options, inputs=inputs, outputs=outputs)
    return model_from_graphdef(graph_def, prefix, "checkpoint", opts, notes=notes)


def _freeze(graph_def: GraphDef, prefix: str, keys: dict[str, tuple[str, str]], path: str
            ) -> tuple[GraphDef, int]:
    """Variables (and resource reads) become Consts of their checkpointed values."""
    import tensorflow as tf

    from rewriter.frontends.sizes import check_bundle

    try:
        reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    except Exception as exc:  # noqa: BLE001 - TF raises several kinds for a damaged bundle
        raise UserError(f"{prefix}: cannot read the checkpoint: {first_line(exc)[:200]}") from None
    check_bundle(reader, path)  # sizes before reads
    stored = reader.get_variable_to_shape_map()
    nodes = {n.name: n for n in graph_def.node}
    count = 0
    for node in graph_def.node:
        if node.op in _VARIABLE_OPS:
            var = node.name
        elif node.op == "ReadVariableOp" and nodes.get(parse_input(node.input[0])[0]) is not None \
                and nodes[parse_input(node.input[0])[0]].op == "VarHandleOp":
            var = parse_input(node.input[0])[0]
        else:
            continue
        key, spec = keys.get(var, (var, ""))
        if key not in stored:
            close = [k for k in stored if k.endswith(var.rsplit("/", 1)[-1])][:3]
            raise UserError(f"{prefix}: variable {var!r} of the graph is not in the checkpoint"
                            f"{' (similar keys: ' + ', '.join(close) + ')' if close else ''}; "
                            "is this the checkpoint the .meta was saved with?")
        value = _slice(_read(reader, key, prefix), spec)
        node.CopyFrom(make_const(node.name, np.asarray(value)))
        count += 1
    handles = [n.name for n in graph_def.node if n.op == "VarHandleOp"]
    users = [n for n in graph_def.node if n.op != "ReadVariableOp"
             and any(parse_input(r)[0] in handles for r in n.input)]
    if users:
        raise UserError(f"{prefix}: node {users[0].name!r} ({users[0].op}) reads a resource "
                        "variable other than by ReadVariableOp; give a frozen .pb or a "
                        "SavedModel of the model instead")
    if handles:
        keep = [n for n in graph_def.node if n.name not in handles]
        del graph_def.node[:]
        graph_def.node.extend(keep)
    return graph_def, count


def _slice(value: Any, spec: str) -> Any:
    """The part of a partitioned variable a ``shape_and_slices`` spec names (``"10 4 0,5:-"``)."""
    if not spec:
        return value
    parts = spec.split()
    rank = (len(parts) - 1)
    index = []
    for dim in parts[rank].split(":"):
        if dim == "-":
            index.append(slice(None))
        else:
            start, length = (int(x) for x in dim.split(","))
            index.append(slice(start, start + length))
    return value[tuple(index)]


def _saver_keys(meta_def: Any) -> dict[str, tuple[str, str]]:
    """Variable node -> (checkpoint key, slice spec) as the graph's own saver restores it.

    Read from the restore subgraph without running it: ``Assign(var, RestoreV2:i)`` (through
    Identity for resource variables) with ``RestoreV2``'s ``tensor_names[i]``. Variables the
    saver does not name keep their node name as key."""
    from rewriter.ir.graph import const_to_array

    nodes = {n.name: n for n in meta_def.graph_def.node}
    restore = meta_def.saver_def.restore_op_name if meta_def.HasField("saver_def") else ""
    if not restore or parse_input(restore)[0] not in nodes:
        return {}
    seen: set[str] = set()
    stack = [parse_input(restore)[0]]
    keys: dict[str, tuple[str, str]] = {}
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        stack.extend(parse_input(r)[0] for r in node.input)
        if node.op not in ("Assign", "AssignVariableOp") or len(node.input) < 2:
            continue
        src = nodes.get(parse_input(node.input[1])[0])
        idx = parse_input(node.input[1])[1]
        while src is not None and src.op == "Identity":
            idx = parse_input(src.input[0])[1]
            src = nodes.get(parse_input(src.input[0])[0])
        if src is None or src.op not in ("RestoreV2", "Restore", "RestoreSlice"):
            continue
        try:
            names = const_to_array(nodes[parse_input(src.input[1])[0]]).reshape(-1)
            specs = (const_to_array(nodes[parse_input(src.input[2])[0]]).reshape(-1)
                     if src.op == "RestoreV2" else [b""] * len(names))
        except (KeyError, IndexError, ValueError, TypeError):
            continue
        if idx < len(names):
            key = names[idx].decode() if isinstance(names[idx], bytes) else str(names[idx])
            spec = specs[idx].decode() if isinstance(specs[idx], bytes) else str(specs[idx])
            keys[parse_input(node.input[0])[0]] = (key, spec)
    return keys


def read_meta_graph(meta: str) -> Any:
    """The ``MetaGraphDef`` in a ``.meta`` file (binary or text), parsed without importing it."""
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import meta_graph_pb2

    meta_def = meta_graph_pb2.MetaGraphDef()
    try:
        data = Path(meta).read_bytes()
    except OSError as exc:
        raise UserError(f"{meta}: cannot read ({exc.strerror})") from None
    try:
        meta_def.ParseFromString(data)
    except (message.DecodeError, RecursionError, ValueError):
        try:
            text_format.Parse(data.decode("utf-8"), meta_def)
        except (text_format.ParseError, UnicodeDecodeError, RecursionError, ValueError):
            raise UserError(f"{meta}: cannot parse meta graph: not a MetaGraph (.meta) file; "
                            "is it truncated?") from None
    if not meta_def.graph_def.node:
        raise UserError(f"{meta}: the MetaGraph holds no graph")
    return meta_def


def _tensors(names: list[str]) -> list[str]:
    return [n if ":" in n else f"{n}:0" for n in names]


def _signature(meta_def):
    if meta_def is None:
        return None
    sigs = meta_def.signature_def
    return sigs["serving_default"] if "serving_default" in sigs else None


def _outputs_from_signature(meta_def) -> list[str] | None:
    sig = _signature(meta_def)
    return [sig.outputs[k].name for k in sorted(sig.outputs)] if sig else None


def _inputs_from_signature(meta_def) -> list[str] | None:
    sig = _signature(meta_def)
    return [sig.inputs[k].name for k in sorted(sig.inputs)] if sig else None


def _infer_outputs(meta_def: Any, meta: str) -> list[str]:
    """The inference graph's one sink, or a UserError listing the candidates to copy."""
    sinks = output_candidates(meta_def.graph_def, collection_roots(meta_def))
    if len(sinks) == 1:
        return sinks
    if not sinks:
        raise UserError(f"{meta}: cannot tell the model's outputs (every node belongs to "
                        "training or control flow); name them with --outputs NODE")
    shown = ", ".join(sinks[:8]) + (f" and {len(sinks) - 8} more" if len(sinks) > 8 else "")
    raise UserError(f"{meta}: cannot tell the model's outputs: {len(sinks)} candidates, nearest "
                    f"the end first: {shown}; choose with --outputs {sinks[0]} (several: "
                    f"--outputs {','.join(sinks[:2])})")


def _read(reader: Any, key: str, prefix: Any) -> np.ndarray:
    """``reader.get_tensor(key)``; a data file that fails its checksum or cannot be parsed is a
    corrupt input (exit 2), not a bug (TF raises a bare OpError for it)."""
    import tensorflow as tf

    try:
        return reader.get_tensor(key)
    except tf.errors.OpError as exc:
        raise UserError(f"{prefix}: cannot read variable {key!r}: {first_line(exc)}; the "
                        "checkpoint's data file is corrupt or not the one its .index was "
                        "written with (copy it again from its source)") from None
