"""batchnorm_fold_into_conv: BN after Conv2D / DepthwiseConv2dNative / MatMul (+bias) folds into
the producer's weights, in the fused (tf_keras/TF1) and unfused (Keras 3) forms, exactly."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.batchnorm_fold_into_conv import BatchNormFoldIntoConv
from rewriter.rules.batchnorm_to_mul_add import BatchNormToMulAdd
from rewriter.testing import (
    assert_close_rel,
    model_from_function,
    model_from_keras,
    nodes_by_rule,
    op_types,
)

RULE = BatchNormFoldIntoConv()
RNG = np.random.default_rng(0)
C = 6


def _stats(c=C):
    """gamma, beta, mean, var far from identity so a wrong fold shows."""
    return (RNG.uniform(0.5, 2.0, c).astype("f4"), RNG.normal(0, 1, c).astype("f4"),
            RNG.normal(0, 1, c).astype("f4"), RNG.uniform(0.1, 3.0, c).astype("f4"))


def _fused(y, stats):
    g, b, m, v = stats
    return tf.raw_ops.FusedBatchNormV3(x=y, scale=g, offset=b, mean=m, variance=v, epsilon=1e-3,
                                       is_training=False)[0]


def _unfused(y, stats):
    g, b, m, v = stats
    return tf.nn.batch_normalization(y, m, v, b, g, 1e-3)


def _conv(x):
    w = RNG.normal(0, 1, (3, 3, 3, C)).astype("f4")
    return tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), RNG.normal(0, 1, C).astype("f4"))


def _dwconv(x):
    w = RNG.normal(0, 1, (3, 3, 3, 2)).astype("f4")
    return tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME")


def _check_exact(before, after, shape):
    x = RNG.uniform(-3, 3, shape).astype("f4")
    assert_close_rel(after.run({"x0": x})["output_0"], before.run({"x0": x})["output_0"], 1e-5)


@pytest.mark.parametrize("bn", [_fused, _unfused], ids=["FusedBatchNormV3", "unfused"])
def test_conv2d_bias_bn_becomes_conv2d_biasadd(bn):
    stats = _stats()
    model = model_from_function(lambda x: tf.nn.relu(bn(_conv(x), stats)), [(1, 8, 8, 3)])
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"Conv2D": 1, "BiasAdd": 1, "Relu": 1}
    assert len(result.applied) == 1 and result.applied[0].exact is True
    _check_exact(model, result.model, (1, 8, 8, 3))


@pytest.mark.parametrize("bn", [_fused, _unfused], ids=["FusedBatchNormV3", "unfused"])
def test_depthwise_bn_folds_per_output_channel(bn):
    stats = _stats(6)  # 3 input channels x multiplier 2
    model = model_from_function(lambda x: bn(_dwconv(x), stats), [(1, 8, 8, 3)])
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"DepthwiseConv2dNative": 1, "BiasAdd": 1}
    _check_exact(model, result.model, (1, 8, 8, 3))


def test_matmul_bn_folds_into_kernel():
    stats = _stats(5)
    w = RNG.normal(0, 1, (4, 5)).astype("f4")
    model = model_from_function(lambda x: _unfused(tf.matmul(x, w), stats), [(2, 4)])
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"MatMul": 1, "BiasAdd": 1}
    _check_exact(model, result.model, (2, 4))


def test_keras3_conv_bn_layers_fold_and_match():
    inp = keras.Input((8, 8, 3), batch_size=1)
    conv = keras.layers.Conv2D(C, 3, padding="same")
    bn = keras.layers.BatchNormalization()
    km = keras.Model(inp, bn(conv(inp)))
    bn.set_weights(list(_stats()))
    model = model_from_keras(km)
    assert op_types(model)["Rsqrt"] == 1
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"Conv2D": 1, "BiasAdd": 1}
    made = {n.name: n.op for n in result.model.graph_def.node}
    created = sorted(made[n] for n in nodes_by_rule(result.model, RULE.name))
    assert created == ["BiasAdd", "Const", "Const", "Conv2D"]  # new weights carry it too
    _check_exact(model, result.model, (1, 8, 8, 3))


def test_does_not_fold_when_conv_output_is_also_used_elsewhere():
    stats = _stats()

    def fn(x):
        y = tf.nn.conv2d(x, RNG.normal(0, 1, (1, 1, 3, C)).astype("f4"), 1, "SAME")
        return _unfused(y, stats) + y

    model = model_from_function(fn, [(1, 4, 4, 3)])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "also read by" in result.rejected[0].reason
    after = apply_rules(model, [RULE, BatchNormToMulAdd()])
    assert [a.rule for a in after.applied] == ["batchnorm_to_mul_add"]
    assert "Rsqrt" not in op_types(after.model)
    _check_exact(model, after.model, (1, 4, 4, 3))


def test_does_not_fold_non_constant_weights():
    stats = _stats(3)
    model = model_from_function(lambda x, w: _unfused(tf.matmul(x, w), stats), [(2, 4), (4, 3)])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "not constant" in result.rejected[0].reason
