"""Error histograms of one stage's outputs against the reference, for the report's plots.

Computed where the outputs are (the job's verify steps, ``rewrite verify``), stored as plain
JSON-serialisable data under ``report.json``'s ``plots.histograms``; :mod:`rewriter.report.html`
only draws them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

MAX_BINS = 40


def error_histogram(reference: np.ndarray, test: np.ndarray) -> dict[str, Any]:
    """Histogram of |test - reference| over log10 bins (JSON-serialisable).

    ``{"lo": a, "hi": b, "counts": [...], "zeros": n, "nonfinite": n, "total": n,
    "max_abs_error": x}``: bin k covers ``10**(lo + k (hi - lo) / len(counts))`` upwards.
    """
    r = np.asarray(reference, np.float64).ravel()
    t = np.asarray(test, np.float64).ravel()
    if r.size != t.size:
        return {"error": f"sizes differ: {r.size} vs {t.size}", "total": int(r.size)}
    fin = np.isfinite(r) & np.isfinite(t)
    d = np.abs(t[fin] - r[fin])
    nz = d[d > 0]
    out: dict[str, Any] = {"zeros": int(np.sum(d == 0)), "nonfinite": int(np.sum(~fin)),
                           "total": int(r.size), "max_abs_error": float(d.max(initial=0.0))}
    if nz.size == 0:
        return {**out, "lo": 0, "hi": 0, "counts": []}
    logs = np.log10(nz)
    lo, hi = math.floor(float(logs.min())), math.ceil(float(logs.max()))
    hi = max(hi, lo + 1)
    bins = int(min(MAX_BINS, max(8, 4 * (hi - lo))))
    counts, _ = np.histogram(logs, bins=bins, range=(lo, hi))
    return {**out, "lo": lo, "hi": hi, "counts": [int(c) for c in counts]}


def error_histograms(reference: Mapping[str, np.ndarray],
                     test: Mapping[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """:func:`error_histogram` of every output of ``reference`` found in ``test``."""
    return {name: error_histogram(r, test[name]) for name, r in reference.items() if name in test}
