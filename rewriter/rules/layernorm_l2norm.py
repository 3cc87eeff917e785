"""LayerNorm over the last axis through an L2 normalization, for targets without RSQRT.

With ``d = x - mean(x)`` over the C channels of the last axis::

    d * rsqrt(mean(d^2) + eps) = sqrt(C) * d / sqrt(sum(d^2) + C*eps)
                               = sqrt(C) * slice[0:C](l2_normalize(pad(d) + e))

where ``pad`` appends one zero channel and ``e`` is zero but ``sqrt(C*eps)`` on that channel:
the extra channel adds exactly ``C*eps`` under the root. ``l2_normalize`` is written as TF's
``x * rsqrt(max(sum(x^2, -1, keepdims), 1e-12))``, which the TFLite converter fuses into the
builtin L2_NORMALIZATION (float and int8). The ``max`` is inert because ``sum >= C*eps >= 1e-12``
(checked), so the rewrite is exact: a row where d is all zero gives 0, then ``y = beta`` as
LayerNorm gives. gamma * sqrt(C) and beta are applied after the slice.

Within the Edge TPU's documented limits: it runs L2_NORMALIZATION, MEAN, SUB, PAD, SLICE, MUL,
ADD but has no RSQRT, SUM or SQUARED_DIFFERENCE; its CONCATENATION takes a constant input only
as an all-zero padding (why the eps channel is a PAD then an ADD, not a concatenated constant);
its MEAN over depth needs a depth that is a multiple of 4, so for other C the mean is a 1x1
convolution with weights 1/C on the input seen as rank 4 (leading 1s added, no data moved).

int8 caveat: the TFLite kernel requires L2_NORMALIZATION's int8 output scale to be 1/128 (zero
point 0), whatever the data. Normalized entries are about 1/sqrt(C) in size, so each carries
only ~128/sqrt(C) quantization steps and the rounding error, relative to the output, grows as
sqrt(C). Measured with ``PYTHONPATH=. python benchmarks/layernorm_edgetpu_int8.py`` (one
LayerNorm [1, 8, 8, C], x ~ N(0, 2), gamma in [0.5, 2], beta ~ N(0, 1), eps 1e-6, full int8
with int8 I/O calibrated on the same distribution), rms error / rms output and cosine vs float,
this rule against layernorm_decompose (RSQRT, which the Edge TPU lacks, quantized as TFLite does
it); every file of this rule passes the Edge TPU table with no warning:

    C      16             96             384            768
    this   0.020 0.9998   0.027 0.9996   0.041 0.9992   0.055 0.9985
    RSQRT  0.023 0.9997   0.024 0.9997   0.027 0.9996   0.028 0.9996

Targets that have RSQRT therefore get layernorm_decompose (``priority`` orders this rule after).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules._layernorm import (
    LN_FIXES,
    LayerNormRule,
)
from rewriter.rules._reduce import channel_mean
from rewriter.rules.base import Builder, Match, Reject, tensor_shape

#: The epsilon of the emitted ``l2_normalize`` (TF's default; TFLite's kernel clamps the norm
#: at 1e-6, the same bound on the sum of squares).
L2_EPS = 1e-12


class LayerNormL2Norm(LayerNormRule):
    """LN(x) = sqrt(C) * slice(l2_normalize(concat(x - mean, sqrt(C eps)))) * gamma + beta."""

    name = "layernorm_l2norm"
    fixes = LN_FIXES | {"Rsqrt"}
    emits = frozenset({"Mean", "Conv2D", "Reshape", "Sub", "Pad", "Square", "Sum", "Maximum",
                       "Rsqrt", "Mul", "Slice", "AddV2"})
    fused = {"tflite": frozenset({"MEAN", "CONV_2D", "RESHAPE", "SUB", "PAD",
                                  "L2_NORMALIZATION", "SLICE", "MUL", "ADD"})}
    exact = True
    priority = 2  # after layernorm_decompose / layernorm_conv_mean: only where RSQRT is missing

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        ln = m.extra["ln"]
        shape = tensor_shape(g, m.inputs["x"])
        if shape is None or any(d is None for d in shape):
            return Reject(f"input shape {shape} is not static", m.root.name)
        if not 2 <= len(shape) <= 4:
            return Reject(f"input rank {len(shape)} is not 2..4 (L2_NORMALIZATION's limit)",
                          m.root.name)
        if [a % len(shape) for a in ln.axes] != [len(shape) - 1]:
            return Reject(f"normalizes over axes {ln.axes}, not the last axis only", m.root.name)
        c = int(shape[-1])
        if c * ln.eps < L2_EPS:
            return Reject(f"C * epsilon = {c * ln.eps:g} is below {L2_EPS:g}", m.root.name)
        m.extra["shape"] = [int(d) for d in shape]
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        ln = m.extra["ln"]
        return l2norm_layernorm(b, ln.x, m.extra["shape"], ln.eps, ln.gamma, ln.beta)


def l2norm_layernorm(b: Builder, x: str, shape: list[int], eps: float,
                     gamma: np.ndarray | None, beta: np.ndarray | None) -> str:
    """``sqrt(C) * slice(l2_normalize(pad(x - mean(x)) + e)) * gamma + beta`` over the last axis
    of ``x`` (static ``shape``); gamma and beta broadcast against ``shape``."""
    c = shape[-1]
    d = b.op("Sub", [x, channel_mean(b, x, shape)], "centered")
    y = l2_rows(b, d, shape, eps)
    scale = np.sqrt(float(c)) * (1.0 if gamma is None else np.asarray(gamma, np.float64))
    y = b.op("Mul", [y, b.const("sqrt_c_gamma", scale)], "scaled")
    if beta is not None:
        y = b.op("AddV2", [y, b.const("beta", beta)], "shifted")
    return y


def l2_rows(b: Builder, d: str, shape: list[int], eps: float) -> str:
    """``d / sqrt(sum(d^2) + C*eps)`` over the last axis of ``d`` (static ``shape``, last axis
    C): ``slice[0:C](l2_normalize(pad(d) + e))``, exact while ``C*eps >= L2_EPS``."""
    c, rank = shape[-1], len(shape)
    last = b.const("last_axis", np.asarray([rank - 1]), dtype=np.int32)
    pads = np.zeros((rank, 2), np.int32)
    pads[-1, 1] = 1
    padded = b.op("Pad", [d, b.const("pad_channel", pads, dtype=np.int32)], "padded",
                  attrs={"Tpaddings": np.int32})
    e = np.zeros([1] * (rank - 1) + [c + 1])
    e[..., c] = np.sqrt(c * eps)
    cat = b.op("AddV2", [padded, b.const("eps_channel", e)], "with_eps")
    sq = b.op("Sum", [b.op("Square", [cat], "square"), last], "sum_squares",
              attrs={"keep_dims": True, "Tidx": np.int32})
    inv = b.op("Rsqrt", [b.op("Maximum", [sq, b.const("l2_eps", L2_EPS)], "clamped")],
               "inv_norm")
    unit = b.op("Mul", [cat, inv], "l2_normalized")
    begin = b.const("slice_begin", np.zeros(rank), dtype=np.int32)
    size = b.const("slice_size", np.asarray(shape), dtype=np.int32)
    return b.op("Slice", [unit, begin, size], "channels", attrs={"Index": np.int32})


RULES = (LayerNormL2Norm(),)
