"""Shared checks of the activation rule tests: apply one rule, convert to TFLite, measure error.

Conversions are of tiny models (a [1, 4, 4, 4] input, one activation) and take about a second.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.rewrite.passes import RewriteResult, apply_rules
from rewriter.rules.base import Rule
from rewriter.testing import model_from_function

#: Input shape of the conversion models (NHWC, so PReLU's alpha has a channel axis).
CONVERT_SHAPE = (1, 4, 4, 4)


def rewritten(fn: Callable[..., Any], rule: Rule, shape=CONVERT_SHAPE,
              dtype: str = "float32") -> tuple[Any, RewriteResult]:
    """(original model, result of applying ``rule``) for activation ``fn``."""
    model = model_from_function(fn, [shape], dtype=dtype)
    return model, apply_rules(model, [rule])


def tflite_ops(model: Any, tmp_path: Path, quantize: str = "none") -> tuple[set[str], set[str]]:
    """(operator names, ops left in float) of ``model`` converted with the project exporter."""
    from rewriter.export.tflite import export_tflite

    rng = np.random.default_rng(0)
    cal = [{model.inputs[0].name: rng.uniform(-6, 6, CONVERT_SHAPE).astype(np.float32)}
           for _ in range(4)] if quantize == "int8" else None
    res = export_tflite(model, tmp_path / f"m_{quantize}.tflite", quantize=quantize,
                        calibration=cal)
    return set(res.ops) - {"QUANTIZE", "DEQUANTIZE"}, set(res.float_ops)


def outputs(before: Any, after: Any, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rewritten output, original output) on input ``x``."""
    name = before.inputs[0].name
    return after.run({name: x})["output_0"], before.run({name: x})["output_0"]


def max_abs(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
