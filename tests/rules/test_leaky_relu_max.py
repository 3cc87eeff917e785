"""leaky_relu_max: LeakyRelu(a) becomes max(x, a*x) for 0 <= a <= 1, exactly."""

from __future__ import annotations

import tensorflow as tf

from rewriter.rules.leaky_relu_max import LeakyReluMax
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = LeakyReluMax()


def test_replaces_leaky_relu_with_maximum_and_mul():
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 0.1), RULE, (8,))
    assert dict(op_types(result.model)) == {"Maximum": 1, "Mul": 1}


def test_does_not_fire_for_alpha_above_one_and_says_why():
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 1.5), RULE, (8,))
    assert result.applied == []
    assert "alpha 1.5 is outside [0, 1]" in result.rejected[0].reason


def test_equal_within_1e5_relative_for_alphas_in_0_to_1():
    x = dense_line(-20.0, 20.0, 8001)
    for alpha in (0.0, 0.01, 0.2, 0.3, 1.0):
        before, result = rewritten(lambda v, a=alpha: tf.nn.leaky_relu(v, a), RULE, (8001,))
        assert len(result.applied) == 1
        assert_close_rel(*outputs(before, result.model, x), rtol=1e-5)


def test_tflite_float_has_maximum_and_no_leaky_relu(tmp_path):
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 0.2), RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"MAXIMUM", "MUL"}
