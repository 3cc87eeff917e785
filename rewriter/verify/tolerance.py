"""The tolerance policy: how close outputs must stay, given what was done to the model.

Running and comparing are separate steps (as in Polygraphy's comparator): runners produce
outputs, :func:`rewriter.verify.metrics.compare` measures them against a :class:`Tolerance`, and
this module alone decides the tolerance, for the job, ``rewrite verify`` and the per-rule and
per-node checks. With ``s = max |ref|`` of an output (or of an intermediate tensor) and ``B`` the
sum of the stated max abs errors of the approximate rule applications that can reach it:

* rewritten graph: ``|d| <= EXACT_RTOL * s + B * max(1, s) + EXACT_RTOL * |ref|`` element-wise;
  exact rewrites (``B = 0``) differ by float32 rounding only. With approximate rewrites the
  outputs must also keep cosine >= :data:`APPROX_MIN_COSINE` (an op-level bound grows through
  the layers after it, so the element bound alone would not be honest). Where the layers after
  an approximate node amplify its error, ``B * max(1, s)`` is too tight: given the model's own
  measured response to each application's bound (:mod:`rewriter.verify.bound_response`), the
  term is the larger of ``B * max(1, s)`` and
  :data:`RESPONSE_FACTOR` times that response;
* float artifact vs original: :data:`ARTIFACT_RTOL` (1e-4 float32, 1e-2 float16) relative to the
  output's scale, or :data:`~rewriter.verify.float_noise.NOISE_FACTOR` times the original's own
  output change for a one-float32-step change of its input where that is larger (a model whose
  float32 outputs are that sensitive: :mod:`rewriter.verify.float_noise`), plus ``B * max(1, s)``
  (or the measured response, as above) and cosine >= :data:`APPROX_MIN_COSINE` when approximate rules were applied (the file computes
  the rewritten graph, so it carries their error too);
* int8 artifact vs the float original: cosine >= :data:`INT8_MIN_COSINE` (quantisation error is
  not a bug), also ``rewrite verify``'s default when either model is quantised.

Integer outputs (an arg-max index map, ids) have no meaningful cosine: wherever a criterion has a
cosine, an integer output is judged by its index agreement (the share of indices equal to the
reference's) >= :data:`MIN_INDEX_AGREEMENT` instead; without one (exact and float-artifact
tolerances) every index counts element-wise (below 1 of absolute tolerance: every index equal).
The notes say which outputs were judged by which (:func:`judged_by`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Relative tolerance of exact rewrites (float32 rounding), and the default of ``compare``.
EXACT_RTOL = 1e-5
#: Cosine an output must keep once approximate rules have been applied.
APPROX_MIN_COSINE = 0.999
#: An approximate application may move an output by this many times the original's measured
#: response to its bound (:mod:`rewriter.verify.bound_response`). The three perturbation patterns
#: are no upper bound: the real error is a function of each element's value (a fit's residual,
#: ``|e| <= b``), and a layer after the node is hurt most by the sign pattern of its own weights.
#: On Basic Pitch (ethos-u55-128, its 4 held-back clips) the rewritten graph's error is 0.82-1.25x
#: the measured response per output (contour 3.51e-4 vs 2.81e-4, note 1.48e-4 vs 1.54e-4, onset
#: 4.84e-4 vs 5.94e-4; the random-sign pattern gave the response of contour and onset, +b the
#: note's). The adversarial pattern, b times the L1 norm of an output element's gradient at the
#: node, is 5-18x the response at the elements that err most: a fit's residual, a smooth function
#: of the value, does not reach it. 2 covers the 1.25 seen with room, and a rule that errs by
#: more than about twice its bound through the same layers still fails.
RESPONSE_FACTOR = 2.0
#: Cosine of an int8 artifact's outputs to the float original's.
INT8_MIN_COSINE = 0.99
#: Tolerance of a float artifact, relative to the output's scale, by quantisation mode.
ARTIFACT_RTOL = {"none": 1e-4, "float16": 1e-2}
#: An integer output (an ARG_MAX index map: a class per pixel) judged against a cosine passes
#: when at least this share of its indices equals the reference's; a cosine of class numbers
#: means nothing.
MIN_INDEX_AGREEMENT = 0.99


@dataclass(frozen=True)
class Tolerance:
    """What a comparison must meet: ``atol`` (one value, or per output), ``rtol``, an optional
    ``min_cosine``, and the one-line ``note`` that says it in the report."""

    atol: float | Mapping[str, float]
    rtol: float
    min_cosine: float | None
    note: str
    #: Classifier outputs pass on top-1 agreement >= this instead of ``min_cosine``.
    min_top1: float | None = None

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rewriter.verify.metrics.compare`."""
        return {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine}


