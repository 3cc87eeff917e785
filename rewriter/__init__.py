"""rewriter: make trained TensorFlow models run on edge targets.

Loads any TF model format into one frozen ``GraphDef`` form (:class:`rewriter.ir.model.Model`), learns
from a target's op table what the target lacks, rewrites those ops with ops it has (exactly, or
within a stated bound), carries the learned weights across, proves the outputs still match, and
exports a TFLite or ONNX artifact that is checked against the target again.
"""

from __future__ import annotations

__version__ = "0.1.0"
