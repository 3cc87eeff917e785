"""TF1 checkpoint front end: a checkpoint prefix with its ``.meta`` graph, frozen with its values.

The path may be the prefix (``model.ckpt``), the ``.meta`` file, or a directory with a
``checkpoint`` state file (its latest checkpoint is used). Outputs come from ``--outputs``, else a
``serving_default`` SignatureDef in the MetaGraph, else the inference graph's single sink (the
graph with save/restore, initialisers, gradients and optimiser ops set aside). The ``.meta`` is
parsed and scanned before TensorFlow imports or runs it: ops that touch the file system, the
network or Python on the way to the outputs, or in the saver's restore path beyond its own
checkpoint ops, are refused unless ``--unsafe`` (:mod:`rewriter.frontends.safety`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from rewriter.errors import UserError, first_line
from rewriter.frontends._common import NON_OUTPUT_OPS
from rewriter.frontends.graphdef import model_from_graphdef
from rewriter.frontends.options import LoadOptions
from rewriter.frontends.safety import meta_graph_findings, refuse
from rewriter.ir.graph import parse_input
from rewriter.ir.model import Model

_TRAINING_PREFIXES = ("save/", "save_", "gradients/", "gradients_", "init", "report_uninit")
_TRAINING_OPS = ("Apply", "ResourceApply", "Assign", "ReadVariableOp", "VarIsInitialized",
                 "IsVariableInitialized")
_TRAINING_SCOPES = ("/Assign", "/Initializer/", "/IsInitialized/", "/Regularizer/")


def resolve_prefix(path: str) -> str:
    """The checkpoint prefix for a prefix, a .meta/.index file or a checkpoint directory."""
    p = Path(path)
    if p.is_dir():
        import tensorflow as tf

        latest = tf.train.latest_checkpoint(str(p))
        if latest is None:
            raise UserError(f"{path}: directory's checkpoint file names no readable checkpoint")
        return latest
    for suffix in (".meta", ".index"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def load_checkpoint(path: str, options: LoadOptions) -> Model:
    import tensorflow as tf

    prefix = resolve_prefix(path)
    meta = prefix + ".meta"
    if not Path(meta).exists():
        raise UserError(f"{path}: no {Path(meta).name} next to the checkpoint; rewriter needs the "
                        "graph (.meta) to know the model (or give a SavedModel / frozen .pb)")
    if not Path(prefix + ".index").exists():
        raise UserError(f"{path}: no {Path(prefix).name}.index: the checkpoint's values are "
                        "missing (only the .meta graph is there)")
    meta_def = read_meta_graph(meta)
    _check_sizes(prefix, path)
    outputs = options.outputs or _outputs_from_signature(meta_def) or _infer_outputs(
        meta_def.graph_def, meta)
    inputs = options.inputs or _inputs_from_signature(meta_def)
    refuse(meta, meta_graph_findings(meta_def, fetches=outputs, feeds=_tensors(inputs or [])),
           options.unsafe)
    graph = tf.Graph()
    with graph.as_default():
        try:
            saver = tf.compat.v1.train.import_meta_graph(meta_def, clear_devices=True)
        except Exception as exc:
            first = first_line(exc)
            raise UserError(f"{meta}: cannot read the MetaGraph: {first[:200]}") from None
        graph_def = graph.as_graph_def()
        with tf.compat.v1.Session(graph=graph) as sess:
            if saver is None:
                raise UserError(f"{meta}: graph has no variables to restore; it is not a "
                                "checkpoint graph")
            try:
                saver.restore(sess, prefix)
            except Exception as exc:
                first = first_line(exc)
                raise UserError(f"{prefix}: cannot restore the checkpoint into its .meta graph:"
                                f" {first[:200]}") from None
            names = [o.split(":")[0] for o in outputs]
            try:
                frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
                    sess, graph_def, names)
            except (AssertionError, KeyError, ValueError) as exc:
                raise UserError(f"{prefix}: cannot freeze outputs {', '.join(names)}: "
                                f"{str(exc)[:160]}") from None
    frozen = tf.compat.v1.graph_util.extract_sub_graph(frozen, names)
    opts = dataclasses.replace(options, inputs=inputs, outputs=outputs)
    return model_from_graphdef(frozen, prefix, "checkpoint", opts,
                               notes=[f"checkpoint {Path(prefix).name} frozen with its .meta"])


def _check_sizes(prefix: str, path: str) -> None:
    """Sizes before reads: the variables the index declares fit the budget."""
    import tensorflow as tf

    from rewriter.frontends.sizes import check_bundle

    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception:  # noqa: BLE001 - an unreadable index is reported by the restore below
        return
    check_bundle(reader, path)


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


def _infer_outputs(graph_def, meta: str) -> list[str]:
    """The single sink of the inference graph, or a UserError listing the candidates."""
    def training(node) -> bool:
        return (node.name.startswith(_TRAINING_PREFIXES) or node.op in NON_OUTPUT_OPS
                or node.op.startswith(_TRAINING_OPS)
                or any(scope in node.name for scope in _TRAINING_SCOPES)
                or node.op in ("VariableV2", "VarHandleOp"))

    keep = {n.name: n for n in graph_def.node if not training(n)}
    consumed = set()
    for node in keep.values():
        for ref in node.input:
            consumed.add(parse_input(ref)[0])
    sinks = [n for n in keep if n not in consumed and not n.endswith("/read")]
    if len(sinks) != 1:
        shown = ", ".join(sinks[:8]) + (" ..." if len(sinks) > 8 else "")
        raise UserError(f"{meta}: cannot tell the model's outputs ({len(sinks)} candidate sinks: "
                        f"{shown}); name them with --outputs")
    return sinks
