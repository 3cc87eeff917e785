"""groupnorm_decompose: Keras 3 GroupNormalization (a rank-5 LayerNorm between two reshapes) in
rank 4, exactly: per-channel spatial means averaged over each group by a 1x1 convolution; no
Neg, SquaredDifference or Square, nothing rank 5, and every op int8 in full-int8 conversion."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.groupnorm_decompose import GroupNormDecompose
from rewriter.testing import assert_close_rel, int8_tflite, model_from_keras, op_types

RULE = GroupNormDecompose()
RNG = np.random.default_rng(5)


WEIGHTS: dict = {}  # id(model) -> {"gamma": ..., "beta": ...} as set on the layer


def _gn_model(shape, groups, center=True, scale=True):
    inp = keras.Input(shape[1:], batch_size=1)
    gn = keras.layers.GroupNormalization(groups=groups, center=center, scale=scale)
    km = keras.Model(inp, gn(inp))
    values = [RNG.uniform(0.5, 2.0, w.shape).astype("f4") if i == 0 and scale else
              RNG.normal(0, 1, w.shape).astype("f4") for i, w in enumerate(gn.weights)]
    gn.set_weights(values)
    model = model_from_keras(km)
    WEIGHTS[id(model)] = dict(zip([k for k, on in (("gamma", scale), ("beta", center)) if on],
                              values, strict=True))
    return model


@pytest.mark.parametrize("shape,groups,center,scale", [
    ((1, 8, 8, 16), 4, True, True), ((1, 5, 7, 6), 3, True, False), ((1, 4, 4, 8), 8, False, True),
    ((1, 6, 6, 8), 1, True, True)])
def test_keras3_groupnorm_in_rank_4_matches(shape, groups, center, scale):
    model = _gn_model(shape, groups, center, scale)
    assert {"Neg", "SquaredDifference"} <= set(op_types(model))  # the form this rule exists for
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["groupnorm_decompose"]
    ops = op_types(result.model)
    assert not {"Neg", "SquaredDifference", "Square", "Reshape"} & set(ops), ops
    x = RNG.normal(0, 2, shape).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])
    # |mean| >> std: Keras's x*s - mean*s cancels; centring first stays within 1e-5 of float64
    x = (RNG.uniform(-1, 1, shape) + 50.0).astype("f4")
    want = _reference(x, groups, WEIGHTS[id(model)])
    got = result.model.run({"x0": x})["output_0"]
    assert_close_rel(got, want)
    assert np.max(np.abs(got - want)) <= np.max(np.abs(model.run({"x0": x})["output_0"] - want))


def _reference(x, groups, weights):
    """GroupNorm in float64 (Keras's epsilon 1e-3) with the layer's gamma and beta."""
    n, h, w, c = x.shape
    g = x.astype(np.float64).reshape(n, h, w, groups, c // groups)
    mu = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mu) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    y = ((g - mu) / np.sqrt(var + 1e-3)).reshape(x.shape)
    return y * weights.get("gamma", 1.0) + weights.get("beta", 0.0)


def test_a_layernorm_is_not_a_group_norm():
    inp = keras.Input((4, 4, 8), batch_size=1)
    model = model_from_keras(keras.Model(inp, keras.layers.LayerNormalization()(inp)))
    assert apply_rules(model, [RULE]).applied == []


def test_int8_every_op_int8_where_the_converter_left_neg_and_square_float():
    model = _gn_model((1, 8, 8, 8), 2)
    before, _ = int8_tflite(model)
    assert {("NEG", "float32"), ("SQUARE", "float32")} & set(before), before
    ops, err = int8_tflite(apply_rules(model, [RULE]).model)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert inner and all(dt == "int8" for _, dt in inner), ops
    assert err < 0.05, err
