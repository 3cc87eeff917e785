"""leaky_relu_prelu: LeakyRelu(a) becomes relu(x) - a*relu(-x), which TFLite converts to PRELU."""

from __future__ import annotations

import tensorflow as tf

from rewriter.rules.leaky_relu_prelu import LeakyReluPrelu
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = LeakyReluPrelu()


def test_replaces_leaky_relu_with_the_prelu_pattern_and_rank_minus_one_alpha():
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 0.1), RULE, (1, 4, 4, 4))
    assert dict(op_types(result.model)) == {"Relu": 2, "Neg": 1, "Mul": 1, "AddV2": 1}
    alpha = [n for n in result.model.graph_def.node if n.name.endswith("/neg_alpha")]
    shape = [d.size for d in alpha[0].attr["value"].tensor.tensor_shape.dim]
    assert shape == [1, 1, 1]


def test_does_not_fire_on_a_rank_1_input_and_says_why():
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 0.1), RULE, (8,))
    assert result.applied == []
    assert "input rank is 1" in result.rejected[0].reason


def test_equal_within_1e5_relative_also_for_alpha_outside_0_1():
    x = dense_line(-20.0, 20.0, 8000).reshape(1, 8000)
    for alpha in (0.2, 1.5, -0.3):
        before, result = rewritten(lambda v, a=alpha: tf.nn.leaky_relu(v, a), RULE, (1, 8000))
        assert_close_rel(*outputs(before, result.model, x), rtol=1e-5)


def test_tflite_float_and_int8_are_a_single_prelu(tmp_path):
    _, result = rewritten(lambda x: tf.nn.leaky_relu(x, 0.2), RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"PRELU"}
    ops8, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert ops8 == {"PRELU"} and float_ops == set()
