"""batchnorm_to_mul_add: a BN not after a conv becomes x * scale + offset with folded consts."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.batchnorm_to_mul_add import BatchNormToMulAdd
from rewriter.testing import assert_close_rel, model_from_function, op_types

RULE = BatchNormToMulAdd()
RNG = np.random.default_rng(1)


def _stats(c=4):
    return (RNG.uniform(0.5, 2.0, c).astype("f4"), RNG.normal(0, 1, c).astype("f4"),
            RNG.normal(0, 1, c).astype("f4"), RNG.uniform(0.1, 3.0, c).astype("f4"))


def _fused(y, stats, fmt="NHWC", training=False):
    g, b, m, v = stats
    if training:
        m = v = np.zeros(0, "f4")
    return tf.raw_ops.FusedBatchNormV3(x=y, scale=g, offset=b, mean=m, variance=v, epsilon=1e-3,
                                       is_training=training, data_format=fmt)[0]


FORMS = {
    "fused": lambda x, s: _fused(tf.nn.relu(x), s),
    "unfused": lambda x, s: tf.nn.batch_normalization(tf.nn.relu(x), s[2], s[3], s[1], s[0], 1e-3),
    "unfused_no_gamma_no_beta": lambda x, s: tf.nn.batch_normalization(
        tf.nn.relu(x), s[2], s[3], None, None, 1e-3),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_standalone_bn_becomes_one_mul_and_one_add(form):
    stats = _stats()
    model = model_from_function(lambda x: FORMS[form](x, stats), [(1, 5, 5, 4)])
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"Relu": 1, "Mul": 1, "AddV2": 1}
    x = RNG.uniform(-4, 4, (1, 5, 5, 4)).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_nchw_fused_bn_scales_axis_1():
    stats = _stats(3)
    model = model_from_function(
        lambda x: tf.transpose(_fused(tf.transpose(x, [0, 3, 1, 2]), stats, "NCHW"), [0, 2, 3, 1]),
        [(1, 4, 4, 3)])
    # TF on CPU may not run NCHW FusedBatchNorm; compare against the identity in numpy instead
    result = apply_rules(model, [RULE])
    assert "FusedBatchNormV3" not in op_types(result.model)
    g, b, m, v = (s.astype(np.float64) for s in stats)
    x = RNG.uniform(-4, 4, (1, 4, 4, 3)).astype("f4")
    want = (x - m) / np.sqrt(v + 1e-3) * g + b
    assert_close_rel(result.model.run({"x0": x})["output_0"], want)


def test_training_mode_bn_is_refused_with_reason():
    stats = _stats()
    model = model_from_function(lambda x: _fused(x, stats, training=True), [(1, 2, 2, 4)])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "is_training" in result.rejected[0].reason


def test_plain_affine_without_rsqrt_is_not_taken_for_a_bn():
    model = model_from_function(lambda x: x * np.float32(2.0) + np.float32(1.0), [(3,)])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and result.rejected == []
