"""Any elementwise unary function from ops every int8 accelerator runs: a sum of clamped ramps.

The machinery behind the ``*_ramps`` rules (and reusable by any rule that must compute a
function ``f`` a target lacks, e.g. LOG or EXP in an audio front end):

* :class:`UnaryFunction` is ``f`` in float64 numpy with its asymptotic slopes ``a`` (x -> -inf)
  and ``c`` (x -> +inf), so ``f(x) = a*x + (c - a)*relu(x) + g(x)`` with ``g`` bounded;
* :func:`fit_ramps` fits ``g`` on the range the calibration data shows (widened by
  :data:`MARGIN`) by a continuous piecewise-linear function: breakpoints placed greedily so each
  segment's chord is within a tolerance derived from int8 (:data:`STEPS_PER_TOLERANCE` below the
  output's int8 step), knot values then refined by least squares; the grid is refined by
  bisection where ``f`` is steep (``log`` near 0); the bound is the
  largest ``|fit - f|`` over the fitted range, measured on a dense float64 grid (uniform, plus
  the refined grid and its midpoints) of the float32 implementation;
* :func:`build_ramps` builds it with CONV_2D, RELU6, RESHAPE (and RELU, MUL, ADD for the linear
  part): ``x`` is reshaped to ``[1, A, B, 1]``, one 1x1 convolution with K output channels and a
  fused RELU6 computes every ramp ``r_k = 6 * clip((x - t_k) / w_k, 0, 1)``, a second 1x1
  convolution sums them, ``g = v_0 + sum_k (dv_k / 6) r_k``, and the result is reshaped back.

Why this form quantizes well (measured with TF 2.21's int8 converter, LiteRT, TFLite Micro and
Vela 5.2; see ``tests/rules/test_unary_ramps.py``): every ramp tensor spans exactly [0, 6], so the
per-tensor int8 scale of the K-channel tensor is used in full; the first convolution's weights
are per-channel (each ramp's slope is its own exactly-scaled channel); the second convolution
accumulates in int32, so the sum rounds once; and the large linear part (``x`` or ``relu(x)``)
is kept out of the ramps so the second convolution's per-tensor weight scale is set by the
small increments of ``g``, not by the slope of ``f``. MINIMUM/MAXIMUM, whose int8 kernels share
one scale between input and output, are not used. Outside the fitted range the ramps saturate:
``g`` is constant there and ``f`` continues along its asymptotes; in int8 the input is clipped
to the calibrated range anyway. A range that starts just above 0 is not fitted down to 0 (the
quantised 0 stands for every input below half a step): the audio family's ``log(mel + 1e-6)``
on [4.4e-4, 2224] fitted to 0 gave TFLite Micro 16x8 cosine 0.9757 on held-back clips, saturated
at ``f(3.3e-4)`` 0.9903 (int8: 0.9743 and 0.9605, both below 0.99).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.ir.ranges import ObservedRange, observed_range
from rewriter.rules._activation import FloatRule
from rewriter.rules.base import Bound, Builder, Match, Reject, dtype_of, tensor_shape

#: Fraction of the observed width added on each side of the fitted range.
MARGIN = 0.1
#: The fit's tolerance is the output's int8 step (range / 255) divided by this.
STEPS_PER_TOLERANCE = 4.0
#: At most this many ramps (output channels of the first convolution).
MAX_SEGMENTS = 64
#: Points of the float64 grid the fit and its bound are computed on.
GRID = 8193
#: Largest side of the [1, A, B, 1] plane the input is reshaped to (Vela's tensor limit).
MAX_SIDE = 65535
#: Nominal bound used to rank the ramp rules against other approximate rules (the planner's
#: preference); each application states its own bound, computed from its fit.
NOMINAL_BOUND = 5e-3
#: A fit whose bound is this share of its function's spread of values or more is no fix
#: (``where(h > 0.5, h, -1e9)``: a bound of 1e9 on values spanning 1e9 says nothing).
NO_FIX = 0.5
#: Ops the ramp rules emit (the planner checks the target runs them).
RAMP_OPS = frozenset({"Reshape", "Conv2D", "BiasAdd", "Relu6", "Relu", "Mul", "AddV2"})


@dataclass(frozen=True)
class UnaryFunction:
    """``f`` in float64 numpy, with its asymptotic slopes and the open domain it is finite on."""

    name: str
    f: Callable[[np.ndarray], np.ndarray]
    slope_minus: float | None = 0.0  # None: chosen from the fitted range (with_linear_part)
    slope_plus: float | None = 0.0
    domain: tuple[float, float] = (-math.inf, math.inf)
    poles: tuple[float, ...] = ()

    def linear(self, x: np.ndarray) -> np.ndarray:
        """The part built outside the ramps: ``a*x + (c - a)*relu(x)``."""
        a, c = self.slope_minus or 0.0, self.slope_plus or 0.0
        return a * x + (c - a) * np.maximum(x, 0.0)


@dataclass(frozen=True)
class RampFit:
    """A fitted ``g``: knots ``t_0 < ... < t_K`` and values; plus the bound and its range."""

    function: UnaryFunction
    knots: np.ndarray
    values: np.ndarray
    fit_range: tuple[float, float]
    observed: tuple[float, float]
    max_abs_error: float
    tolerance: float
    jumps: tuple[float, ...] = ()
    #: ``f >= 0`` on the fitted range: the output is clamped at 0 (a RELU), which only brings
    #: the fit closer to ``f`` and keeps a later SQRT or LOG off the negative numbers a
    #: least-squares fit can dip to near 0 (Basic Pitch's ``x**2`` then SQRT: NaN without it).
    nonnegative: bool = False

    @property
    def segments(self) -> int:
        return len(self.knots) - 1

    def ramp_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """(first conv weights 6/w_k, its biases -6 t_k/w_k, second conv weights dv_k/6, v_0)."""
        w = np.diff(self.knots)
        return 6.0 / w, -6.0 * self.knots[:-1] / w, np.diff(self.values) / 6.0, self.values[0]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The fitted function as the graph computes it (float32 weights and arithmetic)."""
        s, o, w2, v0 = (np.asarray(a, np.float32) for a in self.ramp_weights())
        x32 = np.asarray(x, np.float32).reshape(-1, 1)
        r = np.clip(x32 * s + o, np.float32(0), np.float32(6))
        g = (r @ w2.reshape(-1, 1)).ravel() + v0
        fn = self.function
        lin = np.float32(fn.slope_minus) * x32.ravel() + np.float32(
            fn.slope_plus - fn.slope_minus) * np.maximum(x32.ravel(), np.float32(0))
        out = g + lin
        if self.nonnegative:
            out = np.maximum(out, np.float32(0))
        return out.astype(np.float64).reshape(np.shape(x))

    def bound(self, tensor: str, samples: int) -> Bound:
        lo, hi = self.observed
        jumps = (f"; {len(self.jumps)} jump(s), crossed by a ramp {2 * JUMP_WIDTH:g} of the "
                 "range wide, where the error is up to the jump" if self.jumps else "")
        return Bound(self.max_abs_error, self.fit_range,
                     f"{self.segments} ramps fitted to {self.function.name} on [{lo:.4g}, "
                     f"{hi:.4g}], the range of {tensor} over {samples} calibration samples, "
                     f"widened by {MARGIN:.0%} each side{jumps}")


