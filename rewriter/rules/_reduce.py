"""A mean over the last axis every int8 target reduces: shared by the rules that need one.

The Edge TPU's documented MEAN reduces depth (the innermost axis) only when the depth is a
multiple of 4; elsewhere the same mean is a 1x1 convolution with weights 1/C on the tensor seen
as rank 4 (leading 1s added, so no data moves), exact up to float32 summation order.
"""

from __future__ import annotations

import numpy as np

from rewriter.rules.base import Builder

#: The Edge TPU's MEAN over depth needs a depth that is a multiple of this.
DEPTH_MULTIPLE = 4


def channel_mean(b: Builder, x: str, shape: list[int]) -> str:
    """mean(x) over the last axis, kept: a MEAN when C is a multiple of 4, else a 1x1 convolution
    with weights 1/C on x seen as rank 4 (leading 1s added: no data moves)."""
    c, rank = shape[-1], len(shape)
    if c % DEPTH_MULTIPLE == 0:
        last = b.const("mean_axis", np.asarray([rank - 1]), dtype=np.int32)
        return b.op("Mean", [x, last], "mean", attrs={"keep_dims": True, "Tidx": np.int32})
    shape4 = [1] * (4 - rank) + shape
    x4 = x if rank == 4 else b.op("Reshape", [x, b.const("shape4", shape4, dtype=np.int32)],
                                  "as_rank4", attrs={"Tshape": np.int32})
    w = b.const("mean_weights", np.full((1, 1, c, 1), 1.0 / c))
    mean = b.op("Conv2D", [x4, w], "mean", attrs={"strides": [1, 1, 1, 1], "padding": "VALID",
                                                    "data_format": "NHWC",
                                                    "dilations": [1, 1, 1, 1]})
    if rank == 4:
        return mean
    back = b.const("mean_shape", shape[:-1] + [1], dtype=np.int32)
    return b.op("Reshape", [mean, back], "mean_shaped", attrs={"Tshape": np.int32})
