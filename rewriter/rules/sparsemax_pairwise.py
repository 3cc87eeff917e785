"""Sparsemax over the last axis without a sort: pairwise comparisons as 1x1 convolutions.

``sparsemax(x) = max(x - tau, 0)``. The frozen Keras 3 form sorts (TopKV2), takes a cumulative
sum (Cumsum), tests the support ``1 + k z_(k) > S_k`` (z sorted descending, S its cumulative
sum) and divides by the support's size K; no int8 accelerator here runs TOPK_V2 or CUMSUM. The
same quantities without a sort, for element i of C: its rank ``k_i = 1 + sum_j [x_j > x_i]``
and the cumulative sum at that rank ``S_i = x_i + sum_j [x_j > x_i] x_j``, from the C(C-1)
pairwise differences ``x_j - x_i`` (one 1x1 convolution); the support ``s_i = [1 + k_i x_i >
S_i]``; ``tau = (sum_i s_i S_i - 1) / K`` (what Keras 3.15 computes, keras-team/keras#23425) or
``(sum_i s_i x_i - 1) / K`` (the textbook form of Martins & Astudillo 2016), whichever the
subgraph computes on the calibration samples; ``1/K`` on [1, C] by fitted ramps
(:mod:`rewriter.rules._unary`). Built from CONV_2D, RELU6, MUL, ADD, SUB, RELU and RESHAPE.

Approximate: each comparison ``[x_j > x_i]`` is the ramp ``clip(1/2 + (x_j - x_i) / w, 0, 1)``
(RELU6 of a scaled convolution; a tie counts half each way, so ranks and the sums over a tied
pair stay consistent, as a sort's would be), the support test ``clip(q / w2, 0, 1)``; ``w`` is
1/16384 of the observed width of x, ``w2`` of ``q = 1 + k x - S``. The result is the function's
except within ``w`` of a tie or ``w2`` of the support's edge (where Keras 3's tau jumps); in
int8 the ramps are steps at the quantized difference. The stated bound is measured: the replacement in
float64 against the subgraph's own output on the calibration samples, plus the 1/K fit's error
times the largest ``|sum - 1|``. At most :data:`MAX_CHANNELS` channels (C(C-1) comparisons).
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.ir.ranges import sample_values
from rewriter.rules._activation import FloatRule, same_tensor, scalar_const
from rewriter.rules._unary import (
    RAMP_OPS,
    UnaryFunction,
    build_ramps,
    fit_ramps,
    float32_static_shape,
    plane,
)
from rewriter.rules.base import Bound, Builder, Match, Reject

#: Largest sparsemax axis handled (C(C-1) comparison channels).
MAX_CHANNELS = 64
#: Nodes searched between the output and x.
MAX_NODES = 64
#: A comparison ramp is this fraction of the observed width of its operand.
RAMP_FRACTION = 1.0 / 16384
_CONV = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
         "dilations": [1, 1, 1, 1]}
_INPUT_OPS = frozenset({"Placeholder", "PlaceholderWithDefault", "VarHandleOp", "Variable",
                        "VariableV2"})


class SparsemaxPairwise(FloatRule):
    """sparsemax(x) from pairwise differences, ramps as comparisons, 1/K by fitted ramps."""

    name = "sparsemax_pairwise"
    anchors = frozenset({"Maximum"})
    fixes = frozenset({"TopKV2", "Cumsum"})
    emits = RAMP_OPS | {"Sub"}
    exact = False
    needs_range = True
    order = 150
    bound = Bound(5e-3, (-math.inf, math.inf),
                  "comparisons as steep ramps and 1/K fitted on [1, C]; measured per match on "
                  "the calibration samples")

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        for sub_ref, zero in ((node.input[0], node.input[1]), (node.input[1], node.input[0])):
            sub = g.producer(sub_ref) if parse_input(sub_ref)[1] == 0 else None
            if sub is None or sub.op != "Sub" or not _is_zero(g, zero):
                continue
            x, tau = sub.input[0], sub.input[1]
            region = _between(g, tau, x)
            if region is None or not any(n.op == "TopKV2" and same_tensor(n.input[0], x)
                                         for n in region):
                continue
            return Match(root=node, nodes=[node, sub, *region], inputs={"x": x})
        return None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shape = float32_static_shape(g, m)
        if isinstance(shape, Reject):
            return shape
        x, c = m.inputs["x"], shape[-1]
        if c > MAX_CHANNELS:
            return Reject(f"{c} channels: more than {MAX_CHANNELS} (C(C-1) comparisons)",
                          m.root.name)
        xs = sample_values(g, x)
        ys = sample_values(g, m.root.name)
        if not xs or not ys:
            return Reject(f"no observed values for {x}: the rule needs calibration data",
                          m.root.name)
        x64 = np.concatenate([v.reshape(-1, c) for v in xs]).astype(np.float64)
        y64 = np.concatenate([v.reshape(-1, c) for v in ys]).astype(np.float64)
        form = next((f for f in ("keras", "textbook")
                     if np.abs(sparsemax_reference(x64, f) - y64).max()
                     <= 1e-4 * (1.0 + np.abs(y64).max())), None)
        if form is None:
            return Reject("the subgraph computes neither Keras 3's nor the textbook sparsemax "
                          "on the calibration samples", m.root.name)
        w = RAMP_FRACTION * max(float(np.ptp(x64)), 1e-3)
        q = 1.0 - _rank_and_above(x64, w)[1]
        # the largest element has q = 1: with w2 < 1 it is always in the support (K >= 1)
        w2 = min(RAMP_FRACTION * max(float(np.ptp(q)), 1e-3), 0.5)
        fit = fit_ramps(UnaryFunction("1/K", lambda v: 1.0 / v, 0.0, 0.0,
                                      domain=(0.0, math.inf)), 1.0, float(c))
        if isinstance(fit, str):
            return Reject(fit, m.root.name)
        got, total = sparsemax_pairwise(x64, form, w, w2)
        err = float(np.abs(got - y64).max()) + fit.max_abs_error * float(np.abs(total).max())
        m.extra.update(shape=shape, form=form, w=w, w2=w2, fit=fit)
        m.bound = Bound(err, (float(x64.min()), float(x64.max())),
                        f"{form} sparsemax over {c} channels; comparisons as ramps of width "
                        f"{w:.3g} and {w2:.3g}, 1/K by {fit.segments} ramps on [1, {c}]; "
                        f"measured on {len(xs)} calibration samples of {x}")
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        shape, form = m.extra["shape"], m.extra["form"]
        c = shape[-1]
        nhwc = len(shape) == 4 and shape[0] == 1  # already [1, H, W, C]: no reshape
        rows, cols = shape[1:3] if nhwc else (plane(tuple(shape[:-1]))
                                              or (1, int(np.prod(shape[:-1]))))
        x4 = m.inputs["x"] if nhwc else b.op(
            "Reshape", [m.inputs["x"], b.const("plane", [1, rows, cols, c], np.int32)],
            "plane_x", attrs={"Tshape": np.int32})
        pairs = [(i, j) for i in range(c) for j in range(c) if i != j]
        diff = np.zeros((c, len(pairs)))
        per_i = np.zeros((len(pairs), c))
        for p, (i, j) in enumerate(pairs):
            diff[j, p], diff[i, p] = 1.0, -1.0
            per_i[p, i] = 1.0
        w, scale = m.extra["w"], 6.0 / m.extra["w2"]
        gt6 = _relu6(b, _conv(b, x4, diff * (6.0 / w), "diff"), np.full(len(pairs), 3.0),
                     "greater")  # 6 [x_j > x_i], a tie counted half each way
        rank = b.op("BiasAdd", [_conv(b, gt6, per_i / 6.0, "count"),
                                b.const("one_c", np.ones(c))], "rank",
                    attrs={"data_format": "NHWC"})  # k_i
        r6 = b.op("Relu6", [_conv(b, x4, diff * 6.0, "above")], "above6")  # 6 min(relu(d), 1)
        # s_i = [1 - sum_j relu(x_j - x_i) > 0]: a convolution of r6 with a fused RELU6 (its
        # int32 sum is never an int8 tensor)
        support6 = _relu6(b, _conv(b, r6, per_i * (-scale / 6.0), "margin"),
                          np.full(c, scale), "support")  # 6 s_i
        # on the support S_i = k_i x_i + sum_j relu(x_j - x_i), with every relu(.) < 1
        cum = b.op("AddV2", [b.op("Mul", [rank, x4], "k_x"), _conv(b, r6, per_i / 6.0,
                                                                    "sum_above")], "cumsum")
        picked = b.op("Mul", [support6, cum if form == "keras" else x4], "picked")
        ones = np.full((c, 1), 1.0 / 6.0)
        num = b.op("BiasAdd", [_conv(b, picked, ones, "sum"), b.const("minus_one", [-1.0])],
                   "numerator", attrs={"data_format": "NHWC"})
        size = _conv(b, support6, ones, "size")  # K
        inv = build_ramps(b, size, (1, rows, cols, 1), m.extra["fit"])
        tau = _conv(b, b.op("Mul", [num, inv], "tau"), np.ones((1, c)), "tau_c")
        out = b.op("Relu", [b.op("Sub", [x4, tau], "x_minus_tau")], "out4")
        if nhwc:
            return out
        return b.op("Reshape", [out, b.const("shape", list(shape), np.int32)], "out",
                    attrs={"Tshape": np.int32})


def _relu6(b: Builder, x: str, bias: np.ndarray, suffix: str) -> str:
    biased = b.op("BiasAdd", [x, b.const(f"{suffix}_bias", bias)], f"{suffix}_biased",
                  attrs={"data_format": "NHWC"})
    return b.op("Relu6", [biased], suffix)


def _conv(b: Builder, x: str, weights: np.ndarray, suffix: str) -> str:
    cin, cout = weights.shape
    return b.op("Conv2D", [x, b.const(f"{suffix}_w", weights.reshape(1, 1, cin, cout))],
                suffix, attrs=_CONV)


def _is_zero(g: GraphIndex, ref: str) -> bool:
    return scalar_const(g, ref) == 0.0


def _between(g: GraphIndex, tau: str, x: str) -> list[NodeDef] | None:
    """The non-constant nodes ``tau`` is computed by from ``x``, or None (another input, or
    too many)."""
    x_node = parse_input(x)[0]
    seen: dict[str, NodeDef] = {}
    stack = [parse_input(tau)[0]]
    while stack:
        name = stack.pop()
        if name in seen or name == x_node:
            continue
        node = g[name] if name in g else None
        if node is None or node.op in _INPUT_OPS:
            return None
        if node.op == "Const":
            continue
        seen[name] = node
        if len(seen) > MAX_NODES:
            return None
        stack.extend(parse_input(r)[0] for r in node.input if not r.startswith("^"))
    return list(seen.values())


# ------------------------------------------------------------------- float64 references
def sparsemax_reference(x: np.ndarray, form: str) -> np.ndarray:
    """Sparsemax over the last axis by sorting: ``keras`` (Keras 3.15's tau) or ``textbook``."""
    z = -np.sort(-x, axis=-1)
    cum = np.cumsum(z, axis=-1)
    r = np.arange(1, x.shape[-1] + 1)
    support = z - (cum - 1.0) / r > 0
    k = support.sum(axis=-1, keepdims=True)
    if form == "keras":
        num = np.where(support, cum, 0.0).sum(axis=-1, keepdims=True)
    else:
        num = np.take_along_axis(cum, k - 1, axis=-1)
    return np.maximum(x - (num - 1.0) / k, 0.0)


def _rank_and_above(x: np.ndarray, w: float) -> tuple[np.ndarray, np.ndarray]:
    """``k_i`` (ties half each way) and ``sum_j min(relu(x_j - x_i), 1)``, as the graph."""
    d = x[..., None, :] - x[..., :, None]  # [.., i, j] = x_j - x_i
    above = np.clip(0.5 + d / w, 0.0, 1.0) * (1.0 - np.eye(x.shape[-1]))
    return 1.0 + above.sum(axis=-1), np.clip(d, 0.0, 1.0).sum(axis=-1)


def sparsemax_pairwise(x: np.ndarray, form: str, w: float, w2: float
                       ) -> tuple[np.ndarray, np.ndarray]:
    """The replacement in float64 (exact 1/K): its output and ``sum - 1`` (the numerator)."""
    k, above = _rank_and_above(x, w)
    s = np.clip((1.0 - above) / w2, 0.0, 1.0)
    num = (s * (k * x + above if form == "keras" else x)).sum(axis=-1, keepdims=True) - 1.0
    tau = num / s.sum(axis=-1, keepdims=True)
    return np.maximum(x - tau, 0.0), num


RULES = (SparsemaxPairwise(),)