def output_scale(reference: Mapping[str, np.ndarray]) -> dict[str, float]:
    """``max |ref|`` over the finite values of each output."""
    out = {}
    for name, v in reference.items():
        a = np.abs(np.asarray(v, dtype=np.float64))
        out[name] = float(a[np.isfinite(a)].max(initial=0.0))
    return out


def integer_outputs(reference: Mapping[str, np.ndarray]) -> list[str]:
    """The outputs of ``reference`` whose values are integers (index maps, ids), in order."""
    return [k for k, v in reference.items() if np.issubdtype(np.asarray(v).dtype, np.integer)]


def judged_by(by_cosine: str, reference: Mapping[str, np.ndarray] | None) -> str:
    """What a criterion with a cosine (``by_cosine``, e.g. ``cosine >= 0.99``) judges, per
    output: unchanged when no output of ``reference`` is an integer; else the integer outputs
    named with their index-agreement criterion (:data:`MIN_INDEX_AGREEMENT`), and the cosine
    kept for the float outputs only."""
    ints = integer_outputs(reference or {})
    if not ints:
        return by_cosine
    index = (f"index agreement >= {MIN_INDEX_AGREEMENT:g} (the share of equal indices) for the "
             f"integer output{'s' if len(ints) > 1 else ''} {', '.join(ints)}")
    if len(ints) == len(reference or {}):
        return f"{index}; no output judged by cosine"
    return f"{by_cosine} for the float outputs, {index}"


def bound_of(application: Any) -> float | None:
    """The stated max abs error of one rule application (an ``Applied`` or its JSON): None
    when the rule is exact, inf when it is approximate and states no bound."""
    if isinstance(application, Mapping):
        if application.get("exact", True):
            return None
        bound = application.get("bound") or {}
        value = bound.get("max_abs_error")
    else:
        if application.exact:
            return None
        value = application.bound.max_abs_error if application.bound else None
    return float(value) if value is not None else math.inf


def approximation_budget(applied: Sequence[Any]) -> tuple[list[float], float]:
    """The bounds of the approximate applications among ``applied``, and their sum ``B``."""
    approx = [b for b in (bound_of(a) for a in applied) if b is not None]
    return approx, float(sum(approx))


def approximate_roots(applied: Sequence[Any]) -> dict[str, float]:
    """{root: the summed bounds of the approximate applications rooted there} among
    ``applied`` (``Applied`` objects, their JSON, or the report's per-rule form with
    ``roots``)."""
    out: dict[str, float] = {}
    for a in applied:
        b = bound_of(a)
        if b is None:
            continue
        j = a if isinstance(a, Mapping) else a.to_json()
        for root in j.get("roots") or [j["root"]]:
            out[root] = out.get(root, 0.0) + b
    return out


@dataclass(frozen=True)
class MeasuredTerms:
    """The approximate applications of one ``applied`` list split by a measured response:
    the measured ones' summed bounds and summed response per output, the others' bounds."""

    measured: float
    response: dict[str, float]
    unmeasured: float
    n_measured: int
    n_unmeasured: int
    samples: int


def measured_terms(applied: Sequence[Any], response: Any) -> MeasuredTerms | None:
    """Match ``applied``'s approximate applications to ``response``
    (:class:`rewriter.verify.bound_response.BoundResponse`) by root: None when none of them
    was measured (the old rule then holds for all)."""
    if response is None:
        return None
    by_root = {m["root"]: m for m in response.measured}
    roots = approximate_roots(applied)
    hits = [r for r in roots if r in by_root and by_root[r]["bound"] >= roots[r]]
    if not hits:
        return None
    total: dict[str, float] = {}
    for r in hits:
        for k, v in by_root[r]["response"].items():
            total[k] = total.get(k, 0.0) + v
    rest = [r for r in roots if r not in hits]
    return MeasuredTerms(float(sum(roots[r] for r in hits)), total,
                         float(sum(roots[r] for r in rest)), len(hits), len(rest),
                         response.samples)


