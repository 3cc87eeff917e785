"""swish_sigmoid: Keras 3 swish/silu (IdentityN-wrapped) becomes plain x*sigmoid(x), exactly."""

from __future__ import annotations

import keras
import tensorflow as tf

from rewriter.rules.swish_sigmoid import SwishSigmoid
from rewriter.testing import assert_close_rel, dense_line
from tests.rules._activation_checks import outputs, rewritten, tflite_ops

RULE = SwishSigmoid()


def ops_with_plumbing(model):
    return sorted(n.op for n in model.graph_def.node if n.op not in ("Placeholder", "Const"))


def test_drops_the_identityn_wrapper_and_the_multiply_by_beta():
    before, result = rewritten(lambda x: keras.activations.swish(x), RULE, (8,))
    assert "IdentityN" in ops_with_plumbing(before)
    assert ops_with_plumbing(result.model) == ["Identity", "Mul", "Sigmoid"]


def test_keeps_beta_when_it_is_not_one():
    _, result = rewritten(lambda x: tf.nn.silu(x, beta=1.5), RULE, (8,))
    assert ops_with_plumbing(result.model) == ["Identity", "Mul", "Mul", "Sigmoid"]


def test_does_not_fire_on_float64_and_says_why():
    _, result = rewritten(lambda x: keras.activations.silu(x), RULE, (8,), dtype="float64")
    assert result.applied == [] and "float64" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_20_to_20():
    x = dense_line(-20.0, 20.0, 8001)
    for fn in (lambda v: keras.activations.swish(v), lambda v: tf.nn.silu(v, beta=1.5)):
        before, result = rewritten(fn, RULE, (8001,))
        assert len(result.applied) == 1
        assert_close_rel(*outputs(before, result.model, x), rtol=1e-5)


def test_tflite_float_is_logistic_and_mul(tmp_path):
    _, result = rewritten(lambda x: keras.activations.swish(x), RULE)
    ops, _ = tflite_ops(result.model, tmp_path)
    assert ops == {"LOGISTIC", "MUL"}
