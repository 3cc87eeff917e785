"""layernorm_decompose: Keras 3 LayerNormalization without Neg/SquaredDifference, exactly."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.layernorm_decompose import LayerNormDecompose
from rewriter.testing import assert_close_rel, int8_tflite, model_from_keras, op_types

RULE = LayerNormDecompose()
RNG = np.random.default_rng(2)


def _ln_model(shape, axis=-1, center=True, scale=True):
    inp = keras.Input(shape[1:], batch_size=shape[0])
    ln = keras.layers.LayerNormalization(axis=axis, center=center, scale=scale, epsilon=1e-3)
    km = keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2.0, w.shape).astype("f4") if i == 0 and scale else
                    RNG.normal(0, 1, w.shape).astype("f4") for i, w in enumerate(ln.weights)])
    return model_from_keras(km)


@pytest.mark.parametrize("shape,axis", [((1, 4, 4, 8), -1), ((1, 5, 8), -1), ((2, 6, 3), [1, 2])])
def test_keras3_layernorm_loses_neg_and_matches(shape, axis):
    model = _ln_model(shape, axis)
    assert op_types(model)["Neg"] == 1  # the form this rule exists for
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert not {"Neg", "SquaredDifference", "StopGradient"} & set(ops)
    assert ops["Mean"] == 2 and ops["Rsqrt"] == 1
    x = (RNG.uniform(-3, 3, shape) + 2.0).astype("f4")  # a mean far from 0
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_layernorm_without_gamma_and_beta():
    model = _ln_model((1, 3, 6), center=False, scale=False)
    result = apply_rules(model, [RULE])
    assert "Neg" not in op_types(result.model)
    x = RNG.normal(0, 2, (1, 3, 6)).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_does_not_fire_when_the_centered_mean_is_used_elsewhere():
    inp = keras.Input((3, 6), batch_size=1)
    out = keras.layers.LayerNormalization()(inp)
    model = model_from_keras(keras.Model(inp, out))
    # make the Neg read by an extra node outside the pattern
    from rewriter.ir.graph import GraphIndex, make_node
    g = GraphIndex(model.graph_def)
    neg = next(n for n in g if n.op == "Neg")
    g.add(make_node("Relu", "extra_reader", [neg.name]))
    model = model.with_graph(g.to_graph_def())
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "also read by extra_reader" in result.rejected[0].reason


def test_decomposed_layernorm_quantizes_in_full_int8():
    model = _ln_model((1, 4, 4, 8))
    ops_before, _ = int8_tflite(model, -2.0, 2.0)
    assert ("NEG", "float32") in ops_before
    ops, err = int8_tflite(apply_rules(model, [RULE]).model, -2.0, 2.0)
    inner = [op for op in ops if op[0] not in ("QUANTIZE", "DEQUANTIZE")]
    assert inner and all(dt == "int8" for _, dt in inner), ops
    assert err < 0.05


def test_tf_keras_unfused_layernorm_with_sub_is_matched_too():
    tf_keras = pytest.importorskip("tf_keras")
    inp = tf_keras.Input((4, 4, 8), batch_size=1)
    ln = tf_keras.layers.LayerNormalization(epsilon=1e-6)  # below the fused path's minimum
    km = tf_keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2.0, 8).astype("f4"), RNG.normal(0, 1, 8).astype("f4")])
    model = model_from_keras(km)
    assert "SquaredDifference" in op_types(model) and "Neg" not in op_types(model)
    result = apply_rules(model, [RULE])
    assert len(result.applied) == 1 and "SquaredDifference" not in op_types(result.model)
    x = (RNG.uniform(-3, 3, (1, 4, 4, 8)) + 2.0).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])
