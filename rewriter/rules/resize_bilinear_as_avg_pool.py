"""An integer-factor bilinear downscale as slices and average pools, exact.

``ResizeBilinear`` from ``[H, W]`` to ``[H/f, W/f]`` (per axis, ``f`` an integer) samples the
input at ``f*i + (f-1)/2`` with ``half_pixel_centers=True, align_corners=False`` (TF2's and Keras
3's ``Resizing``/``image.resize`` default): for odd ``f`` that is the pixel ``f*i + (f-1)/2``, for
even ``f`` the mean of the pixels ``f*i + f/2 - 1`` and ``f*i + f/2`` (both lerp weights 1/2). With
``half_pixel_centers=False, align_corners=False`` (TF1's legacy resize) it samples ``f*i``: the
pixel itself. So the output is a SLICE from that first pixel, then an AVG_POOL of kernel 2 (even
``f``, half-pixel) or 1, stride ``f``; strides above 3 (Ethos-U's pooling limit) are chained
(kernel 2 stride 2, then kernel-1 pools of stride 2 or 3), so ``f`` must factor into 2s and 3s.
Exact up to float32 rounding (the mean of two values instead of ``a + (b - a) * 0.5``).
``align_corners=True`` samples at ``i * (H - 1)/(H/f - 1)``, not an integer grid: refused.

Ethos-U55 runs RESIZE_BILINEAR only as an upscale (Vela: 1x/2x/4x/8x); a downscale goes to the CPU
where ``check`` used to say nothing (the table now states Vela's scale constraint).
Cf. ExecuTorch's ``decompose_unsupported_bilinear_resize_pass`` (bilinear downscale as an average
pool, no statement of which centre convention it holds for).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, static_value, tensor_shape


def _strides(f: int) -> list[int] | None:
    """``f`` as a product of pooling strides of at most 3 (None when it has another factor)."""
    out = []
    while f > 3:
        for s in (2, 3):
            if f % s == 0:
                out.append(s)
                f //= s
                break
        else:
            return None
    return [*out, f] if f > 1 else out


class ResizeBilinearAsAvgPool(Rule):
    """resize_bilinear(x, [H/f, W/f]) = avg_pool(slice(x, first pixel), k in {1, 2}, stride f)."""

    name = "resize_bilinear_as_avg_pool"
    anchors = frozenset({"ResizeBilinear"})
    fixes = frozenset({"ResizeBilinear"})
    emits = frozenset({"Slice", "AvgPool"})
    exact = True
    family = "resize_bilinear"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = data_inputs(node)
        return Match(root=node, nodes=[node], inputs={"x": ins[0], "size": ins[1]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        if node.attr["align_corners"].b:
            return Reject("align_corners=True samples off the integer grid", node.name)
        a, b = tensor_shape(g, m.inputs["x"]), tensor_shape(g, node.name)
        if a is None or b is None or len(a) != 4 or None in (*a[1:], *b[1:]):
            return Reject(f"shapes {a} -> {b} are not static rank 4", node.name)
        if static_value(g, m.inputs["size"]) is None:
            return Reject("the output size is not a constant", node.name)
        axes = []
        for i, o in ((a[1], b[1]), (a[2], b[2])):
            if o > i or i % o:
                return Reject(f"{list(a)} -> {list(b)} is not an integer-factor downscale",
                              node.name)
            f = i // o
            if _strides(f) is None:
                return Reject(f"factor {f} is not a product of pooling strides 2 and 3",
                              node.name)
            half = node.attr["half_pixel_centers"].b
            kernel = 2 if half and f % 2 == 0 else 1
            first = (f // 2 - 1 if f % 2 == 0 else (f - 1) // 2) if half else 0
            axes.append((f, kernel, first, o))
        m.extra["axes"] = axes
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        (fh, kh, oh, nh), (fw, kw, ow, nw) = m.extra["axes"]
        begin = b.const("begin", [0, oh, ow, 0], np.int32)
        size = b.const("size", [-1, fh * (nh - 1) + kh, fw * (nw - 1) + kw, -1], np.int32)
        x = b.op("Slice", [m.inputs["x"], begin, size], "window", attrs={"Index": np.int32})
        sh, sw = _strides(fh) or [1], _strides(fw) or [1]
        steps = max(len(sh), len(sw))
        sh, sw = sh + [1] * (steps - len(sh)), sw + [1] * (steps - len(sw))
        for n, (s1, s2) in enumerate(zip(sh, sw, strict=True)):
            k1, k2 = (kh, kw) if n == 0 else (1, 1)
            x = b.op("AvgPool", [x], f"pool{n}", attrs={
                "ksize": [1, k1, k2, 1], "strides": [1, s1, s2, 1], "padding": "VALID",
                "data_format": "NHWC"})
        return x


RULES = (ResizeBilinearAsAvgPool(),)
