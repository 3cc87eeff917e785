"""Nearest-neighbour upsampling written as a repeat, as ``ResizeNearestNeighbor``: exact.

Keras 3 ``UpSampling2D`` (``interpolation="nearest"``) freezes to ``ops.repeat`` once per
spatial axis: ``ExpandDims(x, a + 1) -> Tile(1, .., s, ..) -> Reshape`` with axis ``a`` grown
``s`` times. The Edge TPU has neither TILE nor the rank-5 tensors in between (only the 3
innermost dimensions may exceed 1) and TensorFlow Lite Micro has no TILE kernel, so an
upsampled feature-fusion detector (FPN/SSD-like) stops there. Repeating every row (or column)
``s`` times is nearest-neighbour resizing by the integer factor ``s``: output index ``i`` reads
input ``floor(i / s)``, which is what ``ResizeNearestNeighbor`` computes without half-pixel
centres (and with them, ``floor((i + 0.5) / s)`` is the same integer for integer ``s``). A repeat
whose input is itself such a resize (the other axis) becomes one resize with both factors, as
tf_keras' ``UpSampling2D`` emits. RESIZE_NEAREST_NEIGHBOR is on the Edge TPU, Ethos-U and TFLite
Micro, in int8.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import float_dtype_reason, single_consumer
from rewriter.rules.base import (
    Builder,
    Match,
    Reject,
    Rule,
    producer_op,
    static_value,
    tensor_shape,
)


class RepeatAsResizeNearest(Rule):
    """reshape(tile(expand_dims(x, a+1), s at a+1)) = resize_nearest(x, dim a * s), exact."""

    name = "repeat_as_resize_nearest"
    anchors = frozenset({"Reshape"})
    fixes = frozenset({"Tile", "ExpandDims", "Reshape"})
    emits = frozenset({"ResizeNearestNeighbor"})
    exact = True
    family = "repeat"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        tile = producer_op(g, node.input[0], "Tile")
        expand = tile is not None and producer_op(g, tile.input[0], "ExpandDims")
        if not expand or not single_consumer(g, tile) or not single_consumer(g, expand):
            return None
        x = expand.input[0]
        shape = tensor_shape(g, x)
        dim = static_value(g, expand.input[1])
        mult = static_value(g, tile.input[1])
        out = tensor_shape(g, node.name)
        if shape is None or len(shape) != 4 or None in shape or dim is None or mult is None:
            return None
        axis = int(dim[0].reshape(-1)[0]) % 5 - 1  # the axis being repeated
        reps = [int(v) for v in mult[0].reshape(-1)]
        if axis not in (1, 2) or len(reps) != 5 or any(r != 1 for i, r in
                                                       enumerate(reps) if i != axis + 1):
            return None
        size = list(shape[1:3])
        size[axis - 1] *= reps[axis + 1]
        if out is None or list(out) != [shape[0], size[0], size[1], shape[3]]:
            return None
        nodes, source = [node, tile, expand], x
        inner = producer_op(g, x, "ResizeNearestNeighbor")
        if inner is not None and single_consumer(g, inner) and _integer_upsample(g, inner):
            nodes.append(inner)
            source = inner.input[0]
        return Match(root=node, nodes=nodes, inputs={"x": source},
                     consts={"size": np.asarray(size, np.int32)})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        return Reject(reason, m.root.name) if reason else None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        size = b.const("size", m.consts["size"], dtype=np.int32)
        return b.op("ResizeNearestNeighbor", [m.inputs["x"], size], "out",
                    attrs={"align_corners": False, "half_pixel_centers": False})


def _integer_upsample(g: GraphIndex, resize: NodeDef) -> bool:
    """A nearest resize growing each spatial axis by an integer factor, without corner
    alignment: composing it with another such resize is one resize by the product."""
    if resize.attr["align_corners"].b:
        return False
    shape = tensor_shape(g, resize.input[0])
    size = static_value(g, resize.input[1])
    if shape is None or len(shape) != 4 or None in shape or size is None:
        return False
    got = [int(v) for v in size[0].reshape(-1)]
    return len(got) == 2 and all(o % i == 0 and o >= i for o, i in zip(got, shape[1:3]))


RULES = (RepeatAsResizeNearest(),)
