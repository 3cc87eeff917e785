"""A strided slice with steps > 1 as unit-step slices and reshapes, exact (data movement only).

``x[..., b::s, ...]`` along an axis of ``n`` keeps ``m`` elements ``b, b + s, ...``. Cut the
axis to ``[b, b + s*m)`` (a SLICE; a PAD with zeros at the end when ``b + s*m > n``: the padded
values are never kept), view the tensor as ``[outer * m, s, inner]`` (every element's position is
unchanged, so a RESHAPE), keep index 0 of the middle axis (a SLICE with unit steps) and reshape
to the result's shape. One axis at a time, each view rank 3: the Edge TPU's documented table maps
STRIDED_SLICE only with "strides 1", and only the 3 innermost dimensions of a tensor may be
larger than 1. Refused: negative steps, ellipsis / new-axis / shrink masks, dynamic shapes.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, static_value, tensor_shape


class StridedSliceUnitSteps(Rule):
    """x[b::s] = reshape(slice(reshape(pad(slice(x, b, s*m)), [outer*m, s, inner]))[:, 0]); exact."""

    name = "strided_slice_unit_steps"
    anchors = frozenset({"StridedSlice"})
    fixes = frozenset({"StridedSlice"})
    emits = frozenset({"Slice", "Pad", "Reshape"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        strides = static_value(g, node.input[3]) if len(node.input) >= 4 else None
        if strides is None or all(int(s) == 1 for s in np.ravel(strides[0])):
            return None
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]},
                     consts={"strides": np.ravel(strides[0]).astype(int)})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        masks = {k: node.attr[k].i for k in ("ellipsis_mask", "new_axis_mask",
                                              "shrink_axis_mask")}
        if any(masks.values()):
            return Reject(f"masks {masks} are not all 0", node.name)
        shape = tensor_shape(g, m.inputs["x"])
        begin, end = static_value(g, node.input[1]), static_value(g, node.input[2])
        if shape is None or any(d is None for d in shape) or begin is None or end is None:
            return Reject(f"shape {shape} or bounds not static", node.name)
        strides = m.consts["strides"]
        if np.any(strides < 1):
            return Reject(f"strides {strides.tolist()} are not all positive", node.name)
        bm, em = node.attr["begin_mask"].i, node.attr["end_mask"].i
        kept = []
        for i, n in enumerate(shape):
            if i >= len(strides):
                kept.append((0, int(n), 1))
                continue
            b0 = None if bm >> i & 1 else int(np.ravel(begin[0])[i])
            e0 = None if em >> i & 1 else int(np.ravel(end[0])[i])
            idx = np.arange(int(n))[slice(b0, e0, int(strides[i]))]
            if idx.size == 0:
                return Reject(f"axis {i} keeps no element", node.name)
            kept.append((int(idx[0]), int(idx.size), int(strides[i])))
        m.extra.update(shape=[int(d) for d in shape], kept=kept)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        shape, kept = list(m.extra["shape"]), m.extra["kept"]
        rank = len(shape)
        x = m.inputs["x"]
        # unit-step cut of every axis to [b, b + s*m), zero-padded where it runs past the end
        begin = [k[0] for k in kept]
        size = [min(k[1] * k[2], n - k[0]) for k, n in zip(kept, shape, strict=True)]
        if begin != [0] * rank or size != shape:
            x = b.op("Slice", [x, b.const("cut_begin", begin, dtype=np.int32),
                               b.const("cut_size", size, dtype=np.int32)], "cut",
                     attrs={"Index": np.int32})
        pads = [[0, k[1] * k[2] - s] for k, s in zip(kept, size, strict=True)]
        if any(p[1] for p in pads):
            x = b.op("Pad", [x, b.const("pad", np.asarray(pads), dtype=np.int32)], "padded",
                     attrs={"Tpaddings": np.int32})
        current = [k[1] * k[2] for k in kept]
        for axis, (_, count, step) in enumerate(kept):
            if step == 1:
                continue
            outer = int(np.prod(current[:axis])) if axis else 1
            inner = int(np.prod(current[axis + 1:])) if axis + 1 < rank else 1
            view = [outer * count, step, inner]
            x = b.op("Reshape", [x, b.const(f"view_{axis}", view, dtype=np.int32)],
                     f"view_{axis}", attrs={"Tshape": np.int32})
            x = b.op("Slice", [x, b.const(f"first_{axis}", [0, 0, 0], dtype=np.int32),
                               b.const(f"firsts_{axis}", [outer * count, 1, inner],
                                       dtype=np.int32)], f"every_{step}_{axis}",
                     attrs={"Index": np.int32})
            current[axis] = count
            x = b.op("Reshape", [x, b.const(f"shape_{axis}", current, dtype=np.int32)],
                     f"kept_{axis}", attrs={"Tshape": np.int32})
        return x


RULES = (StridedSliceUnitSteps(),)
