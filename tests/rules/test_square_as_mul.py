"""square_as_mul: Square becomes x * x, exactly, and the int8 converter quantizes it."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rules.square_as_mul import SquareAsMul
from rewriter.testing import assert_close_rel, dense_line, int8_tflite, op_types
from tests.rules._activation_checks import outputs, rewritten

RULE = SquareAsMul()
_W = np.random.default_rng(0).normal(0, 0.5, (1, 1, 4, 4)).astype(np.float32)


def test_replaces_square_with_mul_of_x_by_itself():
    _, result = rewritten(lambda x: tf.math.square(x + 1.0), RULE, (8,))
    ops = op_types(result.model)
    assert "Square" not in ops and ops["Mul"] == 1
    mul = next(n for n in result.model.graph_def.node if n.op == "Mul")
    assert mul.input[0] == mul.input[1]


def test_replaces_pow_2_and_leaves_pow_3():
    _, result = rewritten(lambda x: tf.math.pow(x, 2.0) + tf.math.pow(x, 3.0), RULE, (8,))
    ops = op_types(result.model)
    assert ops["Pow"] == 1 and ops["Mul"] == 1 and len(result.applied) == 1


def test_leaves_the_square_of_an_l2_normalization_and_says_why():
    """x * rsqrt(max(sum(x^2), eps)) becomes one L2_NORMALIZATION in the converter; a MUL there
    would undo that fusion (layernorm_l2norm emits this form for the Edge TPU)."""
    _, result = rewritten(lambda x: tf.math.l2_normalize(x, axis=-1), RULE, (1, 8))
    assert result.applied == [] and "L2_NORMALIZATION" in result.rejected[0].reason


def test_does_not_fire_on_int32_and_says_why():
    _, result = rewritten(tf.math.square, RULE, (8,), dtype="int32")
    assert result.applied == [] and "int32" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_1e3_to_1e3():
    before, result = rewritten(tf.math.square, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-1e3, 1e3, 8001)), rtol=1e-5)


def test_int8_power_spectrum_has_no_float_island():
    """|conv(x)|^2: SQUARE stays float32 in int8 conversion; x*x is one int8 MUL with an int8
    error within 2% of the output's scale (the square doubles the relative step)."""
    before, result = rewritten(lambda x: tf.math.square(tf.nn.conv2d(x, _W, 1, "SAME")), RULE)
    ops_before, _ = int8_tflite(before)
    ops_after, err_after = int8_tflite(result.model)
    assert ("SQUARE", "float32") in ops_before
    assert ("MUL", "int8") in ops_after
    assert [o for o, dt in ops_after if dt == "float32"] == ["DEQUANTIZE"]
    assert err_after <= 0.02
