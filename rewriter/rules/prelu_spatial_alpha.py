"""PReLU with a per-position alpha (Keras ``PReLU`` on 4-D input with default ``shared_axes``):
alpha ``[H, W, C]`` made fit the Edge TPU's PRELU limit (a 1-D alpha), exactly.

Keras 3 and tf_keras lower PReLU to ``AddV2(Relu(x), Mul(-alpha, Relu(Neg(x))))``, which the
TFLite converter fuses into one PRELU whose alpha keeps the layer's shape (TF 2.21, checked by
conversion); the Edge TPU table maps PRELU only when alpha is 1-D (coral.ai models-intro,
"Supported operations"). Two exact forms:

* alpha the same at every spatial position (a trained layer that ended up shared, or one
  built with a partial ``shared_axes``): the same pattern with alpha stored as ``[1, .., 1, C]``
  (rank of x minus one, the shape the converter fuses); the converter emits one PRELU with a
  1-D alpha. Same values, same arithmetic: bitwise equal in float.
* otherwise ``relu(x) + alpha * (x - relu(x))``: RELU, SUB, MUL by a constant ``[H, W, C]``
  (3 non-1 innermost dims, within the Edge TPU's broadcast limit), ADD. ``x - relu(x)`` is
  ``min(x, 0)`` exactly (``x - x`` or ``x - 0``); for x >= 0 the sum is ``x + alpha * 0 = x``,
  for x < 0 it is ``0 + alpha * x``, and the original computes ``(-alpha) * (-x)``, the same
  product (negation is exact in IEEE float): bitwise equal. (``min(x, 0)`` as a MINIMUM
  quantizes badly: TF 2.21 gives MINIMUM's input, output and zero constant one scale, which
  the calibration then took from the MUL after it, clipping x at about 2.25 for x in [-4, 4].)
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.ir.patterns import find_prelu
from rewriter.rules._activation import float_dtype_reason, static_rank
from rewriter.rules.base import Builder, Match, Reject, Rule


def match_prelu(g: GraphIndex, node: NodeDef) -> Match | None:
    """``Add(Relu(x), Mul(c, Relu(Neg(x))))`` with a constant ``c`` (= -alpha), either order."""
    p = find_prelu(g, node)
    if p is None:
        return None
    return Match(root=node, nodes=p.nodes, inputs={"x": p.x},
                 extra={"neg_alpha": p.neg_alpha, "alpha_ref": p.alpha_ref})


class PreluSpatialAlpha(Rule):
    """PReLU with alpha [H, W, C]: 1-D alpha when spatially constant, else relu + alpha*(x-relu)."""

    name = "prelu_spatial_alpha"
    anchors = frozenset({"AddV2", "Add"})
    fixes = frozenset({"AddV2", "Add"})
    emits = frozenset({"Relu", "Neg", "Sub", "Mul", "AddV2"})
    #: The converter fuses the 1-D form into PRELU and keeps the other as RELU/SUB/MUL/ADD.
    fused = {"tflite": frozenset({"PRELU", "RELU", "SUB", "MUL", "ADD"})}
    exact = True
    family = "prelu"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return match_prelu(g, node)

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        if reason:
            return Reject(reason, m.root.name)
        c = m.extra["neg_alpha"]
        rank = static_rank(g, m.inputs["x"])
        if rank is None or c.ndim != rank - 1 or rank < 3:
            return Reject(f"alpha {list(c.shape)} is not per position of an input of rank "
                          f"{rank} (the converter fuses only alpha of rank(x) - 1)", m.root.name)
        if all(d == 1 for d in c.shape[:-1]):
            return Reject(f"alpha {list(c.shape)} is already 1-D (one value per channel)",
                          m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x, c = m.inputs["x"], m.extra["neg_alpha"].astype(b.dtype)
        per_channel = c.reshape(-1, c.shape[-1])
        if np.all(per_channel == per_channel[:1]):  # the same alpha at every position
            c1 = b.const("neg_alpha", per_channel[:1].reshape([1] * (c.ndim - 1) + [-1]))
            neg = b.op("Relu", [b.op("Neg", [x], "neg")], "neg_relu")
            return b.op("AddV2", [b.op("Relu", [x], "relu"), b.op("Mul", [c1, neg], "neg_part")],
                        "out")
        pos = b.op("Relu", [x], "relu")
        low = b.op("Sub", [x, pos], "min0")  # min(x, 0), exactly: x - x or x - 0
        return b.op("AddV2", [pos, b.op("Mul", [low, b.const("alpha", -c)], "neg_part")], "out")


RULES = (PreluSpatialAlpha(),)
