"""abs_relu_sum: Abs becomes relu(x) + relu(-x), exactly, with ABS's own int8 error."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rules.abs_relu_sum import AbsReluSum
from rewriter.testing import assert_close_rel, dense_line, int8_tflite, op_types
from tests.rules._activation_checks import outputs, rewritten

RULE = AbsReluSum()
_W = np.random.default_rng(0).normal(0, 0.5, (1, 1, 4, 4)).astype(np.float32)


def _conv_abs(x):
    return tf.abs(tf.nn.conv2d(x, _W, 1, "SAME"))


def test_replaces_abs_with_relus_and_add():
    _, result = rewritten(lambda x: tf.abs(x - 1.0), RULE, (8,))
    ops = op_types(result.model)
    assert "Abs" not in ops and ops["Relu"] == 2 and ops["AddV2"] == 1


def test_does_not_fire_on_int32_and_says_why():
    _, result = rewritten(tf.abs, RULE, (8,), dtype="int32")
    assert result.applied == [] and "int32" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_1e4_to_1e4():
    before, result = rewritten(tf.abs, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-1e4, 1e4, 8001)), rtol=1e-5)


def test_int8_error_matches_abs_itself():
    """RELU/MUL/ADD in int8 have ABS's own int8 error (within 0.5% of the output scale)."""
    before, result = rewritten(_conv_abs, RULE)
    ops_before, err_before = int8_tflite(before)
    ops_after, err_after = int8_tflite(result.model)
    assert ("ABS", "int8") in ops_before
    assert {o for o, _ in ops_after} >= {"RELU", "ADD"} and "ABS" not in {o for o, _ in ops_after}
    assert err_after <= err_before + 5e-3
