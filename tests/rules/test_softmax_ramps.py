"""softmax_ramps: Softmax/LogSoftmax over channels from REDUCE_MAX, SUB, MEAN, MUL and fitted
ramps; within the composed bound it states, int8 everywhere, refused without data."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules import get_rule
from rewriter.testing import int8_tflite, model_from_function, op_types

RULE = get_rule("softmax_ramps")
SHAPE = (1, 4, 4, 8)


def _data(n=4, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x0": rng.normal(0, 1.5, SHAPE).astype("f4")} for _ in range(n)]


@pytest.mark.parametrize("fn", [tf.nn.softmax, tf.nn.log_softmax])
def test_rewritten_within_the_stated_bound_on_the_data(fn):
    model = model_from_function(lambda x: fn(x), [SHAPE])
    result = apply_rules(model, [RULE], data=_data())
    [applied] = result.applied
    assert set(op_types(result.model)) <= RULE.emits
    bound = applied.bound.max_abs_error
    assert 0 < bound < 0.05 and "calibration samples" in applied.bound.note
    # the bound holds where x - max(x) and the channel mean stay in the fitted ranges: the
    # calibration data, and the same scaled by 0.9 (shallower, inside the 10% margins)
    for feeds in _data() + [{"x0": 0.9 * d["x0"]} for d in _data()]:
        got = result.model.run(feeds)["output_0"].astype(np.float64)
        want = model.run(feeds)["output_0"]
        assert np.abs(got - want).max() <= bound


def test_softmax_rows_still_sum_to_about_one():
    model = model_from_function(lambda x: tf.nn.softmax(x), [SHAPE])
    result = apply_rules(model, [RULE], data=_data())
    got = result.model.run(_data(seed=2)[0])["output_0"]
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=0.02)


def test_int8_every_op_int8_and_close(tmp_path):
    model = model_from_function(lambda x: tf.nn.softmax(x * 3.0), [SHAPE])
    result = apply_rules(model, [RULE], data=[{"x0": d["x0"] / 1.5} for d in _data()])
    ops, rel = int8_tflite(result.model, -1.0, 1.0)
    assert {o for o, dt in ops if dt == "float32"} <= {"DEQUANTIZE"}
    assert "SOFTMAX" not in {o for o, _ in ops} and rel < 0.05


def test_refused_without_data():
    model = model_from_function(lambda x: tf.nn.softmax(x), [SHAPE])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "calibration data" in result.rejected[0].reason