def fit_ramps(fn: UnaryFunction, lo: float, hi: float, max_segments: int = MAX_SEGMENTS,
              refit: bool = True, margin: float = MARGIN) -> RampFit | str:
    """Fit ``fn`` on the observed range ``[lo, hi]`` widened by ``margin`` of its width each
    side; a reason (str) when it cannot be fitted."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"the observed range [{lo}, {hi}] is not finite"
    width = max(hi - lo, 1e-3 * max(1.0, abs(lo), abs(hi)))
    # widen by MARGIN, but at most halfway to a finite domain edge (log near 0 is steep)
    flo = max(lo - min(margin * width, (lo - fn.domain[0]) / 2), _inside(fn.domain[0], +1))
    fhi = min(hi + min(margin * width, (fn.domain[1] - hi) / 2), _inside(fn.domain[1], -1))
    if not flo < fhi or lo < fn.domain[0] or hi > fn.domain[1]:
        return (f"{fn.name} is not finite on the observed range [{lo:.4g}, {hi:.4g}] "
                f"(domain {fn.domain})")
    for pole in fn.poles:
        if flo <= pole <= fhi:
            return (f"{fn.name} has a pole at {pole:g} inside the observed range "
                    f"[{lo:.4g}, {hi:.4g}]")
    xs = np.linspace(flo, fhi, GRID)
    with np.errstate(all="ignore"):
        ys = fn.f(xs)
    finite = np.isfinite(ys)
    if finite.all():  # dense where f is steep (log near 0, 1/y near its smallest divisor)
        xs, ys = _refine(fn.f, xs, ys, max(float(np.ptp(ys)), 1e-6) / 255.0 / STEPS_PER_TOLERANCE)
        finite = np.isfinite(ys)
    inner = (xs >= lo) & (xs <= hi)
    if not finite[inner].all():
        return f"{fn.name} is not finite everywhere on the observed range [{lo:.4g}, {hi:.4g}]"
    if not finite.all() and not refit:
        return f"{fn.name} is not finite everywhere on [{flo:.4g}, {fhi:.4g}]"
    if not finite.all():  # a domain edge in the margin: keep half the margin up to it
        with np.errstate(all="ignore"):
            ends = fn.f(np.array([lo, hi], np.float64))
        if not np.isfinite(ends).all():
            return f"{fn.name} is not finite on the observed range [{lo:.4g}, {hi:.4g}]"
        bad_lo, bad_hi = xs[~finite & (xs < lo)], xs[~finite & (xs > hi)]
        if bad_lo.size:
            flo = lo - (lo - _domain_edge(fn.f, float(bad_lo.max()), lo)) / 2
        if bad_hi.size:
            fhi = hi + (_domain_edge(fn.f, float(bad_hi.min()), hi) - hi) / 2
        return _refit(fn, lo, hi, flo, fhi, max_segments)
    if fn.slope_minus is None or fn.slope_plus is None:
        fn = with_linear_part(fn, xs, ys)
    y_range = float(np.ptp(ys[inner])) if inner.any() else float(np.ptp(ys))
    tol = max(y_range, 1e-6) / 255.0 / STEPS_PER_TOLERANCE
    def residual(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn.f(x) - fn.linear(x)

    res = ys - fn.linear(xs)
    kinks, jump_knots, jumps = _features(residual, xs, res)
    fixed = np.array(sorted(kinks + jump_knots))
    if fixed.size:  # the grid gets the exact kink and jump points, which must be knots
        xs = _without_jump_interiors(np.union1d(xs, fixed), jump_knots)
        res = residual(xs)
    mandatory = set(np.searchsorted(xs, fixed).tolist())
    for _ in range(40):
        idx = _greedy_breaks(xs, res, tol, mandatory)
        if len(idx) - 1 <= max_segments:
            break
        tol *= 1.25
    knots = xs[idx]
    values = _least_squares_values(xs, res, knots)
    # the bound: a uniform grid 4x the fit's, the fit's own grid and the midpoints of both
    uniform = np.linspace(flo, fhi, 4 * GRID)
    dense = np.union1d(np.union1d(uniform, xs), 0.5 * (xs[1:] + xs[:-1]))
    dense = dense[(dense >= flo) & (dense <= fhi)]
    with np.errstate(all="ignore"):
        exact = fn.f(dense)
    nonnegative = bool(np.all(exact >= 0))
    fit = RampFit(fn, knots, values, (float(flo), float(fhi)), (float(lo), float(hi)), 0.0,
                  float(tol), nonnegative=nonnegative)
    with np.errstate(all="ignore"):
        err = float(np.max(np.abs(fit(dense) - exact)))
    err_knots = float(np.max(np.abs(fit(knots) - fn.f(knots))))
    # float32 rounding of the evaluation on top of the float64 reference
    slack = 4 * np.finfo(np.float32).eps * (1.0 + float(np.max(np.abs(ys))))
    # at a jump the fit crosses over 2 * JUMP_WIDTH: there it can be off by the jump itself
    return replace(fit, max_abs_error=float(max(err, err_knots, *jumps) + slack),
                   jumps=tuple(jumps))


#: Half-width of the ramp that replaces a jump, relative to the fitted range's width. One ramp
#: crosses each jump (nothing of the grid inside it), so its int8 CONV_2D channel is requantised
#: by about R / (127 * 2 * JUMP_WIDTH * 1.2 R) = 3.3e3 (2^12), below 2^15: the accumulator
#: (|acc| <= 127 * 255 < 2^15) shifted left by it stays in int32. Measured on ``threshold``
#: (tests/rules/test_elementwise_ramps.py): multiplier 2^15 int8 error 0.016 away from the jump
#: in LiteRT and TFLite Micro, 2^18 both 0.52; 2^35 and above LiteRT 0.52 and Vela puts the
#: CONV_2D on the CPU.
JUMP_WIDTH = 1e-6
#: A first (second) difference this many times its neighbours' is a jump (kink).
_SPIKE = 8.0


def _features(r: Callable[[np.ndarray], np.ndarray], xs: np.ndarray, ys: np.ndarray
              ) -> tuple[list[float], list[float], list[float]]:
    """Exact kinks and jumps of ``r`` on the grid: (kink positions, jump-ramp knots, jump
    sizes). A kink is located where the straight pieces on either side meet (so a
    piecewise-linear function gets a knot exactly on each kink and is fitted exactly); a jump
    by bisection, and crossed by one ramp of half-width :data:`JUMP_WIDTH` of the range (the
    caller drops the grid points inside it: :func:`_without_jump_interiors`)."""
    span = float(np.ptp(ys)) or 1.0
    d1 = np.diff(ys)
    d2 = np.diff(d1)
    n = len(xs)
    kinks: list[float] = []
    knots: list[float] = []
    sizes: list[float] = []
    width = float(xs[-1] - xs[0])
    for i in range(2, n - 3):
        near = max(abs(d1[i - 2]), abs(d1[i + 2]), 1e-6 * span)
        if abs(d1[i]) > _SPIKE * near and abs(d1[i]) > 1e-3 * span:
            x_j = _bisect_jump(r, float(xs[i]), float(xs[i + 1]))
            d = max(JUMP_WIDTH * width, 8 * float(np.spacing(np.float32(abs(x_j) + 1.0))))
            knots += [x_j - d, x_j + d]
            sizes.append(float(abs(d1[i])))
    jump_at = {int(np.searchsorted(xs, k)) for k in knots}
    for j in range(3, n - 5):
        near = max(abs(d2[j - 3]), abs(d2[j + 3]), 1e-5 * span)
        if abs(d2[j]) <= _SPIKE * near or any(abs(j + 1 - k) <= 4 for k in jump_at):
            continue
        # the kink lies in [x_j, x_{j+2}]: meet the lines through the points outside it
        x0, x1, x2, x3 = xs[j - 2], xs[j - 1], xs[j + 3], xs[j + 4]
        y0, y1, y2, y3 = ys[j - 2], ys[j - 1], ys[j + 3], ys[j + 4]
        m1, m2 = (y1 - y0) / (x1 - x0), (y3 - y2) / (x3 - x2)
        if abs(m1 - m2) < 1e-9:
            continue
        xk = float((y2 - y1 + m1 * x1 - m2 * x2) / (m1 - m2))
        if not x1 < xk < x2 or (kinks and xk - kinks[-1] < 4 * (xs[1] - xs[0])):
            continue
        if abs(r(np.array([xk]))[0] - (y1 + m1 * (xk - x1))) < 1e-5 * span:
            kinks.append(xk)
    return kinks, knots, sizes


def _without_jump_interiors(xs: np.ndarray, jump_knots: list[float]) -> np.ndarray:
    """``xs`` without its points strictly inside a jump's crossing ``(x_j - d, x_j + d)``, so
    the crossing is one segment, one ramp of width ``2 d`` (:data:`JUMP_WIDTH` of the range):
    the grid refined where ``f`` is steep (:func:`_refine`) bisects a jump to points 1e-16 apart,
    and a segment between them (slope 5e16) needs an int8 requantisation multiplier of 2^49, which
    LiteRT's kernels and Vela do not take (``hard_shrink``: cosine 0.892, one op on the CPU)."""
    keep = np.ones(len(xs), bool)
    for a, b in zip(jump_knots[::2], jump_knots[1::2], strict=True):
        keep &= (xs <= a) | (xs >= b)
    return xs[keep]


