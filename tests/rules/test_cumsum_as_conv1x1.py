"""cumsum_as_conv1x1: a cumulative sum (any axis; exclusive, reverse) as one CONV_2D with a
triangular kernel of ones, exactly; in full int8 no CUMSUM (which the converter leaves in float,
as ``check`` now predicts) and every op int8."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.cumsum_as_conv1x1 import MAX_LENGTH, CumsumAsConv1x1
from rewriter.testing import assert_close_rel, int8_tflite, model_from_function, op_types

RULE = CumsumAsConv1x1()
RNG = np.random.default_rng(6)


@pytest.mark.parametrize("shape,axis", [((1, 16, 8), 1), ((1, 16, 8), -1), ((2, 3, 4, 5), 2),
                                        ((7,), 0)])
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True),
                                               (True, True)])
def test_cumsum_is_one_conv_and_matches(shape, axis, exclusive, reverse):
    model = model_from_function(
        lambda x: tf.math.cumsum(x, axis=axis, exclusive=exclusive, reverse=reverse), [shape])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["cumsum_as_conv1x1"]
    ops = op_types(result.model)
    assert "Cumsum" not in ops and ops["Conv2D"] == 1
    x = RNG.normal(0, 3, shape).astype("f4")
    got, want = result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"]
    assert_close_rel(got, want)
    assert_close_rel(got, np.asarray(want, np.float64))  # and the float64 sums
    ref = np.cumsum(np.flip(x, axis) if reverse else x, axis=axis, dtype=np.float64)
    ref = np.flip(ref, axis) if reverse else ref
    if exclusive:
        ref = ref - np.asarray(x, np.float64)
    assert_close_rel(got, ref)


def test_too_long_an_axis_is_refused():
    model = model_from_function(lambda x: tf.math.cumsum(x, axis=-1), [(1, MAX_LENGTH + 1)])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and f"longer than {MAX_LENGTH}" in result.rejected[0].reason


def test_int8_every_op_int8_where_cumsum_stayed_float():
    model = model_from_function(lambda x: tf.math.cumsum(x, axis=1), [(1, 16, 8)])
    before, _ = int8_tflite(model)
    assert ("CUMSUM", "float32") in before, before  # what check now predicts
    ops, err = int8_tflite(apply_rules(model, [RULE]).model)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert inner and all(dt == "int8" for _, dt in inner), ops
    assert err < 0.03, err


def test_check_predicts_the_float_island():
    from rewriter.targets import load_target

    model = model_from_function(lambda x: tf.math.cumsum(x, axis=1), [(1, 16, 8)])
    verdicts = load_target("tflm").check_graph(model, "int8").verdicts
    [cumsum] = [v for v in verdicts if v.op == "Cumsum"]
    assert not cumsum.supported and "float" in cumsum.reason
