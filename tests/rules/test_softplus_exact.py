"""softplus_exact: Softplus becomes relu(x) + log(1 + exp(-|x|)), exactly and without overflow."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rules.softplus_exact import SoftplusExact
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = SoftplusExact()


def test_replaces_softplus_with_relu_abs_exp_log():
    _, result = rewritten(tf.nn.softplus, RULE, (8,))
    ops = op_types(result.model)
    assert "Softplus" not in ops and "Neg" not in ops
    assert ops["Exp"] == 1 and ops["Log"] == 1 and ops["Relu"] == 1


def test_does_not_fire_on_bfloat16_and_says_why():
    _, result = rewritten(tf.nn.softplus, RULE, (8,), dtype="bfloat16")
    assert result.applied == [] and "not a float type" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_100_to_100():
    before, result = rewritten(tf.nn.softplus, RULE, (8001,))
    got, want = outputs(before, result.model, dense_line(-100.0, 100.0, 8001))
    assert_close_rel(got, want, rtol=1e-5)
    assert np.all(np.isfinite(got))


def test_tflite_float_and_int8_leave_no_softplus_and_no_float_op(tmp_path):
    from rewriter.verify.runners import run_tflite

    _, result = rewritten(tf.nn.softplus, RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert {"EXP", "LOG"} <= ops and "NEG" not in ops
    x = np.full((1, 4, 4, 4), 100.0, np.float32)
    got = next(iter(run_tflite(tmp_path / "m_none.tflite", {"x0": x}).values()))
    np.testing.assert_allclose(got, x, rtol=1e-6)  # finite, unlike the converter's own softplus
    _, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert float_ops == set()
