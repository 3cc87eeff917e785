"""gelu_tanh_as_sigmoid: approximate=True GELU re-spelt x*sigmoid(2u), exactly, no POW/GELU."""

from __future__ import annotations

import keras
import tensorflow as tf

from rewriter.rules.gelu_tanh_as_sigmoid import GeluTanhAsSigmoid
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = GeluTanhAsSigmoid()


def tanh_gelu(x):
    return keras.activations.gelu(x, approximate=True)


def cube_gelu(x):
    return 0.5 * x * (1.0 + tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))


def test_replaces_pow_and_tanh_with_mul_add_sigmoid():
    _, result = rewritten(tanh_gelu, RULE, (8,))
    assert set(op_types(result.model)) == {"Mul", "AddV2", "Sigmoid"}
    assert len(result.applied) == 1


def test_matches_x_times_x_times_x_spelling():
    _, result = rewritten(cube_gelu, RULE, (8,))
    assert len(result.applied) == 1 and "Tanh" not in op_types(result.model)


def test_does_not_fire_when_tanh_is_also_read_elsewhere():
    def shared(x):
        t = tf.tanh(0.7978845608 * (x + 0.044715 * x * x * x))
        return 0.5 * x * (1.0 + t) + t

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "Tanh" in result.rejected[0].reason and "also read" in result.rejected[0].reason


def test_equals_the_tanh_form_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(tanh_gelu, RULE, (8001,))
    got, want = outputs(before, result.model, dense_line(-20.0, 20.0, 8001))
    assert_close_rel(got, want, rtol=1e-5)


def test_tflite_float_has_no_gelu_no_pow_no_tanh(tmp_path):
    _, result = rewritten(tanh_gelu, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"MUL", "ADD", "LOGISTIC"}
