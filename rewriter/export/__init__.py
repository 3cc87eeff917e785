"""Back ends: the rewritten :class:`rewriter.ir.model.Model` as a deployable file.

``export_tflite`` (float32, full-integer int8, float16; LiteRT builtins only, never Flex ops),
``export_onnx`` (tf2onnx, checked with ``onnx.checker``) and ``export_saved_model`` (the float
model with a ``serving_default`` signature) each return an :class:`ExportResult`. A conversion
that cannot succeed because of an op raises :class:`ExportError` (a ``UserError``) that names
the op and the node. Files are written atomically: a temporary file, then ``os.replace``.
TensorFlow and tf2onnx are imported only inside the functions that need them.
"""

from __future__ import annotations

from typing import Any

from rewriter.export.result import ExportError, ExportResult


def __getattr__(name: str) -> Any:
    """Lazy access to the exporters, so ``import rewriter.export`` stays light."""
    if name == "export_tflite":
        from rewriter.export.tflite import export_tflite

        return export_tflite
    if name == "export_onnx":
        from rewriter.export.onnx import export_onnx

        return export_onnx
    if name == "export_saved_model":
        from rewriter.export.saved_model import export_saved_model

        return export_saved_model
    raise AttributeError(name)


__all__ = ["ExportError", "ExportResult", "export_onnx", "export_saved_model", "export_tflite"]
