"""log_softmax_exact: LogSoftmax becomes d - log(sum(exp(d))) exactly, int8 on the way."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rules import get_rule
from rewriter.testing import assert_close_rel, int8_tflite, op_types
from tests.rules._activation_checks import rewritten

RULE = get_rule("log_softmax_exact")


def test_equal_within_1e5_relative():
    before, result = rewritten(tf.nn.log_softmax, RULE, (64, 8))
    assert set(op_types(result.model)) == {"Max", "Sub", "Exp", "Sum", "Log", "Mul", "AddV2"}
    x = np.random.default_rng(0).normal(0, 10, (64, 8)).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], before.run({"x0": x})["output_0"])


def test_int8_has_no_log_softmax_the_converter_does_not_fuse_it_back():
    _, result = rewritten(tf.nn.log_softmax, RULE)
    ops, rel = int8_tflite(result.model, -4.0, 4.0)
    assert "LOG_SOFTMAX" not in {o for o, _ in ops}
    assert {o for o, dt in ops if dt == "float32"} <= {"DEQUANTIZE"} and rel < 0.05