@dataclass(frozen=True)
class TolerancePolicy:
    """The thresholds, as one object the job, ``verify`` and the per-rule checks share."""

    exact_rtol: float = EXACT_RTOL
    approx_min_cosine: float = APPROX_MIN_COSINE
    int8_min_cosine: float = INT8_MIN_COSINE
    #: ``--min-top1``: int8 classifier outputs are judged by top-1 agreement instead.
    int8_min_top1: float | None = None

    def tensor_atol(self, scale: float, budget: float) -> float:
        """The absolute tolerance of one tensor of scale ``scale`` under approximation
        budget ``budget`` (the sum of the approximate bounds that reach it)."""
        return self.exact_rtol * scale + budget * max(1.0, scale)

    @staticmethod
    def approx_atol(scale: float, budget: float, output: str,
                    terms: MeasuredTerms | None = None) -> float:
        """What the approximate applications add to the absolute tolerance of ``output``
        (scale ``scale``, ``budget`` the sum of their bounds): ``budget * max(1, scale)``, or,
        with ``terms`` (:func:`measured_terms`), the larger of the measured applications'
        bounds x ``max(1, scale)`` and :data:`RESPONSE_FACTOR` x their summed response, plus
        the unmeasured applications' bounds x ``max(1, scale)``."""
        if terms is None or output not in terms.response:
            return budget * max(1.0, scale)
        m = max(1.0, scale)
        return (max(terms.measured * m, RESPONSE_FACTOR * terms.response[output])
                + terms.unmeasured * m)

    @staticmethod
    def _approx_note(terms: MeasuredTerms | None, scales: Mapping[str, float],
                     budget: float) -> str:
        """The tolerance note's words for the approximate term."""
        base = f"the sum of their bounds ({budget:.3g}) x max(1, max|ref|)"
        if terms is None:
            return base
        amplified = {k: v for k, v in terms.response.items() if k in scales
                     and RESPONSE_FACTOR * v > terms.measured * max(1.0, scales[k])}
        note = (f"the larger of {base} and {RESPONSE_FACTOR:g}x the model's own response to "
                f"its approximations' bounds, measured on {terms.samples} sample(s) "
                f"({terms.n_measured} application(s); " + (", ".join(
                    f"{k}: {v:.3g}" for k, v in sorted(amplified.items()))
                    or "no output amplifies them") + ")")
        if terms.n_unmeasured:
            note = (f"the larger of the measured applications' bounds ({terms.measured:.3g}) x "
                    f"max(1, max|ref|) and {RESPONSE_FACTOR:g}x the model's own response to "
                    f"them, measured on {terms.samples} sample(s) ({terms.n_measured} "
                    "application(s); " + (", ".join(
                        f"{k}: {v:.3g}" for k, v in sorted(amplified.items()))
                        or "no output amplifies them") + f"), + the {terms.n_unmeasured} "
                    f"unmeasured application(s)' bounds ({terms.unmeasured:.3g}) x "
                    "max(1, max|ref|)")
        return note

    def for_rewrite(self, applied: Sequence[Any], reference: Mapping[str, np.ndarray],
                    response: Any = None) -> Tolerance:
        """Rewritten graph vs original, after the rule applications ``applied``; ``response``:
        the original's measured response to their bounds
        (:func:`rewriter.verify.bound_response.bound_response`), None for the old rule."""
        approx, budget = approximation_budget(applied)
        scales = output_scale(reference)
        terms = measured_terms(applied, response)
        atol = {k: self.exact_rtol * s + self.approx_atol(s, budget, k, terms)
                for k, s in scales.items()}
        if not approx:
            return Tolerance(atol, self.exact_rtol, None,
                             f"all applied rules are exact: tolerance {self.exact_rtol:g} "
                             "relative")
        return Tolerance(atol, self.exact_rtol, self.approx_min_cosine,
                         f"{len(approx)} approximate application(s): tolerance "
                         f"{self.exact_rtol:g} x max|ref| + "
                         f"{self._approx_note(terms, scales, budget)}, " + judged_by(
                             f"cosine >= {self.approx_min_cosine}", reference))

    def for_artifact(self, quantize: str, reference: Mapping[str, np.ndarray],
                     applied: Sequence[Any] = (),
                     noise_floor: Mapping[str, float] | None = None,
                     response: Any = None) -> Tolerance:
        """Exported file vs the original float model, by quantisation mode; ``applied`` are
        the rule applications the exported graph carries (their bounds add to a float file's
        tolerance, as they do to the rewritten graph's). ``noise_floor``: the original's own
        output change per output when its input moves one float step
        (:func:`rewriter.verify.float_noise.noise_floor`); a float file's tolerance is at least
        :data:`~rewriter.verify.float_noise.NOISE_FACTOR` times it. ``response``: as in
        :meth:`for_rewrite`, for the approximate applications' term."""
        if quantize in ("int8", "16x8"):
            if self.int8_min_top1 is not None:
                return Tolerance(math.inf, 0.0, self.int8_min_cosine,
                                 f"{quantize} artifact vs float original: pass is top-1 "
                                 f"agreement >= {self.int8_min_top1:g} for classifier outputs "
                                 "(--min-top1), " + judged_by(
                                     f"cosine >= {self.int8_min_cosine} for others", reference),
                                 self.int8_min_top1)
            return Tolerance(math.inf, 0.0, self.int8_min_cosine,
                             f"{quantize} artifact vs float original: pass is " + judged_by(
                                 f"cosine >= {self.int8_min_cosine}", reference))
        from rewriter.verify.float_noise import NOISE_FACTOR

        rtol = ARTIFACT_RTOL[quantize]
        approx, budget = approximation_budget(applied)
        scales = output_scale(reference)
        floors = {k: NOISE_FACTOR * (noise_floor or {}).get(k, 0.0) for k in scales}
        terms = measured_terms(applied, response)
        atol = {k: max(rtol * s, floors[k]) + self.approx_atol(s, budget, k, terms)
                for k, s in scales.items()}
        kind = "float32" if quantize == "none" else quantize
        note = f"{kind} artifact vs original: tolerance {rtol:g} relative to the output's scale"
        noisy = {k: f / s for k, f in floors.items() if (s := scales[k]) > 0 and f > rtol * s}
        if noisy:
            note += (f", or {NOISE_FACTOR:g}x the original's own change when its input moves one "
                     "float32 step where that is larger (" + ", ".join(
                         f"{k}: {v:.2g}" for k, v in sorted(noisy.items())) + " of its scale)")
        if not approx:
            exact = [k for k in integer_outputs(reference) if atol[k] + rtol * scales[k] < 1]
            if exact:  # an index off by one is off by >= 1: nothing but equality passes
                note += (f"; the integer output{'s' if len(exact) > 1 else ''} "
                         f"{', '.join(exact)}: every index equal to the original's")
            return Tolerance(atol, rtol, None, note)
        return Tolerance(atol, rtol, self.approx_min_cosine,
                         f"{note} + " + (
                             f"the sum of the {len(approx)} approximate application(s)' bounds "
                             f"({budget:.3g}) x max(1, max|ref|)" if terms is None
                             else f"for the {len(approx)} approximate application(s): "
                             f"{self._approx_note(terms, scales, budget)}")
                         + ", " + judged_by(
                             f"cosine >= {self.approx_min_cosine}", reference))

    def for_quantized(self) -> Tolerance:
        """``rewrite verify`` when a model is quantised and no tolerance was given: the job's
        int8 criterion, so both agree on an artifact."""
        return Tolerance(math.inf, 0.0, self.int8_min_cosine,
                         f"compared by cosine >= {self.int8_min_cosine} (the main job's int8 "
                         "criterion)")


#: The policy everything uses unless told otherwise.
DEFAULT_POLICY = TolerancePolicy()


def policy(min_top1: float | None = None) -> TolerancePolicy:
    """The job's policy: the default, with ``--min-top1`` when given."""
    from dataclasses import replace

    return DEFAULT_POLICY if min_top1 is None else replace(DEFAULT_POLICY, int8_min_top1=min_top1)
