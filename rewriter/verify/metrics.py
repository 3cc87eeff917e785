"""Per-output comparison metrics and the tolerance that would have been needed (Polygraphy style).

For a reference array ``r`` and a test array ``t`` (same shape, float64 arithmetic):

* ``max_abs_error`` = max |t - r|; ``mean_abs_error``; ``rmse`` = sqrt(mean((t - r)^2)).
* ``max_rel_error`` = max |t - r| / max |r|: the worst error relative to the output's scale
  (0 when both are 0). This is the number the report and "max relative error <= 1e-4" mean; it
  does not blow up on reference values near zero.
* ``max_elementwise_rel_error`` = max |t - r| / max(|r|, EPS) with ``EPS = 1e-6``: the worst
  element-by-element relative error, shown for completeness.
* ``cosine`` = <t, r> / (|t| |r|) over the flattened arrays (1.0 when both are all zero).
* ``l2_rel_error`` = |t - r|_2 / |r|_2.

The pass criterion is element-wise, like ``numpy.allclose``: |t - r| <= atol + rtol * |r| for
every element, no NaN/Inf in either array, and, when ``min_cosine`` is given, cosine >= it.
An integer output (an arg-max index map, ids) also gets ``index_agreement``, the share of equal
indices; when ``min_cosine`` is given it is judged by that share >= :data:`MIN_INDEX_AGREEMENT`
instead of cosine (``min_index_agreement`` set, ``min_cosine`` None), a cosine of class numbers
meaning nothing; a test output carried as floats is read as round(value).
A NaN or Inf is a mismatch even where both arrays hold it (a model that outputs NaN on the data
proves nothing about it): the statistics are over the elements finite in both, and
``ref_nan``/``ref_inf``/``test_nan``/``test_inf`` count the others (:meth:`OutputMetrics.
nonfinite_text` names them); with no finite element the cosine is NaN.
An output whose reference is nearly zero everywhere (max |r| < :data:`DEGENERATE_SCALE`, e.g. an
untrained model's) gets a note (:meth:`Comparison.degenerate_text`): its cosine and relative
errors measure noise, so a failure there says more about the model or the data than the rewrite.
``needed_atol`` is the smallest atol that would pass at the given rtol, ``needed_rtol`` the
smallest rtol that would pass at the given atol (inf when an element with r = 0 is off by more
than atol).

Default tolerances (:data:`DEFAULT_RTOL`, atol = :data:`DEFAULT_ATOL_SCALE` x max |r| per output)
are the exact rules' (:data:`rewriter.verify.tolerance.EXACT_RTOL`); :func:`compare_within` takes
a :class:`~rewriter.verify.tolerance.Tolerance` from the policy and notes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rewriter.verify.tolerance import EXACT_RTOL, MIN_INDEX_AGREEMENT, Tolerance

EPS = 1e-6
#: Below this max |reference| an output is degenerate: cosine and relative errors measure noise
#: (an int8 output cannot even represent it: its scale is set by the calibration range).
DEGENERATE_SCALE = 1e-6
DEFAULT_RTOL = EXACT_RTOL
DEFAULT_ATOL_SCALE = EXACT_RTOL
#: What ``--accuracy COS`` and the summary judge an output by (:func:`reached`).
COSINE, INDEX_AGREEMENT = "cosine", "index agreement"

Tol = float | Mapping[str, float] | None


@dataclass
class OutputMetrics:
    """The comparison of one output."""

    name: str
    shape: list[int]
    atol: float
    rtol: float
    max_abs_error: float
    mean_abs_error: float
    max_rel_error: float
    max_elementwise_rel_error: float
    rmse: float
    cosine: float
    l2_rel_error: float
    ref_max_abs: float
    needed_atol: float
    needed_rtol: float
    mismatched: int  # elements outside atol + rtol * |ref|
    size: int
    nonfinite_mismatch: int = 0  # elements non-finite in either array
    ref_nan: int = 0
    ref_inf: int = 0
    test_nan: int = 0
    test_inf: int = 0
    min_cosine: float | None = None
    ok: bool = False
    note: str = ""
    #: Classifier outputs (one row of classes per sample): the share of samples whose arg-max
    #: class is the same in both; None for other outputs.
    top1_agreement: float | None = None
    #: The pass criterion when it is top-1 agreement (``--min-top1``) instead of cosine.
    min_top1: float | None = None
    #: Integer outputs (arg-max index maps, ids): the share of indices equal to the
    #: reference's (None for float outputs), and, when the comparison has a cosine, the
    #: criterion that replaces it (:data:`MIN_INDEX_AGREEMENT`; None: judged element-wise).
    index_agreement: float | None = None
    min_index_agreement: float | None = None
    integer: bool = False

    def to_json(self) -> dict[str, Any]:
        return {k: _finite(v) for k, v in asdict(self).items()}

    def nonfinite_text(self, ref: str = "reference", test: str = "candidate") -> str:
        """``logits: 10 NaN in the reference, 10 NaN + 2 Inf in the candidate`` (or "")."""
        parts = []
        for who, nan, inf in ((ref, self.ref_nan, self.ref_inf),
                              (test, self.test_nan, self.test_inf)):
            counts = [f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "Inf")) if n]
            if counts:
                parts.append(f"{' + '.join(counts)} in the {who}")
        return f"{self.name}: {', '.join(parts)}" if parts else ""


@dataclass
class Comparison:
    """All outputs compared; ``ok`` when every output passes its tolerance."""

    outputs: list[OutputMetrics]
    samples: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)

    @property
    def nonfinite(self) -> int:
        return sum(o.nonfinite_mismatch for o in self.outputs)

    def nonfinite_text(self, ref: str = "reference", test: str = "candidate") -> str:
        """Every output's NaN/Inf counts, ``; ``-joined ("" when all values are finite)."""
        return "; ".join(t for o in self.outputs if (t := o.nonfinite_text(ref, test)))

    def degenerate_text(self) -> str:
        """A hint naming the outputs whose reference is nearly zero ("" when none is)."""
        names = [f"{o.name} (max |ref| {o.ref_max_abs:.2g})" for o in self.outputs
                 if o.size and not o.note.startswith("shape") and o.ref_max_abs < DEGENERATE_SCALE]
        if not names:
            return ""
        return (f"the reference output is nearly zero everywhere: {', '.join(names)}; cosine "
                "and relative errors measure noise there (an untrained model? data it does not "
                "expect?)")

    def failing(self) -> list[OutputMetrics]:
        return [o for o in self.outputs if not o.ok]

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "samples": self.samples, "notes": list(self.notes),
                "outputs": {o.name: o.to_json() for o in self.outputs}}


