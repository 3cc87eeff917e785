"""Softmax and LogSoftmax over the last axis from REDUCE_MAX, SUB, MEAN, MUL and fitted ramps.

``softmax(x) = e / sum(e)`` and ``log_softmax(x) = d - log(sum(e))`` with ``d = x - max(x)``
(every ``d <= 0``, the largest 0) and ``e = exp(d)``. Without EXP, LOG or DIV in int8 (the Edge
TPU, whose SOFTMAX takes only a 1-D tensor), ``exp`` on the range ``d`` takes and the function
of the channel mean ``m = mean(e)`` (``1/(C m)`` for softmax, ``log(C m)`` for log-softmax, on
the range ``m`` takes, within [1/C, 1]) are each fitted by clamped ramps
(:mod:`rewriter.rules._unary`) on the calibration samples. Approximate; the stated bound
composes the two fits: with ``|e' - e| <= Ee`` and ``|g' - g| <= Eg`` (``|g'| <= L``),
``|softmax' - softmax| <= Ee * (max g + Eg) + Eg + L * Ee`` and ``|log_softmax' - log_softmax|
<= Ee + Eg + L * Ee`` (the mean moves by at most Ee), measured on the fits, stated per match.
"""

from __future__ import annotations

import math

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.ir.ranges import sample_values
from rewriter.rules._activation import FloatRule
from rewriter.rules._reduce import channel_mean
from rewriter.rules._unary import (
    NOMINAL_BOUND,
    RAMP_OPS,
    UnaryFunction,
    build_ramps,
    fit_ramps,
    float32_static_shape,
    unary_node,
)
from rewriter.rules.base import Bound, Builder, Match, Reject


class SoftmaxRamps(FloatRule):
    """softmax(x) ~= e * g(mean(e)), log_softmax(x) ~= d - h(mean(e)); e, g, h fitted ramps."""

    name = "softmax_ramps"
    anchors = frozenset({"Softmax", "LogSoftmax"})
    fixes = frozenset({"Softmax", "LogSoftmax"})
    emits = RAMP_OPS | {"Max", "Sub", "Mean"}
    exact = False
    needs_range = True
    order = 200
    bound = Bound(NOMINAL_BOUND, (-math.inf, math.inf),
                  "exp and 1/(C m) (or log(C m)) fitted per match on the calibration data")

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return unary_node(node)

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shape = float32_static_shape(g, m)
        if isinstance(shape, Reject):
            return shape
        x = m.inputs["x"]
        values = sample_values(g, x)
        if not values:
            return Reject(f"no observed values for {x}: the fit needs calibration data",
                          m.root.name)
        c = int(shape[-1])
        d = np.concatenate([(v - v.max(axis=-1, keepdims=True)).ravel() for v in values])
        mean = np.concatenate([np.exp(v - v.max(axis=-1, keepdims=True)).mean(axis=-1).ravel()
                               for v in values])
        log = m.root.op == "LogSoftmax"
        exp_fn = UnaryFunction("exp", np.exp, 0.0, 0.0)
        if log:
            norm = UnaryFunction(f"log({c} m)", lambda s: np.log(c * s), 0.0, 0.0,
                                 domain=(0.0, math.inf))
        else:
            norm = UnaryFunction(f"1/({c} m)", lambda s: 1.0 / (c * s), 0.0, 0.0,
                                 domain=(0.0, math.inf))
        fit_e = fit_ramps(exp_fn, float(d.min()), 0.0)
        if isinstance(fit_e, str):
            return Reject(fit_e, m.root.name)
        fit_n = fit_ramps(norm, float(mean.min()), float(mean.max()))
        if isinstance(fit_n, str):
            return Reject(fit_n, m.root.name)
        ee, en = fit_e.max_abs_error, fit_n.max_abs_error
        lo_m = fit_n.fit_range[0]  # both functions of m are steepest and largest there
        slope = 1.0 / lo_m if log else 1.0 / (c * lo_m * lo_m)
        err = (ee + en + slope * ee) if log else (ee * (1.0 / (c * lo_m) + en) + en + slope * ee)
        lo = float(min(v.min() for v in values))
        hi = float(max(v.max() for v in values))
        m.extra.update(shape=shape, fit_e=fit_e, fit_n=fit_n, log=log)
        m.bound = Bound(float(err), (lo, hi),
                        f"exp fitted with {fit_e.segments} ramps on [{d.min():.4g}, 0] and "
                        f"{norm.name} with {fit_n.segments} ramps on [{mean.min():.4g}, "
                        f"{mean.max():.4g}], over {len(values)} calibration samples of {x}")
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        shape = m.extra["shape"]
        axis = b.const("axis", [-1], np.int32)
        reduce = {"keep_dims": True, "Tidx": np.int32}
        top = b.op("Max", [x, axis], "max", attrs=reduce)
        d = b.op("Sub", [x, top], "shifted")
        e = build_ramps(b, d, shape, m.extra["fit_e"])
        mean = channel_mean(b, e, list(shape))  # a 1x1 conv where the Edge TPU's MEAN refuses
        norm = build_ramps(b, mean, (*shape[:-1], 1), m.extra["fit_n"])
        if m.extra["log"]:
            return b.op("Sub", [d, norm], "out")
        return b.op("Mul", [e, norm], "out")


RULES = (SoftmaxRamps(),)
