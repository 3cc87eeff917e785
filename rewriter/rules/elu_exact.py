"""ELU as ``relu(x) + (exp(min(x, 0)) - 1)``: exact, for targets that have Exp but not ELU.

For x > 0 the second term is exp(0) - 1 = 0, and for x <= 0 relu(x) = 0, so the sum is ELU with
alpha = 1. TF's ``Elu`` op has no alpha; Keras 3 ``ELU(alpha)`` freezes as
``SelectV2(Greater(x, 0), Elu(x), alpha * Elu(x))``, matched whole: the second term times alpha.

The int8-friendly form: ``min(x, 0)`` is computed as ``x - relu(x)`` (exact in float: x - x = 0
for x > 0). A ``Minimum(x, 0)`` would make the TFLite quantizer give x the output range of the
Minimum ([lo, 0]: MINIMUM needs equal input/output scales), clipping the positive half that
``relu(x)`` reads: measured, an int8 conv+ELU then had relative error 1.0. With Sub every op
quantizes (QUANTIZE, CONV_2D, RELU, SUB, EXP, ADD, ADD all int8), whereas ELU itself stays float
(DEQUANTIZE -> ELU) in full-int8 conversion.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.rules._elu import EluRule
from rewriter.rules.base import Builder, Match, Reject, dtype_of


class EluExact(EluRule):
    """ELU(x) = relu(x) + (exp(x - relu(x)) - 1), exact."""

    name = "elu_exact"
    emits = frozenset({"Relu", "Sub", "Exp", "AddV2", "Mul"})
    exact = True

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        dt = dtype_of(m.root)
        if dt not in (np.dtype(np.float32), np.dtype(np.float16)):
            return Reject(f"dtype {dt} is not float32/float16", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        pos = b.op("Relu", [x], "pos_part")
        neg = b.op("Sub", [x, pos], "neg_part")  # = min(x, 0), see module docstring
        exp = b.op("Exp", [neg], "exp")
        em1 = b.op("AddV2", [exp, b.const("minus_one", -1.0)], "exp_minus_one")
        if m.extra["alpha"] != 1.0:
            em1 = b.op("Mul", [em1, b.const("alpha", m.extra["alpha"])], "times_alpha")
        return b.op("AddV2", [pos, em1], "out")


RULES = (EluExact(),)
