"""The runner factory: which runner runs a given model file.

It sits outside :mod:`rewriter.verify.runners` (the base class and the in-process runtimes) so
that a runner in its own module (TFLite Micro, :mod:`rewriter.verify.tflm`) can build on the
base module without the base module importing it back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rewriter.errors import UserError
from rewriter.verify.runners import LiteRTRunner, OnnxRunner, Runner, TFRunner
from rewriter.verify.tflm import TflmRunner

#: Runtimes a ``.tflite`` can run in: LiteRT's builtin kernels, or TFLite Micro's.
TFLITE_RUNTIMES = ("litert", "tflm")


def artifact_runner(path: str | os.PathLike, tflite_runtime: str = "litert") -> Runner:
    """A runner for an exported ``.tflite`` (LiteRT, or TFLite Micro) or ``.onnx`` (ONNX
    Runtime); :class:`~rewriter.errors.UserError` for a missing file or another suffix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".tflite", ".onnx"):
        raise UserError(f"{p}: expected a .tflite or .onnx file")
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    if suffix == ".onnx":
        return OnnxRunner(p)
    if tflite_runtime not in TFLITE_RUNTIMES:
        raise UserError(f"unknown TFLite runtime {tflite_runtime!r}; choose one of "
                        f"{', '.join(TFLITE_RUNTIMES)}")
    return TflmRunner(p) if tflite_runtime == "tflm" else LiteRTRunner(p)


def load_any(path: str | os.PathLike, options: Any = None,
             tflite_runtime: str = "litert") -> Runner:
    """A runner for any supported model file.

    ``.tflite`` runs in LiteRT (or TFLite Micro with ``tflite_runtime="tflm"``), ``.onnx`` in
    ONNX Runtime, everything else (``.keras``, ``.h5``, SavedModel, ``.pb``, checkpoint) is
    loaded by :func:`rewriter.frontends.load_model` and runs in TensorFlow.
    """
    if Path(path).suffix.lower() in (".tflite", ".onnx"):
        return artifact_runner(path, tflite_runtime)
    from rewriter.frontends import load_model

    return TFRunner(load_model(os.fspath(path), options))
