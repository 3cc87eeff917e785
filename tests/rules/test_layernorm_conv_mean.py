"""layernorm_conv_mean: channel LayerNorm with means as 1x1 convolutions, no depth Mean."""

from __future__ import annotations

import keras
import numpy as np

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.layernorm_conv_mean import LayerNormConvMean
from rewriter.testing import assert_close_rel, model_from_keras, op_types

RULE = LayerNormConvMean()
RNG = np.random.default_rng(3)


def _ln_model(shape):
    inp = keras.Input(shape[1:], batch_size=shape[0])
    ln = keras.layers.LayerNormalization(epsilon=1e-6)
    km = keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2.0, (shape[-1],)).astype("f4"),
                    RNG.normal(0, 1, (shape[-1],)).astype("f4")])
    return model_from_keras(km)


def test_channel_layernorm_uses_two_1x1_convs_and_no_mean():
    model = _ln_model((1, 6, 6, 16))
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert "Mean" not in ops and "Neg" not in ops and "SquaredDifference" not in ops
    assert ops["Conv2D"] == 2
    x = (RNG.uniform(-3, 3, (1, 6, 6, 16)) + 1.5).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_rank3_layernorm_is_refused_with_its_shape():
    model = _ln_model((1, 5, 8))
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "(1, 5, 8) is not rank 4" in result.rejected[0].reason
