"""GroupNormalization in rank 4 through an L2 normalization, for targets without RSQRT (the
Edge TPU): layernorm_l2norm's form over each group's elements.

With ``x`` of shape ``[1, H, W, C]``, ``G`` groups of ``P = C/G`` channels, ``N = H*W*P``
elements per group, and ``d = x - mu`` centred per group exactly as groupnorm_decompose does
(spatial MEAN, then a 1x1 convolution averaging each group's channels)::

    d * rsqrt(var + eps) = sqrt(N) * d / sqrt(sum_group(d^2) + N*eps)

A group's elements are made one row by reshaping ``d`` to ``[1, H*W, G, P]``, transposing to
``[1, G, H*W, P]`` and reshaping to ``[1, G, N]``; each row is then normalized as in
:func:`rewriter.rules.layernorm_l2norm.l2_rows` (one extra channel holding ``sqrt(N*eps)``, TF's
``l2_normalize`` the converter fuses into L2_NORMALIZATION, slice), reshaped and transposed back,
and ``sqrt(N) * gamma`` and ``beta`` applied per channel. Exact in float (up to float32
summation order): the ``max(., 1e-12)`` of ``l2_normalize`` is inert since ``N*eps >= 1e-12`` is
checked. Every emitted op is in the Edge TPU's documented table: MEAN over height and width,
CONV_2D, SUB, MUL, RESHAPE, TRANSPOSE, PAD, ADD, L2_NORMALIZATION, SLICE.

int8: L2_NORMALIZATION's output scale is fixed at 1/128, and a normalized entry is about
``1/sqrt(N)``: for ``N = 1024`` each entry carries only ~4 quantization steps, so the int8 layer
is coarser than groupnorm_decompose's. Measured (float I/O, calibrated on N(0, 1)):
tests/rules/test_groupnorm_l2norm.py, GroupNormalization(4) alone on [1, 8, 8, 16] (N = 256):
int8 cosine 0.9993, rms error / rms output 0.038; tests/test_family_groupnorm.py's block
(Conv2D 16 -> GroupNormalization(4) -> ReLU -> Conv2D 8 on 16x16x8, N = 1024) through
``rewrite --target edgetpu``: exit 0, no cut, cosine 0.9973 on 8 samples of its --data. The
Edge TPU table warns on the four RESHAPEs that regroup dimensions ("might not be mapped for
large tensor sizes"; 4096 elements in that block): the table states no size, so they stay
mapped and the report lists them. Targets with RSQRT get groupnorm_decompose (``priority``
orders this rule after it).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules.base import Builder, Match, Reject, tensor_shape
from rewriter.rules.groupnorm_decompose import GroupNormDecompose, group_centered
from rewriter.rules.layernorm_l2norm import L2_EPS, l2_rows


class GroupNormL2Norm(GroupNormDecompose):
    """GN(x) = sqrt(N) * rows^-1(l2_rows(rows(x - A mean_hw(x)), N eps)) * gamma + beta."""

    name = "groupnorm_l2norm"
    fixes = GroupNormDecompose.fixes | {"Rsqrt"}
    emits = frozenset({"Mean", "Conv2D", "Sub", "Reshape", "Transpose", "Pad", "AddV2",
                       "Square", "Sum", "Maximum", "Rsqrt", "Mul", "Slice"})
    fused = {"tflite": frozenset({"MEAN", "CONV_2D", "SUB", "RESHAPE", "TRANSPOSE", "PAD",
                                  "ADD", "L2_NORMALIZATION", "SLICE", "MUL"})}
    priority = 2  # after groupnorm_decompose: only where RSQRT is missing

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reject = super().check(g, m)
        if reject is not None:
            return reject
        x4 = [int(d) for d in tensor_shape(g, m.inputs["x"])]
        if x4[0] != 1:
            return Reject(f"batch {x4[0]} is not 1", m.root.name)
        n = x4[1] * x4[2] * m.extra["channels"] // m.extra["groups"]
        if n * m.extra["ln"].eps < L2_EPS:
            return Reject(f"N * epsilon = {n * m.extra['ln'].eps:g} is below {L2_EPS:g}",
                          m.root.name)
        m.extra["shape"] = x4
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        ln, c, groups = m.extra["ln"], m.extra["channels"], m.extra["groups"]
        _, h, w, _ = m.extra["shape"]
        per = c // groups
        n = h * w * per
        d = group_centered(b, m.inputs["x"], c, groups)
        perm = b.const("group_perm", np.asarray([0, 2, 1, 3]), dtype=np.int32)

        def reshape(ref: str, shape: list[int], suffix: str) -> str:
            return b.op("Reshape", [ref, b.const(f"{suffix}_shape", shape, dtype=np.int32)],
                        suffix, attrs={"Tshape": np.int32})

        t = b.op("Transpose", [reshape(d, [1, h * w, groups, per], "pixels_groups"), perm],
                 "groups_first", attrs={"Tperm": np.int32})
        rows = reshape(t, [1, groups, n], "group_rows")
        unit = l2_rows(b, rows, [1, groups, n], ln.eps)
        back = b.op("Transpose", [reshape(unit, [1, groups, h * w, per], "groups_pixels"), perm],
                    "pixels_first", attrs={"Tperm": np.int32})
        y = reshape(back, [1, h, w, c], "normalized")
        gamma = 1.0 if ln.gamma is None else np.broadcast_to(np.ravel(ln.gamma), (c,))
        scale = (np.sqrt(float(n)) * np.asarray(gamma, np.float64) * np.ones(c)).reshape(
            1, 1, 1, c)
        y = b.op("Mul", [y, b.const("sqrt_n_gamma", scale)], "scaled")
        if ln.beta is not None:
            beta = np.broadcast_to(np.ravel(ln.beta), (c,)).reshape(1, 1, 1, c)
            y = b.op("AddV2", [y, b.const("beta", beta)], "shifted")
        return y


RULES = (GroupNormL2Norm(),)
