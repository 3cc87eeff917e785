"""hard_sigmoid_min_max: Keras 3 relu6(x+3)/6 becomes min(relu(x/6 + 1/2), 1), exactly."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
import tf_keras

from rewriter.rules.hard_sigmoid_min_max import HardSigmoidMinMax
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = HardSigmoidMinMax()


def hard_sigmoid(x):
    return keras.activations.hard_sigmoid(x)


def test_replaces_the_division_with_mul_add_relu_minimum():
    _, result = rewritten(hard_sigmoid, RULE, (8,))
    assert dict(op_types(result.model)) == {"Mul": 1, "AddV2": 1, "Relu": 1, "Minimum": 1}


def test_does_not_match_the_keras2_hard_sigmoid_a_different_function():
    before, result = rewritten(lambda x: tf_keras.activations.hard_sigmoid(x), RULE, (8,))
    assert result.applied == [] and result.rejected == []
    x = np.array([-2.5, -1.0, 1.0], np.float32)
    k2 = before.run({"x0": np.pad(x, (0, 5))})["output_0"][:3]
    k3 = rewritten(hard_sigmoid, RULE, (8,))[0].run({"x0": np.pad(x, (0, 5))})["output_0"][:3]
    assert np.max(np.abs(k2 - k3)) > 0.02  # clip(0.2x + 0.5) is not relu6(x + 3)/6


def test_does_not_fire_when_the_relu6_is_also_read_elsewhere():
    def shared(x):
        r = tf.nn.relu6(x + 3.0)
        return r / 6.0 + r

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "Relu6" in result.rejected[0].reason and "also read" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(hard_sigmoid, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-20.0, 20.0, 8001)), rtol=1e-5)


def test_tflite_float_has_no_div_and_x_times_it_is_not_fused_into_hard_swish(tmp_path):
    _, result = rewritten(lambda x: x * keras.activations.hard_sigmoid(x), RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert "DIV" not in ops and "HARD_SWISH" not in ops and "MINIMUM" in ops
