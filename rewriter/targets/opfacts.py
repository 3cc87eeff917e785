"""What is known about one operator of a deployable file: the vocabulary the op tables judge.

An :class:`OpFacts` comes from two places: the TF graph, predicting what the converter will
emit (:mod:`rewriter.targets.predict`), and the exported ``.tflite``/``.onnx`` itself
(:mod:`rewriter.targets.artifact`). The tables (:mod:`rewriter.targets`) judge both the same way. This
module imports nothing of the project, so both sides can use it without a circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Shape = tuple  # a tensor shape; ``None`` entries are unknown (dynamic) dimensions


@dataclass(frozen=True)
class TensorFacts:
    """One input or output tensor of an op: its shape and dtype, and for a compile-time
    constant (weights, a constant operand) how many of its values are not zero (``nonzero``;
    quantized values are compared with their zero point, so it counts real values)."""

    shape: Shape | None = None
    dtype: str | None = None
    const: bool = False
    nonzero: int | None = None


@dataclass
class OpFacts:
    """What is known about one target op: from a TF node (predicted) or from the artifact.

    Shapes are NHWC for TFLite ops; ``strides``, ``kernel`` and ``dilation`` are (h, w).
    ``None`` means unknown, and a constraint that needs an unknown fact is not judged.
    ``axes`` are the dimensions the op reduces, splits, packs or pads along, non-negative once
    known. ``options`` holds the few op options a table judges (``weights_format`` of a
    FULLY_CONNECTED, ``ellipsis_mask`` / ``new_axis_mask`` of a STRIDED_SLICE).
    """

    node: str
    op: str
    source_op: str | None = None
    dtype: str | None = None
    out_dtype: str | None = None
    input_shape: Shape | None = None
    output_shape: Shape | None = None
    strides: tuple[int, int] | None = None
    kernel: tuple[int, int] | None = None
    dilation: tuple[int, int] | None = None
    padding: str | None = None
    fused_activation: str | None = None
    axes: tuple[int, ...] | None = None
    slice_strides: tuple[int, ...] | None = None
    version: int | None = None
    inputs: tuple[TensorFacts, ...] = ()  # every input tensor, constants included
    outputs: tuple[TensorFacts, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)  # weights_format, masks, ...
    custom: bool = False
    boundary: bool = False  # QUANTIZE of a graph input / DEQUANTIZE of a graph output
    float_island: bool = False  # left in float in an int8 file: DEQUANTIZE -> op -> QUANTIZE
    note: str | None = None
    related_op: str | None = None  # the float op a mid-graph (DE)QUANTIZE exists for
    blocked: str | None = None  # why the converter cannot make this op at all (the reason)