def _bisect_jump(r: Callable[[np.ndarray], np.ndarray], a: float, b: float) -> float:
    """Where ``r`` jumps between ``a`` and ``b`` (bisection on the side of the midpoint)."""
    ya, yb = r(np.array([a, b]))
    mid_value = 0.5 * (ya + yb)
    side = np.sign(ya - mid_value)
    for _ in range(60):
        m = 0.5 * (a + b)
        if np.sign(r(np.array([m]))[0] - mid_value) == side:
            a = m
        else:
            b = m
    return 0.5 * (a + b)


def _domain_edge(f: Callable[[np.ndarray], np.ndarray], bad: float, good: float) -> float:
    """Where ``f`` stops being finite between a grid point ``bad`` (not finite) and ``good``
    (finite): bisected, so a margin cut at the edge ends inside the domain, not at the grid's
    last non-finite point (``log(x + 1e-6)`` is finite from -1e-6, the grid may step 0.07)."""
    for _ in range(60):
        mid = 0.5 * (bad + good)
        with np.errstate(all="ignore"):
            ok = bool(np.isfinite(f(np.array([mid]))).all())
        bad, good = (bad, mid) if ok else (mid, good)
    return good


def _refit(fn: UnaryFunction, lo: float, hi: float, flo: float, fhi: float,
           max_segments: int) -> RampFit | str:
    """:func:`fit_ramps` on the explicit range ``[flo, hi]`` (a margin cut at a domain edge)."""
    # open edges placed so that the point just inside them (_inside) is flo / fhi itself
    domain = (max(fn.domain[0], flo - max(1e-6, 1e-6 * abs(flo))),
              min(fn.domain[1], fhi + max(1e-6, 1e-6 * abs(fhi))))
    narrowed = UnaryFunction(fn.name, fn.f, fn.slope_minus, fn.slope_plus, domain, fn.poles)
    return fit_ramps(narrowed, lo, hi, max_segments, refit=False)


