"""ELU without Exp, for targets that have only Mul/Add/Min/Max/Relu (e.g. the Edge TPU).

``exp(t) ~= (1 + t / 2^n)^(2^n)`` by ``n`` squarings, applied to ``t = clip(x, -16, 0)``::

    ELU(x) ~= relu(x) + ((1 + clip(x, -16, 0) / 2^n)^(2^n) - 1)

With n = 8 the largest error of the power against exp over [-16, 0] is 1.06e-3 (fp64 on a
2,000,001-point grid, at t ~= -2); below -16 both sides are within 1.2e-7 of -1. So
``|approx - ELU| <= 1.1e-3`` for every real x (float32 rounding included; the test enforces it).
Keras 3 ``ELU(alpha)`` (a Select around ``Elu``) is matched whole and scaled by alpha; the bound
holds for |alpha| <= 1 (larger alphas are refused). The base ``1 + t/256`` stays in [0.9375, 1], so squaring never overflows or changes sign.
``min(x, 0)`` is ``x - relu(x)`` so the form quantizes (see :mod:`rewriter.rules.elu_exact`).
"""

from __future__ import annotations

import numpy as np

from rewriter.graph import GraphIndex
from rewriter.rules._elu import EluRule
from rewriter.rules.base import Bound, Builder, Match, Reject, dtype_of

SQUARINGS = 8
CLIP = -16.0


class EluNoExp(EluRule):
    """ELU(x) ~= relu(x) + (1 + clip(x, -16, 0)/256)^256 - 1, max abs error 1.1e-3."""

    name = "elu_no_exp"
    emits = frozenset({"Relu", "Sub", "Maximum", "Mul", "AddV2"})
    exact = False
    bound = Bound(1.1e-3, (float("-inf"), float("inf")),
                  "exp by 8 squarings of (1 + t/256) on t = clip(x, -16, 0)")

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        if dtype_of(m.root) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
        if abs(m.extra["alpha"]) > 1.0:
            return Reject(f"alpha {m.extra['alpha']:g} > 1 would scale the error past the "
                          "stated bound", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        pos = b.op("Relu", [x], "pos_part")
        t = b.op("Sub", [x, pos], "neg_part")  # min(x, 0) that quantizes, see elu_exact
        t = b.op("Maximum", [t, b.const("clip", CLIP)], "clipped")
        t = b.op("Mul", [t, b.const("inv_pow2", 2.0 ** -SQUARINGS)], "scaled")
        p = b.op("AddV2", [t, b.const("one", 1.0)], "base")
        for i in range(SQUARINGS):
            p = b.op("Mul", [p, p], f"square_{i}")
        em1 = b.op("AddV2", [p, b.const("minus_one", -1.0)], "exp_minus_one")
        if m.extra["alpha"] != 1.0:
            em1 = b.op("Mul", [em1, b.const("alpha", m.extra["alpha"])], "times_alpha")
        return b.op("AddV2", [pos, em1], "out")


RULES = (EluNoExp(),)
