"""Inputs the int8 quantizer crashes on, refused before it sees them (exit 2, tensor named).

Measured on TF 2.21 (``tf.lite.TFLiteConverter``, full int8 with int8 I/O, a small
conv/ReLU/pool/dense model; ``tests/test_contract.py::test_the_int8_quantizer_crashes_where_
validate_says``, slow): the quantizer dies by SIGSEGV on a conv weight of 1e38 or +Inf and on
+Inf in the calibration data; a weight of 1e37 and data of 3.4e38 convert. (A conv-only model
converts with those weights: where it crashes depends on the graph, so the bound is wide.)
Trained weights and real inputs are many orders of magnitude below that, so :data:`MAX_ABS`
(1e30) marks a value as broken (a flipped exponent bit, an overflow) rather than data.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rewriter.defaults import QUANTIZER_MAX_ABS
from rewriter.errors import UserError

#: Largest magnitude accepted in weights or calibration data for int8 conversion.
MAX_ABS = QUANTIZER_MAX_ABS
_FLOAT_TYPES = {1, 2, 14, 19}  # DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF


def check_weights(model: Any, masks_fixed: bool = False) -> None:
    """UserError naming the first float weight (Const) that is not finite or beyond MAX_ABS.

    A softmax mask constant (:func:`mask_constants`: Keras's ``-0.7 * float32.max`` in
    ``MultiHeadAttention(use_causal_mask=True)``) is not the user's weight: ``masks_fixed``
    (before the job, whose rule ``softmax_mask_select`` replaces it) passes it; at export a
    mask constant still there is named as one, with what would place it.
    """
    masks = mask_constants(model.graph_def)
    for where, node in _consts(model.graph_def):
        value = node.attr["value"].tensor
        if value.dtype not in _FLOAT_TYPES or (masks_fixed and node.name in masks):
            continue
        import tensorflow as tf

        arr = np.asarray(tf.make_ndarray(value), dtype=np.float64)
        problem = _problem(arr)
        if problem and node.name in masks:  # an ExportError: `check` goes on to the rewrite
            from rewriter.export.result import ExportError

            raise ExportError(f"{model.source.path}: softmax mask constant {where} {problem}; "
                            "the int8 quantizer crashes on such values and no rule replaced "
                            "it (softmax_mask_select needs a constant mask condition and "
                            "--calibration data)", format="tflite", nodes=[node.name])
        if problem:
            raise UserError(f"{model.source.path}: weight {where} {problem}; the int8 quantizer "
                            "crashes on such values: fix the model (or export without "
                            "int8: --quantize none)")


def mask_constants(graph_def: Any) -> set[str]:
    """Consts read only as a branch of a Select/SelectV2 whose only readers are Softmax nodes:
    attention-mask values, not weights."""
    readers: dict[str, list[Any]] = {}
    for node in graph_def.node:
        for ref in node.input:
            readers.setdefault(ref.lstrip("^").split(":")[0], []).append(node)
    out = set()
    for node in graph_def.node:
        if node.op != "Const":
            continue
        selects = readers.get(node.name, [])
        if selects and all(s.op in ("Select", "SelectV2") and _branch_only(s, node.name)
                           and readers.get(s.name)
                           and all(r.op == "Softmax" for r in readers[s.name])
                           for s in selects):
            out.add(node.name)
    return out


def _branch_only(select: Any, name: str) -> bool:
    return all(ref.split(":")[0] != name for ref in select.input[:1])


def check_samples(samples: Sequence[dict[str, np.ndarray]], what: str) -> None:
    """UserError naming the first input of ``samples`` that is not finite or beyond MAX_ABS."""
    for k, sample in enumerate(samples):
        for name, value in sample.items():
            arr = np.asarray(value)
            if arr.dtype.kind != "f":
                continue
            problem = _problem(arr.astype(np.float64))
            if problem:
                raise UserError(f"{what}: sample {k}, input {name!r} {problem}; the int8 "
                                "quantizer crashes on such values: remove or fix them")


def _problem(arr: np.ndarray) -> str | None:
    if arr.size == 0:
        return None
    bad = int(arr.size - np.isfinite(arr).sum())
    if bad:
        return f"holds {bad} non-finite value(s) (Inf/NaN)"
    peak = float(np.max(np.abs(arr)))
    if peak > MAX_ABS:
        return f"holds |values| up to {peak:.3g}, beyond {MAX_ABS:.0e}"
    return None


def _consts(graph_def: Any) -> Iterator[tuple[str, Any]]:
    """Float Consts the quantizer reads: not the parameters of post-processing ops (the
    ``-inf`` default score threshold of NMS converts fine: measured with NMS v5, TF 2.21)."""
    from rewriter.targets.tail import POST_PROCESSING_OPS

    readers: dict[str, set[str]] = {}
    for node in graph_def.node:
        for ref in node.input:
            readers.setdefault(ref.lstrip("^").split(":")[0], set()).add(node.op)
    for node in graph_def.node:
        ops = readers.get(node.name, set())
        if node.op == "Const" and not (ops and ops <= POST_PROCESSING_OPS):
            yield repr(node.name), node
    for fn in graph_def.library.function:
        for node in fn.node_def:
            if node.op == "Const":
                yield f"{node.name!r} in function {fn.signature.name}", node
