"""mish_sigmoid: x*tanh(softplus(x)) becomes x*s(2-s)*rsqrt(1+(1-s)^2)^2, exactly."""

from __future__ import annotations

import keras
import tensorflow as tf

from rewriter.rules.mish_sigmoid import MishSigmoid
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = MishSigmoid()


def mish(x):
    return keras.activations.mish(x)


def test_replaces_softplus_tanh_with_sigmoid_and_rsqrt():
    _, result = rewritten(mish, RULE, (8,))
    ops = op_types(result.model)
    assert "Softplus" not in ops and "Tanh" not in ops
    assert ops["Sigmoid"] == 1 and ops["Rsqrt"] == 1 and "RealDiv" not in ops


def test_matches_the_commuted_product():
    _, result = rewritten(lambda x: tf.tanh(tf.nn.softplus(x)) * x, RULE, (8,))
    assert len(result.applied) == 1


def test_does_not_fire_when_tanh_is_also_read_elsewhere():
    def shared(x):
        t = tf.tanh(tf.nn.softplus(x))
        return x * t + t

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "Tanh" in result.rejected[0].reason and "also read" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(mish, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-20.0, 20.0, 8001)), rtol=1e-5)


def test_tflite_float_and_int8_have_no_exp_log_tanh_div_and_no_float_op(tmp_path):
    _, result = rewritten(mish, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert not ops & {"EXP", "LOG", "TANH", "DIV"} and "RSQRT" in ops
    _, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert float_ops == set()
