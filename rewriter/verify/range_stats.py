"""Range statistics of a quantised tensor: what one quantisation step leaves of its float values.

Measured by :func:`rewriter.verify.int8_layers.int8_layer_errors` on the verification samples
for every quantised tensor of an int8 artifact (see that module's docstring): the share of its
nonzero float values below one step (``below_step``), below one int16 step over the same range
(``below_int16_step``), its median magnitude and its share of zeros; :func:`range_section` is the
target-independent part of the report's ``int8_layers.range`` (:mod:`rewriter.tune.int8_range` adds
the remedies).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: A quantised tensor is range-starved when more than this share of its nonzero float values is
#: below one quantisation step. At 0.5 the median value itself is held by 0 or 1 step (relative
#: error >= 50%); a well-conditioned tensor (a Gaussian-like one whose peak is ~5 standard
#: deviations, held by 255 steps) has ~2% of its values there, a heavy-tailed one 10-20%.
STARVED = 0.5
#: Values below this share of the largest magnitude a quantised tensor holds count as zero.
NEGLIGIBLE = 2.0 ** -16
#: Ops whose int8 output step is fixed by the TFLite int8 spec (1/256 for SOFTMAX and LOGISTIC,
#: 1/128 for TANH), not calibrated: a confident classifier's probabilities are mostly below it,
#: and neither a cut nor a compressed range changes that; they are measured, never flagged.
FIXED_RANGE = frozenset({"SOFTMAX", "LOGISTIC", "TANH", "LOG_SOFTMAX"})
#: Nonzero values kept per tensor and sample for the median (a strided subsample).
_MEDIAN_KEEP = 4096



class RangeStats:
    """What one quantisation step of a tensor leaves of its float values (see the module docstring)."""

    def __init__(self, tfl: Any, index: int) -> None:
        self.step = tfl.step(index)
        self.step16 = None
        self.floor = 0.0
        if self.step is not None:
            d = tfl.details[index]
            info = np.iinfo(np.dtype(d["dtype"]))
            q = d.get("quantization_parameters") or {}
            zp = float(np.asarray(q.get("zero_points", [0]))[0])
            held = max(abs(info.min - zp), abs(info.max - zp)) * self.step
            self.step16 = held / 32767
            self.floor = held * NEGLIGIBLE
        self.small = self.small16 = self.nonzero = self.total = self.positive = 0
        self.kept: list[np.ndarray] = []

    def add(self, ref: np.ndarray) -> None:
        a = np.abs(np.asarray(ref, np.float64)).ravel()
        a = a[np.isfinite(a)]
        nz = a[a > self.floor]
        self.total += a.size
        self.nonzero += nz.size
        if self.step is not None:
            self.small += int(np.count_nonzero(nz < self.step))
            # int16 loses what is below its own step, the negligible values too
            self.small16 += int(np.count_nonzero((a > 0) & (a < self.step16)))
            self.positive += int(np.count_nonzero(a))
        self.kept.append(nz[:: max(1, nz.size // _MEDIAN_KEEP)].astype(np.float32))

    def fill(self, row: Any) -> Any:
        kept = np.concatenate(self.kept) if self.kept else np.zeros(0, np.float32)
        row.median_abs = float(np.median(kept)) if kept.size else 0.0
        row.zeros = 1 - self.nonzero / self.total if self.total else 0.0
        if self.step is not None:
            row.below_step = self.small / self.nonzero if self.nonzero else 0.0
            row.below_int16_step = self.small16 / self.positive if self.positive else 0.0
        return row


def range_section(layers: Any) -> dict[str, Any]:
    """The target-independent part of the range diagnosis: the threshold, the starved tensors
    and the one with the largest share below one step (:func:`rewriter.tune.int8_range.diagnose`
    adds the remedies)."""
    quantised = [x for x in layers.ops if x.below_step is not None and x.op not in FIXED_RANGE]
    worst = max(quantised, key=lambda x: x.below_step or 0.0, default=None)
    return {"threshold": STARVED,
            "measured": "share of a quantised tensor's nonzero float values (verification "
                        "samples) whose magnitude is below one quantisation step; values "
                        f"below {NEGLIGIBLE:.3g} of the largest it holds count as zero",
            "tensors": [_starved_json(x) for x in quantised if x.starved],
            "worst": _starved_json(worst) if worst is not None else None,
            "diagnosis": []}


def _fin(v: Any) -> Any:
    """A non-finite float as its text (JSON has no NaN), anything else as it is."""
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


def _starved_json(x: Any) -> dict[str, Any]:
    return {"node": x.node, "op": x.op, "index": x.index, "tensor": x.tensor,
            "dtype": x.dtype, "step": _fin(x.step), "peak": _fin(x.ref_max_abs),
            "median_abs": _fin(x.median_abs), "below_step": _fin(x.below_step),
            "below_int16_step": _fin(x.below_int16_step), "zeros": _fin(x.zeros),
            "starved": x.starved}
