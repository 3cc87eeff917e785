"""gelu_tanh_approx: erf-form GELU by the tanh approximation, spelt x*sigmoid(2u), <= 4.8e-4."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from rewriter.rules.gelu_tanh_approx import GeluTanhApprox
from rewriter.testing import dense_line, op_types
from tests.rules._activation_checks import max_abs, outputs, rewritten, tflite_ops

RULE = GeluTanhApprox()
N = 48001


def keras_gelu(x):
    return keras.activations.gelu(x)


def test_replaces_gelu_with_mul_add_sigmoid_only():
    _, result = rewritten(keras_gelu, RULE, (8,))
    ops = op_types(result.model)
    assert set(ops) == {"Mul", "AddV2", "Sigmoid"}
    assert ops["Sigmoid"] == 1 and len(result.applied) == 1


def test_does_not_fire_when_the_erfc_is_also_read_elsewhere():
    def shared(x):
        e = tf.math.erfc(-x * np.float32(np.sqrt(0.5)))
        return 0.5 * x * e * e

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "Erfc" in result.rejected[0].reason
    assert "is also read by" in result.rejected[0].reason


def test_does_not_match_the_tanh_form_itself():
    _, result = rewritten(lambda x: keras.activations.gelu(x, approximate=True), RULE, (8,))
    assert result.applied == [] and op_types(result.model)["Tanh"] == 1


def test_float64_error_within_the_stated_bound_and_close_to_it():
    lo, hi = RULE.bound.input_range
    before, result = rewritten(keras_gelu, RULE, (N,), dtype="float64")
    err = max_abs(*outputs(before, result.model, np.linspace(lo, hi, N)))
    assert 4.5e-4 < err <= RULE.bound.max_abs_error


def test_float32_error_within_the_bound():
    before, result = rewritten(keras_gelu, RULE, (N,))
    err = max_abs(*outputs(before, result.model, dense_line(-12.0, 12.0, N)))
    assert err <= RULE.bound.max_abs_error + 12.0 * 2.0**-22


def test_tflite_float_and_int8_are_not_refused_into_gelu(tmp_path):
    _, result = rewritten(keras_gelu, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"MUL", "ADD", "LOGISTIC"}
    ops8, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert ops8 == {"MUL", "ADD", "LOGISTIC"} and float_ops == set()


def test_erf_form_without_the_rule_does_not_convert(tmp_path):
    """The baseline: erf GELU written by hand needs Flex, which the exporter refuses."""
    import pytest

    from rewriter.export import ExportError
    from rewriter.testing import model_from_function

    model = model_from_function(lambda x: 0.5 * x * (1.0 + tf.math.erf(x * 0.7)), [(1, 4)])
    with pytest.raises(ExportError, match="Erf"):
        tflite_ops(model, tmp_path)
