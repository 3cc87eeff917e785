"""An attention mask before a softmax, ``softmax(where(c, x, M))`` with a constant condition
``c`` and a mask value ``M`` (Keras's ``-0.7 * float32.max``, ``-1e9``, ``-inf``): the mask value
clamped to one the softmax cannot tell apart, then selected by arithmetic, exact.

``where(c, x, M) -> x * c + (1 - c) * M'`` with ``c`` as 0/1 floats (MUL and ADD with constant
operands, which every int8 target runs) and ``M' = lo - K``: ``lo`` the smallest value ``x``
takes on the calibration data (widened by 10% of its range), ``K = 17 + ln(n)`` for rows of ``n``
elements. Why it is exact: a softmax row is unchanged by a shift, and its largest unmasked score
is at least ``lo``, so each masked entry's weight is at most ``exp(-K)``, all of them together at
most ``n * exp(-K) = exp(-17) = 4.1e-8``, below float32's half ulp at 1 (``2**-24 = 6.0e-8``):
every unmasked weight keeps its float32 value up to rounding and every masked one stays below
``4.1e-8 / n`` where the original has 0. A fully masked row is uniform in both. The statement
holds for inputs whose rows' largest unmasked score is at least ``lo`` (the calibration data's
range, as for every rule fitted on it); the rule refuses without calibration data.

Why it matters: the int8 quantizer crashes on Keras's mask constant (``MultiHeadAttention(...,
use_causal_mask=True)``: ``-2.37e38``), a ``-1e9`` makes the int8 scale of the scores 4e6 (every
score then quantizes to 0), and SELECT_V2 runs on neither the Edge TPU nor the Ethos-U55. The
clamp keeps the quantized scores' range within ``K`` of the data's (cf. ExecuTorch's
``replace_inf_and_limit_values`` pass, which maps such limits to +-255 without a statement).
A mask value that is not below ``M'`` is not a mask (the rule refuses it, naming the value).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.ir.ranges import observed_range
from rewriter.rules._unary import MARGIN  # the calibration range's widening, as for the fits
from rewriter.rules.base import (
    Builder,
    Match,
    Reject,
    Rule,
    dtype_of,
    producer_op,
    static_value,
    tensor_shape,
)

#: ``exp(-GAP)`` is the masked rows' total weight bound: ``exp(-17) = 4.1e-8 < 2**-24``.
GAP = 17.0


def mask_gap(n: int) -> float:
    """``K``: how far below the scores' minimum the mask value goes for rows of ``n``."""
    return GAP + math.log(max(n, 1))


def mask_placement_reject(g: GraphIndex, m: Match) -> Reject | None:
    """Why the mask value ``M'`` cannot be placed for the match of a select (``m.nodes[1]``) of
    scores ``m.inputs["x"]`` and mask ``m.consts["mask"]`` before a softmax: the select is not
    float32, its last axis is not static, no samples, or the model's mask value is not below
    ``M'``; else None, with ``m.extra["placed"] = M'`` (``lo - K``, ``lo`` the scores'
    calibration minimum widened by :data:`MARGIN`). Shared with :mod:`softmax_mask_compare`."""
    select, x, mask = m.nodes[1], m.inputs["x"], m.consts["mask"]
    if dtype_of(select) != np.dtype(np.float32):
        return Reject(f"dtype {dtype_of(select)} is not float32", select.name)
    shape = tensor_shape(g, select.name)
    if shape is None or not shape or shape[-1] is None:
        return Reject(f"output shape {shape} has no static last axis", select.name)
    seen = observed_range(g, x)
    if seen is None:
        return Reject(f"no observed range for {x}: the mask value is placed below the "
                      "scores' calibration range (the job passes its samples)", select.name)
    lo = seen.lo - MARGIN * (seen.hi - seen.lo)
    placed = lo - mask_gap(int(shape[-1]))
    worst = float(np.max(mask))
    if worst > placed:
        return Reject(f"mask value {worst:.4g} is not below {placed:.4g} (the scores' "
                      f"calibration minimum {seen.lo:.4g} less {mask_gap(int(shape[-1])):.3g})"
                      ": not a mask", select.name)
    m.extra["placed"] = placed
    return None


class SoftmaxMaskSelect(Rule):
    """softmax(where(c, x, M)) = softmax(x*c + (1-c)*M'), M' = lo - 17 - ln n; c const; exact.

    The root is the Softmax (the select's output differs where the softmax cannot see it, so it
    is not kept under its name for the per-node comparison); the Softmax is rebuilt as is.
    """

    name = "softmax_mask_select"
    anchors = frozenset({"Softmax"})
    fixes = frozenset({"Select", "SelectV2"})
    emits = frozenset({"Mul", "AddV2", "Softmax"})
    exact = True
    family = "softmax_mask"
    order = 90  # before softmax_rows splits the scores' rows apart

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        select = producer_op(g, node.input[0], ("Select", "SelectV2"))
        ins = data_inputs(select) if select is not None else []
        if len(ins) != 3:
            return None
        cond = static_value(g, ins[0])
        if cond is None:
            return None
        for const_at, x_at in ((2, 1), (1, 2)):
            mask = static_value(g, ins[const_at])
            if mask is not None and static_value(g, ins[x_at]) is None:
                keep = np.asarray(cond[0], bool) if x_at == 1 else ~np.asarray(cond[0], bool)
                return Match(root=node, nodes=[node, select], inputs={"x": ins[x_at]},
                             consts={"keep": keep, "mask": np.asarray(mask[0], np.float64)})
        return None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        return mask_placement_reject(g, m)

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        keep = m.consts["keep"].astype(np.float64)
        scale = b.const("keep", keep)
        offset = b.const("masked", (1.0 - keep) * m.extra["placed"])
        scores = b.op("AddV2", [b.op("Mul", [m.inputs["x"], scale], "select"), offset], "masked")
        return b.op("Softmax", [scores], "softmax")


RULES = (SoftmaxMaskSelect(),)