def _finite(v: Any) -> Any:
    """JSON has no inf/nan: report them as strings."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _tol(tol: Tol, name: str, default: float) -> float:
    if tol is None:
        return default
    if isinstance(tol, Mapping):
        return float(tol.get(name, tol.get("*", default)))
    return float(tol)


def compare(ref: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray], atol: Tol = None,
            rtol: Tol = None, min_cosine: Tol = None, samples: int = 1,
            min_top1: float | None = None) -> Comparison:
    """Compare every output of ``ref`` with the same-named output of ``test``.

    ``atol``/``rtol``/``min_cosine`` are a number for all outputs or a dict by output name (key
    ``"*"`` for the rest). ``min_top1``: a classifier output (see :func:`top1_agreement`)
    passes on top-1 agreement >= it instead of ``min_cosine``. An output missing from ``test``
    raises ``KeyError``.
    """
    outputs = []
    for name, r in ref.items():
        if name not in test:
            raise KeyError(f"output {name!r} missing from the compared model")
        r64 = np.asarray(r, dtype=np.float64)
        scale = float(np.max(np.abs(r64[np.isfinite(r64)]), initial=0.0))
        a = _tol(atol, name, DEFAULT_ATOL_SCALE * scale)
        rt = _tol(rtol, name, DEFAULT_RTOL)
        mc = None if min_cosine is None else _tol(min_cosine, name, -1.0)
        outputs.append(compare_arrays(name, r, test[name], a, rt, mc, min_top1))
    return Comparison(outputs, samples=samples)


def compare_within(ref: Mapping[str, np.ndarray], test: Mapping[str, np.ndarray],
                   tolerance: Tolerance, samples: int = 1) -> Comparison:
    """:func:`compare` at ``tolerance``, whose note the comparison carries."""
    cmp = compare(ref, test, samples=samples, **tolerance.kwargs(),
                  min_top1=tolerance.min_top1)
    cmp.notes.append(tolerance.note)
    return cmp


def compare_arrays(name: str, ref: np.ndarray, test: np.ndarray, atol: float, rtol: float,
                   min_cosine: float | None = None,
                   min_top1: float | None = None) -> OutputMetrics:
    """The metrics of one output; a shape mismatch compares nothing and fails."""
    integer = np.issubdtype(np.asarray(ref).dtype, np.integer)
    r = np.asarray(ref, dtype=np.float64)
    t = np.asarray(test, dtype=np.float64)
    if integer and np.issubdtype(np.asarray(test).dtype, np.floating):
        t = np.rint(t)  # an index carried as a float (argmax_reduce_max): read as round(value)
    note = ""
    if r.shape != t.shape:
        if r.size != t.size:
            return _shape_mismatch(name, r, t, atol, rtol, min_cosine)
        note = f"shape {list(t.shape)} reshaped to {list(r.shape)}"
        t = t.reshape(r.shape)
    finite = np.isfinite(r) & np.isfinite(t)
    nonfinite_bad = int(r.size - np.count_nonzero(finite))
    r_f, t_f = r[finite], t[finite]
    diff = np.abs(t_f - r_f)
    absr = np.abs(r_f)
    scale = float(absr.max(initial=0.0))
    max_abs = float(diff.max(initial=0.0))
    m = OutputMetrics(
        name=name, shape=list(r.shape), atol=atol, rtol=rtol, max_abs_error=max_abs,
        mean_abs_error=float(diff.mean()) if diff.size else 0.0,
        max_rel_error=max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf),
        max_elementwise_rel_error=float((diff / np.maximum(absr, EPS)).max(initial=0.0)),
        rmse=float(np.sqrt(np.mean(diff ** 2))) if diff.size else 0.0,
        cosine=_cosine(r_f, t_f) if r_f.size or not r.size else math.nan,
        l2_rel_error=_l2_rel(r_f, t_f), ref_max_abs=scale,
        needed_atol=float(np.maximum(diff - rtol * absr, 0.0).max(initial=0.0)),
        needed_rtol=_needed_rtol(diff, absr, atol),
        mismatched=int(np.sum(diff > atol + rtol * absr)) + nonfinite_bad, size=int(r.size),
        nonfinite_mismatch=nonfinite_bad, ref_nan=int(np.isnan(r).sum()),
        ref_inf=int(np.isinf(r).sum()), test_nan=int(np.isnan(t).sum()),
        test_inf=int(np.isinf(t).sum()), min_cosine=min_cosine, note=note)
    m.top1_agreement = None if integer else top1_agreement(r, t)
    if integer and r.size:
        m.integer, m.index_agreement = True, float(np.mean(r == t))
    if integer and min_cosine is not None and r.size:
        m.min_index_agreement, m.min_cosine = MIN_INDEX_AGREEMENT, None
        m.ok = m.index_agreement >= MIN_INDEX_AGREEMENT
    elif min_top1 is not None and m.top1_agreement is not None:
        m.min_top1, m.min_cosine = min_top1, None
        m.ok = m.mismatched == 0 and m.top1_agreement >= min_top1
    else:
        m.ok = m.mismatched == 0 and (min_cosine is None or m.cosine >= min_cosine)
    return m


def reached(o: OutputMetrics) -> tuple[str, float]:
    """What an accuracy target (``--accuracy COS``) judges output ``o`` by, and the value it
    reached: ``("index agreement", share of equal indices)`` for an integer output (its cosine,
    of class numbers, means nothing), ``("cosine", cosine)`` otherwise. The target is the same
    number for both (``--accuracy 0.99`` asks index agreement >= 0.99, as the verdict does)."""
    if o.integer and o.index_agreement is not None:
        return INDEX_AGREEMENT, float(o.index_agreement)
    return COSINE, float(o.cosine)


def top1_agreement(ref: np.ndarray, test: np.ndarray) -> float | None:
    """For a classifier's output (samples stacked first, then ``[1, classes]`` or
    ``[classes]``, classes > 1): the share of samples whose arg-max class agrees; else None."""
    r, t = np.asarray(ref), np.asarray(test)
    if r.ndim < 2 or r.shape != t.shape or r.shape[-1] < 2 or int(np.prod(r.shape[1:-1])) != 1:
        return None
    r, t = r.reshape(-1, r.shape[-1]), t.reshape(-1, t.shape[-1])
    if not (np.isfinite(r).all() and np.isfinite(t).all()):
        return None
    return float(np.mean(r.argmax(-1) == t.argmax(-1)))


def _shape_mismatch(name: str, r: np.ndarray, t: np.ndarray, atol: float, rtol: float,
                    min_cosine: float | None) -> OutputMetrics:
    inf = math.inf
    return OutputMetrics(name=name, shape=list(r.shape), atol=atol, rtol=rtol, max_abs_error=inf,
                         mean_abs_error=inf, max_rel_error=inf, max_elementwise_rel_error=inf,
                         rmse=inf, cosine=0.0, l2_rel_error=inf, ref_max_abs=0.0,
                         needed_atol=inf, needed_rtol=inf, mismatched=int(r.size),
                         size=int(r.size), min_cosine=min_cosine, ok=False,
                         note=f"shape mismatch: {list(r.shape)} vs {list(t.shape)}")


def _cosine(r: np.ndarray, t: np.ndarray) -> float:
    nr, nt = float(np.linalg.norm(r)), float(np.linalg.norm(t))
    if nr == 0 and nt == 0:
        return 1.0
    if nr == 0 or nt == 0:
        return 0.0
    return float(np.dot(r.ravel(), t.ravel()) / (nr * nt))


def _l2_rel(r: np.ndarray, t: np.ndarray) -> float:
    nd, nr = float(np.linalg.norm(t - r)), float(np.linalg.norm(r))
    if nr == 0:
        return 0.0 if nd == 0 else math.inf
    return nd / nr


def _needed_rtol(diff: np.ndarray, absr: np.ndarray, atol: float) -> float:
    over = diff - atol
    bad = over > 0
    if not bad.any():
        return 0.0
    if np.any(bad & (absr == 0)):
        return math.inf
    return float((over[bad] / absr[bad]).max())


def stack_samples(runs: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Outputs of several runs concatenated on a new leading axis, by output name."""
    if not runs:
        return {}
    return {name: np.stack([np.asarray(run[name]) for run in runs]) for name in runs[0]}
