"""layernorm_from_fused_bn: tf_keras LayerNormalization (training-mode FusedBatchNormV3 on a
reshaped input) becomes Mean/Sub/Mul/Rsqrt/Add, exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.layernorm_from_fused_bn import LayerNormFromFusedBatchNorm
from rewriter.testing import assert_close_rel, model_from_keras, op_types

tf_keras = pytest.importorskip("tf_keras")
RULE = LayerNormFromFusedBatchNorm()
RNG = np.random.default_rng(4)


def _tfk_ln(shape, axis=-1):
    inp = tf_keras.Input(shape[1:], batch_size=shape[0])
    ln = tf_keras.layers.LayerNormalization(axis=axis, epsilon=1e-3)
    km = tf_keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2, w.shape).astype("f4") if i == 0 else
                    RNG.normal(0, 1, w.shape).astype("f4") for i, w in enumerate(ln.weights)])
    return model_from_keras(km)


@pytest.mark.parametrize("shape", [(1, 4, 4, 8), (2, 5, 6)])
def test_tf_keras_layernorm_loses_its_fused_batchnorm(shape):
    model = _tfk_ln(shape)
    assert op_types(model)["FusedBatchNormV3"] == 1
    result = apply_rules(model, ["fold_shape_constants", RULE])
    ops = op_types(result.model)
    assert "FusedBatchNormV3" not in ops and ops["Mean"] == 2 and ops["Rsqrt"] == 1
    assert "Fill" not in ops  # ones/zeros folded; identity scale/offset dropped
    x = (RNG.uniform(-3, 3, shape) + 1.0).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_inference_batchnorm_is_not_taken_for_a_layernorm():
    def fn(x):
        c = np.ones(3, "f4")
        return tf.raw_ops.FusedBatchNormV3(x=x, scale=c, offset=c, mean=c, variance=c,
                                           is_training=False)[0]

    from rewriter.testing import model_from_function
    model = model_from_function(fn, [(1, 2, 2, 3)])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and result.rejected == []


def test_non_constant_scale_is_refused_with_reason():
    from rewriter.testing import model_from_function

    def fn(x, scale):
        e = np.zeros(0, "f4")
        return tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=np.zeros(3, "f4"),
                                           mean=e, variance=e, is_training=True)[0]

    model = model_from_function(fn, [(1, 2, 2, 3), (3,)])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert result.rejected[0].reason == "scale or offset is not constant"