def with_linear_part(fn: UnaryFunction, xs: np.ndarray, ys: np.ndarray) -> UnaryFunction:
    """``fn`` with the slopes of its linear part chosen from the fitted range: the end slopes
    ``a`` (left) and ``c`` (right) when ``a*x + (c-a)*relu(x)`` leaves the smallest total
    variation to the ramps, else a part of them, else none. Slopes within 1% of 0 or of the
    other end's slope are snapped to it, so a linear asymptote costs no node it does not need."""
    n = max(2, len(xs) // 64)
    a = float((ys[n] - ys[0]) / (xs[n] - xs[0]))
    c = float((ys[-1] - ys[-1 - n]) / (xs[-1] - xs[-1 - n]))
    scale = max(abs(a), abs(c), 1e-12)
    a = 0.0 if abs(a) < 0.01 * scale else a
    c = 0.0 if abs(c) < 0.01 * scale else c
    a = c if abs(a - c) < 0.01 * scale else a
    for slope in (a, c):
        if abs(slope - round(slope)) < 1e-3 * scale:
            a, c = (round(a) if slope == a else a), (round(c) if slope == c else c)
    best = (float(np.sum(np.abs(np.diff(ys)))), 0.0, 0.0)
    for ca, cc in ((a, c), (0.0, c), (a, a)):
        if ca == 0.0 and cc == 0.0:
            continue
        lin = ca * xs + (cc - ca) * np.maximum(xs, 0.0)
        tv = float(np.sum(np.abs(np.diff(ys - lin))))
        if tv < best[0] * 0.9:  # a linear part must earn its nodes
            best = (tv, ca, cc)
    return UnaryFunction(fn.name, fn.f, best[1], best[2], fn.domain, fn.poles)


#: At most this many points are added where the uniform grid is too coarse for ``f``.
REFINE_POINTS = 65536


def _refine(f: Callable[[np.ndarray], np.ndarray], xs: np.ndarray, ys: np.ndarray, tol: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """The grid with midpoints added (bisection, up to 48 levels) wherever ``f`` changes by more
    than ``tol`` between neighbours, so a steep end (``log`` near 0: the uniform grid's first
    step from 2e-4 to 0.3 spans 7.3 in ``log``) is fitted and bounded on points, not across
    one chord. A jump (no finer step makes it smaller) stops at 48 levels or
    :data:`REFINE_POINTS`; where ``f`` is not finite at a midpoint the interval is left alone."""
    added = 0
    for _ in range(48):
        steep = np.abs(np.diff(ys)) > tol
        if not steep.any() or added >= REFINE_POINTS:
            break
        mids = (0.5 * (xs[:-1] + xs[1:]))[steep][: REFINE_POINTS - added]
        mids = mids[(mids > xs[0]) & (mids < xs[-1])]
        with np.errstate(all="ignore"):
            new = f(mids)
        ok = np.isfinite(new)
        if not ok.any():
            break
        mids, new = mids[ok], new[ok]
        added += len(mids)
        order = np.argsort(np.concatenate([xs, mids]), kind="stable")
        xs, ys = np.concatenate([xs, mids])[order], np.concatenate([ys, new])[order]
        keep = np.concatenate([[True], np.diff(xs) > 0])
        xs, ys = xs[keep], ys[keep]
    return xs, ys


def _inside(edge: float, direction: int) -> float:
    """A point just inside an open domain edge (the edge itself when infinite)."""
    if not math.isfinite(edge):
        return edge
    return edge + direction * max(1e-6, 1e-6 * abs(edge))


def _greedy_breaks(xs: np.ndarray, ys: np.ndarray, tol: float,
                   mandatory: set[int] = frozenset()) -> list[int]:  # type: ignore[assignment]
    """Grid indices of breakpoints: each segment as long as its chord stays within ``tol``,
    and never across a ``mandatory`` index (a kink or jump knot)."""
    n = len(xs)
    out = [0]
    i = 0
    stops = sorted(mandatory | {n - 1})
    while i < n - 1:
        stop = next(m for m in stops if m > i)
        lo, hi, best = i + 1, stop, i + 1
        while lo <= hi:
            mid = (lo + hi) // 2
            seg = slice(i, mid + 1)
            chord = ys[i] + (ys[mid] - ys[i]) * (xs[seg] - xs[i]) / (xs[mid] - xs[i])
            if np.max(np.abs(chord - ys[seg])) <= tol:
                best, lo = mid, mid + 1
            else:
                hi = mid - 1
        out.append(best)
        i = best
    return out


def _least_squares_values(xs: np.ndarray, ys: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Knot values of the continuous piecewise-linear function closest to ``ys`` (L2)."""
    basis = np.zeros((len(xs), len(knots)))
    seg = np.clip(np.searchsorted(knots, xs, side="right") - 1, 0, len(knots) - 2)
    frac = (xs - knots[seg]) / (knots[seg + 1] - knots[seg])
    rows = np.arange(len(xs))
    basis[rows, seg] = 1.0 - frac
    basis[rows, seg + 1] = frac
    values, *_ = np.linalg.lstsq(basis, ys, rcond=None)
    return values


# ------------------------------------------------------------------------------ building
def plane(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """``(A, B)`` with ``A * B`` = number of elements and both <= :data:`MAX_SIDE`: the
    leading dimensions and the last two (NHWC: H and W*C) when they fit, else a divisor."""
    total = int(np.prod(shape)) if shape else 1
    b = int(np.prod(shape[-2:])) if len(shape) >= 2 else total
    if b <= MAX_SIDE and total // b <= MAX_SIDE:
        return total // b, b
    for cand in range(min(total, MAX_SIDE), 0, -1):
        if total % cand == 0:
            return (total // cand, cand) if total // cand <= MAX_SIDE else None
    return None


def build_ramps(b: Builder, x: str, shape: tuple[int, ...], fit: RampFit) -> str:
    """The fitted function of tensor ``x`` (static ``shape``) as graph nodes; its output."""
    s, o, w2, v0 = fit.ramp_weights()
    k = len(s)
    a_rows, b_cols = plane(shape) or (1, int(np.prod(shape)))
    conv = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
            "dilations": [1, 1, 1, 1]}
    flat = b.op("Reshape", [x, b.const("plane", [1, a_rows, b_cols, 1], np.int32)], "plane_x",
                attrs={"Tshape": np.int32})
    ramp = b.op("Conv2D", [flat, b.const("slopes", s.reshape(1, 1, 1, k))], "ramp_conv",
                attrs=conv)
    ramp = b.op("BiasAdd", [ramp, b.const("offsets", o)], "ramp_bias",
                attrs={"data_format": "NHWC"})
    ramp = b.op("Relu6", [ramp], "ramps")
    total = b.op("Conv2D", [ramp, b.const("rises", w2.reshape(1, 1, k, 1))], "sum_conv",
                 attrs=conv)
    total = b.op("BiasAdd", [total, b.const("start", np.array([v0]))], "sum_bias",
                 attrs={"data_format": "NHWC"})
    g = b.op("Reshape", [total, b.const("shape", list(shape), np.int32)], "residual",
             attrs={"Tshape": np.int32})
    out = add_linear(b, x, g, fit.function.slope_minus, fit.function.slope_plus)
    return b.op("Relu", [out], "nonnegative") if fit.nonnegative else out


def add_linear(b: Builder, x: str, g: str, a: float, c: float) -> str:
    """``g + a*x + (c - a)*relu(x)``, with no node for a zero or unit coefficient."""
    terms = []
    if a != 0.0:
        terms.append(x if a == 1.0 else b.op("Mul", [x, b.const("slope_minus", a)], "lin_x"))
    if c - a != 0.0:
        relu = b.op("Relu", [x], "relu")
        terms.append(relu if c - a == 1.0 else
                     b.op("Mul", [relu, b.const("slope_change", c - a)], "lin_relu"))
    out = g
    for i, term in enumerate(terms):
        out = b.op("AddV2", [out, term], f"out_{i}" if i + 1 < len(terms) else "out")
    return out


# ------------------------------------------------------------------------------ the rule base
class RampRule(FloatRule):
    """Base of the rules that replace a unary function by :func:`build_ramps` fitted on the
    observed range of its input. Subclasses give ``anchors``, ``fixes``, a ``pattern`` whose
    ``Match.inputs["x"]`` is the function's input, and :meth:`function` for a match."""

    emits = RAMP_OPS
    exact = False
    needs_range = True
    order = 200  # last: exact rules planned in the same round see their patterns whole
    bound = Bound(NOMINAL_BOUND, (-math.inf, math.inf),
                  "fitted per match on the calibration data's range of the input; each "
                  "application states its own bound")

    def function(self, g: GraphIndex, m: Match) -> UnaryFunction | str:
        raise NotImplementedError

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shape = float32_static_shape(g, m)
        if isinstance(shape, Reject):
            return shape
        x = m.inputs["x"]
        fn = self.function(g, m)
        if isinstance(fn, str):
            return Reject(fn, m.root.name)
        seen = observed_range(g, x)
        if seen is None:
            return Reject(f"no observed range for {x}: the fit needs calibration data "
                          "(the job passes its calibration samples)", m.root.name)
        fit = fit_ramps(fn, seen.lo, seen.hi)
        if isinstance(fit, str):
            return Reject(fit, m.root.name)
        spread = value_spread(fn, fit.fit_range)
        if fit.max_abs_error >= NO_FIX * spread:
            return Reject(f"a bound of {fit.max_abs_error:.3g} is at least {NO_FIX:.0%} of the "
                          f"spread {spread:.3g} of {fn.name}'s values on [{fit.fit_range[0]:.4g}, "
                          f"{fit.fit_range[1]:.4g}]: no fix (a jump that size, e.g. to a mask "
                          "value, is not a function ramps can follow)", m.root.name)
        m.extra.update(fit=fit, shape=shape, seen=seen)
        m.bound = fit.bound(x, seen.samples)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return build_ramps(b, m.inputs["x"], m.extra["shape"], m.extra["fit"])


def value_spread(fn: UnaryFunction, fit_range: tuple[float, float]) -> float:
    """``max f - min f`` over the fitted range (finite values, a dense grid), in float64."""
    with np.errstate(all="ignore"):
        ys = fn.f(np.linspace(fit_range[0], fit_range[1], 4097))
    ys = ys[np.isfinite(ys)]
    return float(np.max(ys) - np.min(ys)) if ys.size else 0.0


def float32_static_shape(g: GraphIndex, m: Match) -> tuple[int, ...] | Reject:
    """The static shape of ``m.inputs["x"]`` for a float32 match, or why the fitted rules refuse
    it (another dtype, an unknown dimension)."""
    if dtype_of(m.root) != np.dtype(np.float32):
        return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
    x = m.inputs["x"]
    shape = tensor_shape(g, x)
    if not shape or any(d is None or d < 1 for d in shape):
        return Reject(f"input {x} has no static shape ({shape})", m.root.name)
    return tuple(int(d) for d in shape)


def unary_node(node: NodeDef) -> Match:
    """The match of a one-node unary op: root = node, x = its input 0."""
    return Match(root=node, nodes=[node], inputs={"x": node.input[0]})


__all__ = ["MAX_SEGMENTS", "RAMP_OPS", "ObservedRange", "RampFit", "RampRule", "UnaryFunction",
           "add_linear", "build_ramps", "fit_ramps", "float32_static_shape", "plane", "unary_node"]
