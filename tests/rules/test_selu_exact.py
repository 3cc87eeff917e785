"""selu_exact: Selu becomes l*relu(x) + l*a*exp(min(x,0)) - l*a, exactly (no Select)."""

from __future__ import annotations

import tensorflow as tf

from rewriter.rules.selu_exact import SeluExact
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = SeluExact()


def test_replaces_selu_with_relu_sub_exp_mul_add():
    _, result = rewritten(tf.nn.selu, RULE, (8,))
    ops = op_types(result.model)
    assert "Selu" not in ops
    assert set(ops) == {"Relu", "Sub", "Exp", "Mul", "AddV2"}


def test_does_not_fire_on_bfloat16_and_says_why():
    _, result = rewritten(tf.nn.selu, RULE, (8,), dtype="bfloat16")
    assert result.applied == [] and "not a float type" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(tf.nn.selu, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-20.0, 20.0, 8001)), rtol=1e-5)


def test_tflite_float_has_no_select_or_greater(tmp_path):
    _, result = rewritten(tf.nn.selu, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert not ops & {"SELECT", "SELECT_V2", "GREATER"} and "EXP" in ops


def test_int8_keeps_the_positive_half_no_shared_scale_clipping():
    from rewriter.testing import int8_tflite

    _, result = rewritten(tf.nn.selu, RULE)
    ops, rel = int8_tflite(result.model, -4.0, 4.0)
    assert {o for o, dt in ops if dt == "float32"} <= {"DEQUANTIZE"}
    assert rel < 0.03  # with MINIMUM(x, 0) the positive half was clipped: error 1.0
