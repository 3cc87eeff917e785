"""relu6_min_max: Relu6 becomes min(max(x, 0), 6), exactly."""

from __future__ import annotations

import tensorflow as tf

from rewriter.rules.relu6_min_max import Relu6MinMax
from rewriter.testing import assert_close_rel, dense_line, op_types
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = Relu6MinMax()


def test_replaces_relu6_with_maximum_and_minimum():
    _, result = rewritten(lambda x: tf.nn.relu6(x * 2.0), RULE, (8,))
    ops = op_types(result.model)
    assert "Relu6" not in ops and ops["Maximum"] == 1 and ops["Minimum"] == 1


def test_does_not_fire_on_int32_and_says_why():
    _, result = rewritten(tf.nn.relu6, RULE, (8,), dtype="int32")
    assert result.applied == [] and "int32" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    before, result = rewritten(tf.nn.relu6, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-20.0, 20.0, 8001)), rtol=1e-5)


def test_tflite_float_converts_to_builtins(tmp_path):
    """The converter folds the clamp back into RELU6 (a fused activation here): TFLite targets
    all have RELU6, so the rule only matters for graph- and ONNX-level targets."""
    _, result = rewritten(lambda x: tf.nn.relu6(x * 2.0), RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops <= {"MUL", "MINIMUM", "MAXIMUM", "RELU6"} and "MUL" in ops
