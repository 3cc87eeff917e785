"""mirror_pad(x) = concat(reverse(left strip of x), x, reverse(right strip of x)), exact.

A REFLECT pad of ``p`` on an axis of size ``n`` puts ``x[p], ..., x[1]`` before ``x`` and
``x[n-2], ..., x[n-1-p]`` after it; SYMMETRIC puts ``x[p-1], ..., x[0]`` and
``x[n-1], ..., x[n-p]``. Each strip is a StridedSlice (strides 1) of ``x`` read backwards, and the
padded tensor is their ConcatV2 with ``x`` along the axis; several padded axes are padded one after
the other (the pad is separable). The Edge TPU has no MIRROR_PAD (Basic Pitch's CQT front end pads
its signal with ``[[0, 0], [0, 0], [128, 128]]`` REFLECT nine times and is cut there), and it
refuses REVERSE_V2 and strides other than 1, so the strip is reversed with ops it runs:

* on the last axis: a 1x1 CONV_2D whose ``[p, p]`` kernel is the anti-identity (``w[i, p-1-i] =
  1``): output channel ``j`` is input channel ``p-1-j``, a sum of one product by 1.0, exact in
  float and in int8 (weights 0 and 1 quantize exactly, per channel to 127 * (1/127));
* on another axis, when ``p <= SLICES_MAX``: the ConcatV2 of its ``p`` one-element slices in
  reverse order;
* on another axis with a longer strip: Transpose the axis last, the 1x1 CONV_2D, Transpose back.

Exact in float (data movement and products by 1.0); in int8 each strip and each concatenation
gets its own output scale, so an element may move by one int8 step of the output scale (tests
measure it).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, tensor_shape

#: Longest strip on a non-last axis reversed by one-element slices (longer: Transpose + conv).
SLICES_MAX = 8
MODES = {b"REFLECT": 1, b"SYMMETRIC": 0}  # offset of the strip from the edge


class MirrorPadAsSlices(Rule):
    """MirrorPad (REFLECT/SYMMETRIC) -> ConcatV2 of x and its edge strips reversed, exact."""

    name = "mirror_pad_as_slices"
    anchors = frozenset({"MirrorPad"})
    fixes = frozenset({"MirrorPad"})
    emits = frozenset({"StridedSlice", "ConcatV2", "Conv2D", "Reshape", "Transpose"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]},
                     extra={"paddings": node.input[1]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        mode = m.root.attr["mode"].s
        if mode not in MODES:
            return Reject(f"mode {mode.decode()} is neither REFLECT nor SYMMETRIC", m.root.name)
        if dtype_of(m.root) != np.float32:
            return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
        pads = g.const_value(m.extra["paddings"])
        if pads is None:
            return Reject("paddings are not a constant", m.root.name)
        shape = tensor_shape(g, m.inputs["x"])
        if shape is None or any(d is None for d in shape):
            return Reject(f"input shape {shape} is not static", m.root.name)
        pads = np.asarray(pads, np.int64).reshape(len(shape), 2)
        off = MODES[mode]
        for axis, (n, (lo, hi)) in enumerate(zip(shape, pads)):
            if lo < 0 or hi < 0 or max(lo, hi) > n - off:
                return Reject(f"padding {[int(lo), int(hi)]} on axis {axis} of size {n} is out "
                              f"of range for {mode.decode()}", m.root.name)
        m.extra.update(shape=[int(d) for d in shape], pads=pads.tolist(), off=off)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x, shape, off = m.inputs["x"], list(m.extra["shape"]), m.extra["off"]
        for axis, (lo, hi) in enumerate(m.extra["pads"]):
            if lo == 0 and hi == 0:
                continue
            n, parts = shape[axis], []
            if lo:
                strip = _slice(b, x, shape, axis, off, off + lo, f"a{axis}_left")
                parts.append(_reverse(b, strip, _with(shape, axis, lo), axis, f"a{axis}_left"))
            parts.append(x)
            if hi:
                strip = _slice(b, x, shape, axis, n - off - hi, n - off, f"a{axis}_right")
                parts.append(_reverse(b, strip, _with(shape, axis, hi), axis, f"a{axis}_right"))
            x = _concat(b, parts, axis, f"a{axis}_padded")
            shape = _with(shape, axis, n + lo + hi)
        return x


def _with(shape: list[int], axis: int, size: int) -> list[int]:
    return [size if i == axis else d for i, d in enumerate(shape)]


def _slice(b: Builder, x: str, shape: list[int], axis: int, start: int, stop: int,
           suffix: str) -> str:
    begin = [start if i == axis else 0 for i in range(len(shape))]
    end = [stop if i == axis else d for i, d in enumerate(shape)]
    return b.op("StridedSlice", [x, b.const(f"{suffix}_begin", begin, np.int32),
                                 b.const(f"{suffix}_end", end, np.int32),
                                 b.const(f"{suffix}_strides", np.ones(len(shape)), np.int32)],
                suffix, attrs={"Index": np.int32, "begin_mask": 0, "end_mask": 0,
                               "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0})


def _concat(b: Builder, parts: list[str], axis: int, suffix: str) -> str:
    if len(parts) == 1:
        return parts[0]
    return b.op("ConcatV2", [*parts, b.const(f"{suffix}_axis", axis, np.int32)], suffix,
                attrs={"N": len(parts), "Tidx": np.int32})


def _reverse(b: Builder, x: str, shape: list[int], axis: int, suffix: str) -> str:
    """``x`` read backwards along ``axis`` (size ``shape[axis]``), without REVERSE_V2."""
    p, rank = shape[axis], len(shape)
    if p == 1:
        return x
    last = axis == rank - 1
    if not last and p <= SLICES_MAX:
        items = [_slice(b, x, shape, axis, i, i + 1, f"{suffix}_{i}") for i in range(p)]
        return _concat(b, items[::-1], axis, f"{suffix}_reversed")
    perm = list(range(rank))
    if not last:
        perm[axis], perm[-1] = perm[-1], perm[axis]
        x = b.op("Transpose", [x, b.const(f"{suffix}_perm", perm, np.int32)],
                 f"{suffix}_to_last", attrs={"Tperm": np.int32})
    moved = [shape[i] for i in perm]
    y = x
    if rank != 4:
        flat = [1] * (4 - rank) + moved if rank < 4 else [1, int(np.prod(moved[:-1])), 1, p]
        y = b.op("Reshape", [y, b.const(f"{suffix}_shape4", flat, np.int32)], f"{suffix}_rank4",
                 attrs={"Tshape": np.int32})
    kernel = np.eye(p)[::-1].reshape(1, 1, p, p)  # output channel j = input channel p-1-j
    y = b.op("Conv2D", [y, b.const(f"{suffix}_antidiagonal", kernel)], f"{suffix}_flip",
             attrs={"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
                    "dilations": [1, 1, 1, 1]})
    if rank != 4:
        y = b.op("Reshape", [y, b.const(f"{suffix}_shape", moved, np.int32)], f"{suffix}_back",
                 attrs={"Tshape": np.int32})
    if not last:
        y = b.op("Transpose", [y, b.const(f"{suffix}_perm_back", perm, np.int32)],
                 f"{suffix}_from_last", attrs={"Tperm": np.int32})
    return y


RULES = (MirrorPadAsSlices(),)
