"""A data-dependent mask before a softmax, ``softmax(where(c, x, M))`` where the condition ``c``
comes from the data (``h > 0.5``, or a 0/1 mask input cast to bool, as in Keras's
``MultiHeadAttention(..., attention_mask=m)``) and ``M`` is a mask value (``-1e9``, Keras's
``-0.7 * float32.max``, ``-inf``): the select done by arithmetic with ops every int8 target runs.

``where(c, x, M) -> x + d * (M' - x)`` with ``d`` the 0/1 "dropped" indicator built from ``c``
without a comparison op (the Edge TPU and the Ethos-U55 run neither GREATER nor SELECT_V2):

* ``a > t`` (``>=``, ``<``, ``<=`` alike): ``d = relu6(G2 * relu6(G1 * relu(t' - a))) / 6``, two
  saturating gains ``G1 * G2 = 6 / w``. ``d`` is 1 for ``a <= t' - w`` and 0 for ``a >= t'``
  (``t'`` is ``t`` moved one float32 step to the dropping side for the strict compares, so that
  ``a == t`` drops for ``>`` as it does in the original);
* a 0/1 mask ``m`` cast to bool: ``d = 1 - m``; through ExpandDims, and LogicalAnd with a constant
  condition (Keras's causal mask or its all-true ``ones_like``): ``d = 1 - k (1 - d')``.

``M' = lo - K`` as in :mod:`softmax_mask_select` (``lo`` the scores' calibration minimum widened by
10%, ``K = 17 + ln n``): each masked weight is below ``exp(-K)``, all of them below
``exp(-17) = 4.1e-8``, under float32's half ulp at 1; a fully masked row is uniform in both.

Exactness, stated: the same softmax up to float32 rounding (masked weights below ``4.1e-8 / n``)
for every input whose compared value ``a`` is not in the window ``(t' - w, t')`` with ``w =
max(ulp(t'), 2**-30 * scale)`` (``ulp(t')`` the step from ``t'`` to its neighbour on the dropping side), ``scale = max(|lo_a|, |hi_a|, |t|, 1)`` on the calibration data.
Where ``|t| >= 2**-7 * scale`` (``h > 0.5`` on scores of scale up to 64) ``w`` is the threshold's
own float32 step, so no float32 ``a`` falls inside: exact for every input. Otherwise a score whose
``a`` is within ``2**-30 * scale`` below the threshold is partly masked. Masks must hold only 0 and
1 (checked on the
calibration data: a mask outside [0, 1] is refused). The rule refuses without calibration data.
In int8 the window is below one quantization step of ``a``, so the int8 file compares as exactly as
an int8 comparison could (``G1`` saturates on the first nonzero step of ``relu(t' - a)``).

Cf. ExecuTorch's ``replace_inf_and_limit_values`` (limits to +-255, no statement) and its
``convert_any_default_dim_dims`` / ``where`` handling on Arm, which keep SELECT as a TOSA op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.ir.ranges import observed_range
from rewriter.rules.base import (
    Builder,
    Match,
    Reject,
    Rule,
    dtype_of,
    producer_op,
    static_value,
)
from rewriter.rules.softmax_mask_select import mask_placement_reject

#: The smallest window relative to the compared values' scale (used where the threshold's own
#: float32 step is smaller, i.e. ``|t| < 2**-7 * scale``).
WINDOW = 2.0 ** -30
COMPARES = {"Greater": (1, True), "GreaterEqual": (1, False), "Less": (-1, True),
            "LessEqual": (-1, False)}  # op -> (kept side: +1 above t / -1 below, strict)


@dataclass
class _Cond:
    """How the 'dropped' indicator is built: kind 'compare' (a, t, side, strict), 'mask' (m),
    'expand' (child, dim ref), 'and' (const keep k, child)."""

    kind: str
    ref: str = ""
    t: float = 0.0
    side: int = 1
    strict: bool = True
    child: _Cond | None = None
    keep: np.ndarray | None = None
    dim: str = ""
    tdim: object = None  # the ExpandDims' Tdim attr
    w: float = 0.0  # the window's floor (WINDOW * scale), set by the check


def _parse(g: GraphIndex, ref: str, nodes: list[NodeDef], depth: int = 0) -> _Cond | None:
    if depth > 4:
        return None
    node = producer_op(g, ref, ("Greater", "GreaterEqual", "Less", "LessEqual", "Cast",
                                "ExpandDims", "LogicalAnd"))
    if node is None:
        return None
    ins = data_inputs(node)
    if node.op in COMPARES:
        side, strict = COMPARES[node.op]
        for a_at, t_at, flip in ((0, 1, 1), (1, 0, -1)):
            t = static_value(g, ins[t_at])
            if t is not None and np.size(t[0]) == 1 and static_value(g, ins[a_at]) is None:
                nodes.append(node)
                return _Cond("compare", ins[a_at], float(np.reshape(t[0], ())), side * flip,
                             strict)
        return None
    if node.op == "Cast":
        if node.attr["DstT"].type != 10 or static_value(g, ins[0]) is not None:  # DT_BOOL
            return None
        nodes.append(node)
        return _Cond("mask", ins[0])
    if node.op == "ExpandDims":
        child = _parse(g, ins[0], nodes, depth + 1)
        if child is None:
            return None
        nodes.append(node)
        return _Cond("expand", child=child, dim=ins[1], tdim=node.attr["Tdim"])
    for k_at, c_at in ((0, 1), (1, 0)):  # LogicalAnd with one constant side
        k = static_value(g, ins[k_at])
        if k is not None:
            child = _parse(g, ins[c_at], nodes, depth + 1)
            if child is None:
                return None
            nodes.append(node)
            return _Cond("and", child=child, keep=np.asarray(k[0], bool))
    return None


def _leaves(c: _Cond) -> list[_Cond]:
    return [c] if c.child is None else _leaves(c.child)


class SoftmaxMaskCompare(Rule):
    """softmax(where(c(a), x, M)) = softmax(x + d (M' - x)), d = 0/1 'dropped' from saturating
    gains (no compare op); exact (see the module docstring for the window)."""

    name = "softmax_mask_compare"
    anchors = frozenset({"Softmax"})
    fixes = frozenset({"Select", "SelectV2", "Greater", "GreaterEqual", "Less", "LessEqual",
                       "Cast", "LogicalAnd"})
    emits = frozenset({"Mul", "AddV2", "Sub", "Relu", "Relu6", "ExpandDims", "Softmax"})
    exact = True
    family = "softmax_mask_compare"
    order = 89  # before softmax_rows splits the scores' rows apart

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        select = producer_op(g, node.input[0], ("Select", "SelectV2"))
        ins = data_inputs(select) if select is not None else []
        if len(ins) != 3 or static_value(g, ins[0]) is not None:
            return None
        for const_at, x_at in ((2, 1), (1, 2)):
            mask = static_value(g, ins[const_at])
            if mask is None or static_value(g, ins[x_at]) is not None:
                continue
            inner: list[NodeDef] = []
            cond = _parse(g, ins[0], inner)
            if cond is None:
                return None
            return Match(root=node, nodes=[node, select, *inner], inputs={"x": ins[x_at]},
                         consts={"mask": np.asarray(mask[0], np.float64)},
                         extra={"cond": cond, "invert": x_at == 2})
        return None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        select = m.nodes[1]
        refused = mask_placement_reject(g, m)  # sets m.extra["placed"]
        if refused is not None:
            return refused
        for leaf in _leaves(m.extra["cond"]):
            what = observed_range(g, leaf.ref)
            if what is None:
                return Reject(f"no observed range for {leaf.ref}", select.name)
            if leaf.kind == "mask":
                if dtype_of(g.producer(leaf.ref)) != np.dtype(np.float32):
                    return Reject(f"the mask {leaf.ref} is {dtype_of(g.producer(leaf.ref))}, "
                                  "not float32: int8 targets take numeric inputs; give the model"
                                  " a float 0/1 mask input", select.name)
                if what.lo < 0 or what.hi > 1:
                    return Reject(f"the mask {leaf.ref} takes [{what.lo:.4g}, {what.hi:.4g}] on "
                                  "the calibration data, not 0/1", select.name)
            else:
                leaf.w = WINDOW * max(abs(what.lo), abs(what.hi), abs(leaf.t), 1.0)
        return None

    def _dropped(self, b: Builder, c: _Cond) -> str:
        if c.kind == "mask":
            return b.op("AddV2", [b.op("Mul", [c.ref, b.const("minus_one", -1.0)], "neg_mask"),
                                  b.const("one", 1.0)], "dropped")
        if c.kind == "expand":
            return b.op("ExpandDims", [self._dropped(b, c.child), c.dim], "expand",
                        attrs={"Tdim": c.tdim})
        if c.kind == "and":
            k = c.keep.astype(np.float64)
            inner = b.op("Mul", [self._dropped(b, c.child), b.const("keep", k)], "and_keep")
            return b.op("AddV2", [inner, b.const("const_dropped", 1.0 - k)], "and")
        t = np.float32(c.t)
        if c.strict:  # the compare's own threshold value drops: move t' one step that way
            t = np.nextafter(t, np.float32(np.inf * c.side))
        # the smallest r of a dropped float32 a is t' - its neighbour on the dropping side
        w = max(float(abs(t - np.nextafter(t, np.float32(-np.inf * c.side)))), c.w)
        # r = relu(side * (t' - a)) >= 0, > 0 exactly where the original drops
        r = b.op("Relu", [b.op("AddV2", [b.op("Mul", [c.ref, b.const("side", -c.side)], "flip"),
                                         b.const("threshold", c.side * float(t))], "gap")], "r")
        gain = math.sqrt(6.0 / w * (1 + 1e-3))  # r >= w saturates despite float32 rounding
        s1 = b.op("Relu6", [b.op("Mul", [r, b.const("gain1", gain)], "g1")], "sat1")
        s2 = b.op("Relu6", [b.op("Mul", [s1, b.const("gain2", gain)], "g2")], "sat2")
        return b.op("Mul", [s2, b.const("sixth", 1.0 / 6.0)], "dropped")

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        d = self._dropped(b, m.extra["cond"])
        if m.extra["invert"]:  # where(c, M, x): x is kept where c is false
            d = b.op("AddV2", [b.op("Mul", [d, b.const("minus_one", -1.0)], "inv"),
                               b.const("one", 1.0)], "kept_inverted")
        x = m.inputs["x"]
        towards = b.op("AddV2", [b.op("Mul", [x, b.const("minus_one", -1.0)], "neg_x"),
                                 b.const("placed", m.extra["placed"])], "towards")
        scores = b.op("AddV2", [x, b.op("Mul", [d, towards], "drop")], "masked")
        return b.op("Softmax", [scores], "softmax")


RULES = (SoftmaxMaskCompare(),)
