"""div_reciprocal_ramps: x / y with a data-dependent divisor as x * r(y), r fitted to 1/y.

A per-clip normalisation (Basic Pitch's ``div_no_nan(x - min, max - min)``): the DIV (and
div_no_nan's EQUAL/SELECT_V2) is gone, the float error stays within the bound each application
states on inputs like the calibration data, the int8 file passes the Edge TPU table, and a
divisor whose range contains 0 is refused with the range.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules import get_rule
from rewriter.testing import model_from_function, op_types

RULE = get_rule("div_reciprocal_ramps")
SHAPE = (1, 16, 8)


def _normalise(x):
    lo = tf.reduce_min(x, axis=[1, 2], keepdims=True)
    hi = tf.reduce_max(x, axis=[1, 2], keepdims=True)
    return tf.math.divide_no_nan(x - lo, hi - lo)


def _clips(n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Clips whose spread (the divisor) varies from 2 to 9."""
    rng = np.random.default_rng(seed)
    return [{"x0": (rng.uniform(-1, 1, SHAPE) * rng.uniform(1, 4.5) + rng.uniform(-3, 3))
             .astype("f4")} for _ in range(n)]


def test_a_normalisation_becomes_a_product_within_its_bound():
    model = model_from_function(_normalise, [SHAPE])
    result = apply_rules(model, [RULE], data=_clips(16, 0))
    [applied] = result.applied
    ops = op_types(result.model)
    assert "DivNoNan" not in ops and "RealDiv" not in ops and ops["Mul"] >= 1
    bound = applied.bound
    assert "1/y" in bound.note and 0 < bound.max_abs_error < 0.02
    lo, hi = bound.input_range
    assert 0 < lo < 2.0 and hi > 8.0  # the divisors' range, widened
    errs = []
    for feeds in _clips(32, 1):  # other clips of the same kind
        want = model.run(feeds)["output_0"]
        got = result.model.run(feeds)["output_0"]
        errs.append(np.max(np.abs(got - want)))
    assert max(errs) <= bound.max_abs_error
    assert max(errs) > 1e-6  # approximate, and measured so


def test_a_divisor_whose_range_contains_zero_is_refused_with_the_range():
    model = model_from_function(lambda x: tf.math.divide_no_nan(x, x * 0.5 + 0.1), [SHAPE])
    rng = np.random.default_rng(0)
    data = [{"x0": rng.uniform(-1, 1, SHAPE).astype("f4")} for _ in range(4)]
    result = apply_rules(model, [RULE], data=data)
    assert result.applied == []
    assert "contains 0" in result.rejected[0].reason


def test_a_constant_divisor_is_left_to_the_converter():
    model = model_from_function(lambda x: x / 3.0, [SHAPE])
    result = apply_rules(model, [RULE], data=_clips(4, 0))
    assert result.applied == []


def test_int8_file_passes_the_edge_tpu_table_and_loses_no_more_than_int8_div(tmp_path):
    """The int8 file of the original has the DIV (the Edge TPU cuts there); the rewrite's has
    none, and its error is that of the int8 DIV itself (measured: 6.05 vs 6.00 output steps on
    these clips, where the spread of the clip is quantised along with it)."""
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.verify.runners import run_tflite

    model = model_from_function(_normalise, [SHAPE])
    data = _clips(32, 0)
    target = load_target("edgetpu")
    paths = {"before": export_tflite(model, tmp_path / "before.tflite", quantize="int8",
                                     calibration=data).path}
    assert target.check_artifact(str(paths["before"])).cut is not None
    rewritten = apply_rules(model, [RULE], data=data).model
    paths["after"] = export_tflite(rewritten, tmp_path / "after.tflite", quantize="int8",
                                   calibration=data).path
    check = target.check_artifact(str(paths["after"]))
    assert check.cut is None and all(v.supported for v in check.verdicts)
    worst = {}
    for name, path in paths.items():
        worst[name] = max(float(np.max(np.abs(next(iter(run_tflite(path, f).values()))
                                              - model.run(f)["output_0"])))
                          for f in _clips(8, 2))
    step = 1 / 255  # outputs in [0, 1]
    assert worst["after"] <= worst["before"] + 0.5 * step
    assert worst["after"] < 8 * step


def test_few_calibration_clips_still_bound_other_clips_of_the_same_kind():
    """The divisor's range over a few calibration clips is narrower than other clips': Basic
    Pitch's normalized_log divisor spans [89.5, 105.3] dB over 16 calibration clips, but
    [86.9, 111.2] over 32 held-back ones, so a fit widened by 10% extrapolated flat there (onset
    max abs error 0.049 against a stated 0.00019 on ethos-u55-128). The fit on 1/y is widened by
    the range's own width each side (at most halfway to 0): clips of the same kind stay within
    the bound stated."""
    model = model_from_function(_normalise, [SHAPE])
    cal = _clips(6, 3)
    result = apply_rules(model, [RULE], data=cal)
    [applied] = result.applied
    bound = applied.bound
    spreads = [float(np.ptp(c["x0"])) for c in cal]
    others = _clips(64, 4)
    outside = [float(np.ptp(c["x0"])) for c in others]
    seen_lo, seen_hi = min(spreads), max(spreads)
    width = seen_hi - seen_lo
    # other clips leave the calibration's range by more than the old 10% margin
    assert min(outside) < seen_lo - 0.1 * width or max(outside) > seen_hi + 0.1 * width
    errs = [float(np.max(np.abs(result.model.run(f)["output_0"] - model.run(f)["output_0"])))
            for f in others]
    assert max(errs) <= bound.max_abs_error, (max(errs), bound.max_abs_error, bound.note)
    assert bound.max_abs_error < 0.02  # still a tight bound
