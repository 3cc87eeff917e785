"""Numeric verification: runners for every runtime, comparison metrics, and input data.

* :mod:`rewriter.verify.runners`: one interface (:class:`~rewriter.verify.runners.Runner`) over
  the TF graph, a ``.tflite`` in LiteRT, an ``.onnx`` in ONNX Runtime and a ``.tflite`` in TFLite
  Micro (in a subprocess, :mod:`rewriter.verify.tflm`);
  :mod:`rewriter.verify.factory` picks the runner for a file (``load_any(path)``).
* :mod:`rewriter.verify.metrics`: per-output error statistics and ``compare(ref, test, atol,
  rtol)`` with the tolerance that would have been needed.
* :mod:`rewriter.verify.data`: samples from ``.npy``/``.npz``/image directories or synthetic.

This package imports no runtime at import time; each runner imports its own when used, so the
TFLite Micro worker (``python -m rewriter.verify.tflm``) starts without TensorFlow.
"""

from __future__ import annotations
