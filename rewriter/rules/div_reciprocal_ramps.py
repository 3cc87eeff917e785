"""x / y = x * (1/y), with 1/y fitted by ramps on the range the divisor takes; approximate.

A division by a tensor computed from the data (a per-clip normalisation ``(x - min) / (max -
min)``, Basic Pitch's ``div_no_nan``) is a DIV the Edge TPU does not run and Vela puts on the
CPU; ``div_no_nan`` adds EQUAL and SELECT_V2 for the ``y == 0`` case. When the divisor's observed
range on the calibration data does not contain 0, ``1/y`` is a smooth function there: it is
fitted as a sum of clamped ramps (:mod:`rewriter.rules._unary`: CONV_2D, RELU6, RESHAPE, ADD,
all int8 on every accelerator) on that range widened by its own width each side (at most halfway to
0) and multiplied in. ``div_no_nan``'s 0 for ``y == 0`` is not kept: the fitted range excludes 0, and
the report states the range the bound holds on.

Bound per application: ``|x * r(y) - x / y| <= max|x| * max|r - 1/y|``, with ``max|x|`` the
largest magnitude the dividend takes on the calibration data (widened by the same 10%) and the
second factor the fit's own bound; the note names both ranges. Refused when the divisor's range
contains 0 or is not measured, or when the divisor is a constant (the converter already turns
that into a MUL).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.ir.ranges import observed_range
from rewriter.rules._unary import (
    NOMINAL_BOUND,
    RAMP_OPS,
    UnaryFunction,
    build_ramps,
    fit_ramps,
)
from rewriter.rules.base import Bound, Builder, Match, Reject, Rule, dtype_of, tensor_shape

#: The divisor's and the dividend's observed ranges are widened by this fraction of their width
#: on each side (the divisor's at most halfway to 0): a per-clip normaliser's divisor over a few
#: calibration clips is narrower than over others (Basic Pitch: [89.5, 105.3] dB over 16
#: calibration clips, [86.9, 111.2] over 32 held-back ones), and outside the fit the ramps are
#: flat. 1/y is smooth away from 0, so the wider fit costs ramps, not accuracy.
DIVISOR_MARGIN = 1.0


class DivReciprocalRamps(Rule):
    """x / y ~= x * r(y), r fitted to 1/y on y's observed range (which excludes 0)."""

    name = "div_reciprocal_ramps"
    anchors = frozenset({"RealDiv", "DivNoNan"})
    fixes = frozenset({"RealDiv", "DivNoNan"})
    emits = RAMP_OPS | {"Mul"}
    exact = False
    needs_range = True
    targeted = True  # only the divisions the target refuses
    order = 200
    priority = 1  # where elementwise_ramps also fits (a constant divisor in a region), it goes first
    bound = Bound(NOMINAL_BOUND, (-math.inf, math.inf),
                  "fitted per match on the calibration data's range of the divisor; each "
                  "application states its own bound")

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        refs = [r for r in node.input if not r.startswith("^")]
        if len(refs) != 2:
            return None
        return Match(root=node, nodes=[node], inputs={"x": refs[0], "y": refs[1]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        if dtype_of(m.root) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
        y = m.inputs["y"]
        if g.const_value(y) is not None:
            return Reject("the divisor is a constant (the converter makes it a MUL)",
                          m.root.name)
        shape = tensor_shape(g, y)
        if not shape or any(d is None or d < 1 for d in shape):
            return Reject(f"divisor {y} has no static shape ({shape})", m.root.name)
        seen, seen_x = observed_range(g, y), observed_range(g, m.inputs["x"])
        if seen is None or seen_x is None:
            return Reject(f"no observed range for {y}: the fit needs calibration data "
                          "(the job passes its calibration samples)", m.root.name)
        if seen.lo <= 0.0 <= seen.hi:
            return Reject(f"the divisor's observed range [{seen.lo:.4g}, {seen.hi:.4g}] "
                          "contains 0", m.root.name)
        positive = seen.lo > 0
        fn = UnaryFunction("1/y", lambda v: 1.0 / v, 0.0, 0.0,
                           (0.0, math.inf) if positive else (-math.inf, 0.0), (0.0,))
        fit = fit_ramps(fn, seen.lo, seen.hi, margin=DIVISOR_MARGIN)
        if isinstance(fit, str):
            return Reject(fit, m.root.name)
        width = seen_x.hi - seen_x.lo
        x_max = max(abs(seen_x.lo - DIVISOR_MARGIN * width),
                    abs(seen_x.hi + DIVISOR_MARGIN * width))
        m.extra.update(fit=fit, shape=tuple(int(d) for d in shape))
        m.bound = Bound(x_max * fit.max_abs_error, fit.fit_range,
                        f"{fit.segments} ramps fitted to 1/y on [{seen.lo:.4g}, {seen.hi:.4g}], "
                        f"the range of the divisor {y} over {seen.samples} calibration samples "
                        f"(widened by {DIVISOR_MARGIN:.0%} of its width each side, at most halfway to 0; 1/y within {fit.max_abs_error:.3g}), times "
                        f"|x| <= {x_max:.4g} (the dividend's range, widened alike); the bound "
                        "is in the input range of the divisor")
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        r = build_ramps(b, m.inputs["y"], m.extra["shape"], m.extra["fit"])
        return b.op("Mul", [m.inputs["x"], r], "product")


RULES = (DivReciprocalRamps(),)
