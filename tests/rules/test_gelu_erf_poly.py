"""gelu_erf_poly: GELU (erfc/erf form) by A&S 7.1.26, no Erf(c), within 2.2e-7 over [-12, 12]."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from rewriter.rules.gelu_erf_poly import GeluErfPoly
from rewriter.testing import dense_line, op_types
from tests.rules._activation_checks import max_abs, outputs, rewritten, tflite_ops

RULE = GeluErfPoly()
N = 48001


def keras_gelu(x):
    return keras.activations.gelu(x)


def erf_gelu(x):
    return 0.5 * x * (1.0 + tf.math.erf(x / np.sqrt(2.0).astype(np.float32)))


def test_replaces_keras3_erfc_gelu_with_abs_exp_rsqrt_and_no_erfc():
    _, result = rewritten(keras_gelu, RULE, (8,))
    ops = op_types(result.model)
    assert "Erfc" not in ops and "Neg" not in ops
    assert ops["Exp"] == 1 and ops["Rsqrt"] == 1 and ops["Abs"] == 1 and ops["Relu"] == 1
    assert [a.rule for a in result.applied] == ["gelu_erf_poly"]


def test_matches_the_erf_form_too():
    _, result = rewritten(erf_gelu, RULE, (8,))
    assert "Erf" not in op_types(result.model)
    assert len(result.applied) == 1


def test_does_not_fire_when_erfc_is_also_read_elsewhere():
    def shared(x):
        e = tf.math.erfc(-x * np.float32(np.sqrt(0.5)))
        return 0.5 * x * e + e

    _, result = rewritten(shared, RULE, (8,))
    assert result.applied == []
    assert "also read by" in result.rejected[0].reason


def test_does_not_match_a_gelu_with_the_wrong_scale():
    _, result = rewritten(lambda x: 0.5 * x * tf.math.erfc(-x * 0.5), RULE, (8,))
    assert result.applied == [] and result.rejected == []


def test_float64_error_within_the_stated_bound_over_its_range():
    lo, hi = RULE.bound.input_range
    before, result = rewritten(keras_gelu, RULE, (N,), dtype="float64")
    got, want = outputs(before, result.model, np.linspace(lo, hi, N))
    assert max_abs(got, want) <= RULE.bound.max_abs_error
    assert max_abs(got, want) > 1e-8  # it is an approximation: the bound is not vacuous


def test_float32_error_within_the_bound_plus_float32_rounding():
    before, result = rewritten(keras_gelu, RULE, (N,))
    got, want = outputs(before, result.model, dense_line(-12.0, 12.0, N))
    assert max_abs(got, want) <= RULE.bound.max_abs_error + 12.0 * 2.0**-22


def test_tflite_float_and_int8_have_no_gelu_and_no_flex(tmp_path):
    _, result = rewritten(keras_gelu, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert "GELU" not in ops and "EXP" in ops
    ops8, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert "GELU" not in ops8 and float_ops == set()
