"""ONNX export with tf2onnx, checked with ``onnx.checker`` before it is written.

Route: ``tf2onnx.convert.from_graph_def`` on the frozen graph (inputs/outputs by tensor name) at
the requested opset. The graph inputs and outputs are then renamed to the model's ``TensorSpec``
names, so runners match them by name. Two checks, both before anything is written:

* every node's op must exist in the ONNX operator set (``onnx.defs``) at that opset; tf2onnx
  keeps a TF op it cannot convert as a node of the same name (Keras 3 GELU becomes ``Erfc``,
  which is not an ONNX op), so this names the op and the node;
* ``onnx.checker.check_model(full_check=True)``; its "No Op registered for X" is reported with X.

Either failure raises :class:`~rewriter.export.ExportError` with ``ops`` and ``nodes``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rewriter.defaults import DEFAULT_OPSET
from rewriter.export.request import (
    export_error_json,
    model_request,
    raise_export_error,
    read_request,
)
from rewriter.export.result import ExportError, ExportResult
from rewriter.host.fs import atomic_write_bytes
from rewriter.ir.model import Model

#: Opsets ``--opset`` accepts: ONNX Runtime implements opset 7 and later, and tf2onnx 1.17
#: converts up to opset 18 (its README: 14 to 18 tested, 6 to 13 expected to work).
OPSET_MIN, OPSET_MAX = 7, 18
_NO_OP_RE = re.compile(r"No Op registered for (\w+)")
_NODE_RE = re.compile(r"Name: (.*?) OpType: (\w+)")


def export_onnx(model: Model, path: str | os.PathLike, opset: int = DEFAULT_OPSET) -> ExportResult:
    """Convert ``model`` to an ``.onnx`` at ``path`` (written atomically) at ``opset``."""
    start = time.perf_counter()
    proto = _convert(model, opset)
    _rename_io(proto, model)
    _check_ops(proto, opset)
    _check_model(proto)
    data = proto.SerializeToString()
    seconds = time.perf_counter() - start
    out = str(atomic_write_bytes(path, data))
    return ExportResult(path=out, format="onnx", quantize="none", size=len(data),
                        ops=[n.op_type for n in proto.graph.node], warnings=[],
                        seconds=seconds, route="tf2onnx.convert.from_graph_def", opset=opset)


@contextlib.contextmanager
def _quiet_tf2onnx() -> Iterator[None]:
    loggers = [logging.getLogger(n) for n in ("tf2onnx", "tensorflow")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _convert(model: Model, opset: int) -> Any:
    """The tf2onnx ModelProto, converted through :mod:`rewriter.host.isolate` (in the worker process,
    or in this one when it is a supervised child)."""
    import onnx

    from rewriter.host import isolate

    payload, files = model_request(model, {"opset": opset})
    result, out = isolate.call(f"ONNX conversion (tf2onnx, opset {opset})",
                               "rewriter.export.onnx:convert_request", payload, files)
    raise_export_error(result)
    return onnx.load_model_from_string(out["model.onnx"])


def convert_request(directory: Path) -> dict[str, Any]:
    """Worker side of :func:`_convert`: tf2onnx's model into ``out/model.onnx``."""
    model, options, _ = read_request(directory)
    try:
        proto = _convert_here(model, options["opset"])
    except ExportError as exc:
        return export_error_json(exc)
    (directory / "out" / "model.onnx").write_bytes(proto.SerializeToString())
    return {}


def _convert_here(model: Model, opset: int) -> Any:
    import tf2onnx

    try:
        with _quiet_tf2onnx():
            proto, _ = tf2onnx.convert.from_graph_def(
                model.graph_def, input_names=[i.tensor for i in model.inputs],
                output_names=[o.tensor for o in model.outputs], opset=opset)
    except Exception as exc:  # tf2onnx raises many types; report the first line
        text = str(exc).strip().splitlines()
        raise ExportError(f"ONNX conversion (tf2onnx, opset {opset}) failed: "
                          f"{(text[0] if text else type(exc).__name__)[:300]}",
                          format="onnx", detail=str(exc)) from None
    return proto


def _rename_io(proto: Any, model: Model) -> None:
    """Graph inputs/outputs named after the model's TensorSpecs (when those names are free)."""
    renames = {i.tensor: i.name for i in model.inputs}
    renames.update({o.tensor: o.name for o in model.outputs})
    taken = {v for n in proto.graph.node for v in (*n.input, *n.output)}
    taken |= {i.name for i in proto.graph.initializer}
    targets = list(renames.values())
    if len(set(targets)) != len(targets) or any(t in taken and t not in renames for t in targets):
        return
    for value in (*proto.graph.input, *proto.graph.output, *proto.graph.value_info):
        value.name = renames.get(value.name, value.name)
    for node in proto.graph.node:
        node.input[:] = [renames.get(x, x) for x in node.input]
        node.output[:] = [renames.get(x, x) for x in node.output]


def _check_ops(proto: Any, opset: int) -> None:
    import onnx.defs

    versions = {(o.domain or ""): o.version for o in proto.opset_import}
    bad: dict[str, list[str]] = {}
    for node in proto.graph.node:
        domain = node.domain or ""
        if domain not in ("", "ai.onnx"):
            continue  # contrib domains (com.microsoft) are left to the runtime
        if not onnx.defs.has(node.op_type, versions.get(domain, opset), domain):
            bad.setdefault(node.op_type, []).append(node.name)
    if bad:
        raise _unsupported(bad, opset)


def _unsupported(bad: dict[str, list[str]], opset: int, detail: str = "") -> ExportError:
    ops = list(bad)
    nodes = [n for names in bad.values() for n in names]
    listed = "; ".join(f"{op} (node {', '.join(bad[op][:3])})" for op in ops)
    return ExportError(f"ONNX export: op {listed} is not an ONNX operator at opset {opset} "
                       "(tf2onnx kept the TF op); rewrite it for the target first",
                       format="onnx", ops=ops, nodes=nodes, detail=detail)


def _check_model(proto: Any) -> None:
    import onnx

    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        text = str(exc)
        ops = _NO_OP_RE.findall(text)
        node = _NODE_RE.search(text)
        if ops:
            bad = {op: [node.group(1)] if node else [] for op in ops}
            opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                         0)
            raise _unsupported(bad, opset, detail=text) from None
        first = text.strip().splitlines()[0] if text.strip() else "invalid model"
        raise ExportError(f"ONNX export: onnx.checker rejected the model: {first[:300]}",
                          format="onnx", detail=text) from None
