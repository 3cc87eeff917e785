"""gelu_sigmoid_approx: GELU as x*sigmoid(1.702x), within 2.1e-2 over [-12, 12]."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from rewriter.rules.gelu_sigmoid_approx import GeluSigmoidApprox
from rewriter.testing import op_types
from tests.rules._activation_checks import max_abs, outputs, rewritten, tflite_ops

RULE = GeluSigmoidApprox()
N = 48001


def keras_gelu(x):
    return keras.activations.gelu(x)


def test_replaces_gelu_with_one_sigmoid_and_two_muls():
    _, result = rewritten(keras_gelu, RULE, (8,))
    assert dict(op_types(result.model)) == {"Mul": 2, "Sigmoid": 1}


def test_does_not_fire_when_the_erfc_is_shared():
    def shared(x):
        e = tf.math.erfc(-x * np.float32(np.sqrt(0.5)))
        return 0.5 * x * e - e

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == [] and "Erfc" in result.rejected[0].reason


def test_float64_error_within_the_stated_bound_and_close_to_it():
    lo, hi = RULE.bound.input_range
    before, result = rewritten(keras_gelu, RULE, (N,), dtype="float64")
    err = max_abs(*outputs(before, result.model, np.linspace(lo, hi, N)))
    assert 2.0e-2 < err <= RULE.bound.max_abs_error


def test_tflite_float_has_logistic_and_no_gelu(tmp_path):
    _, result = rewritten(keras_gelu, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"MUL", "LOGISTIC"}
