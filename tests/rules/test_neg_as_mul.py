"""neg_as_mul: Neg becomes x * -1, exactly, and the int8 converter quantizes it."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rules.neg_as_mul import NegAsMul
from rewriter.testing import assert_close_rel, dense_line, int8_tflite, op_types
from tests.rules._activation_checks import outputs, rewritten

RULE = NegAsMul()
_W = np.random.default_rng(0).normal(0, 0.5, (1, 1, 4, 4)).astype(np.float32)


def _conv_neg_reshape(x):
    """An STFT-like island: a conv, its negation, a reshape (as in a CQT front end)."""
    return tf.reshape(-tf.nn.conv2d(x, _W, 1, "SAME"), [1, 16, 4])


def test_replaces_neg_with_mul_by_minus_one():
    _, result = rewritten(lambda x: -(x * 2.0), RULE, (8,))
    ops = op_types(result.model)
    assert "Neg" not in ops and ops["Mul"] == 2


def test_does_not_fire_on_int32_and_says_why():
    _, result = rewritten(tf.negative, RULE, (8,), dtype="int32")
    assert result.applied == [] and "int32" in result.rejected[0].reason


def test_equal_within_1e5_relative_over_minus_1e4_to_1e4():
    before, result = rewritten(tf.negative, RULE, (8001,))
    assert_close_rel(*outputs(before, result.model, dense_line(-1e4, 1e4, 8001)), rtol=1e-5)


def test_int8_has_no_float_island_and_the_same_error():
    """Before: DEQUANTIZE -> NEG (float) -> QUANTIZE. After: every op int8 (the -1 is folded
    into the conv), with the int8 error of the original (one quantization step of 1/127)."""
    before, result = rewritten(_conv_neg_reshape, RULE)
    ops_before, err_before = int8_tflite(before)
    ops_after, err_after = int8_tflite(result.model)
    assert ("NEG", "float32") in ops_before
    assert [o for o, dt in ops_after if dt == "float32"] == ["DEQUANTIZE"]
    assert "NEG" not in {o for o, _ in ops_after}
    assert err_after <= 0.01 and err_after <= err_before + 1e-3


def test_in_a_plan_it_rewrites_only_the_negs_the_target_lacks(tmp_path):
    """A Keras 3 LayerNorm (its Neg stays float in int8: Ethos-U lacks it) and GELU (its Neg is
    absorbed into the converter's GELU, which Ethos-U runs): the plan fixes the LayerNorm and
    leaves the GELU whole, so no erf polynomial replaces a GELU the NPU runs as one LUT
    (ConvNeXtTiny 96x96, Vela ethos-u55-128: 165.9 -> 87.4 ms)."""
    import keras

    from rewriter.frontends import load_model
    from rewriter.rewrite.planner import plan_and_apply
    from rewriter.targets import load_target

    keras.utils.set_random_seed(0)
    inp = keras.Input((8, 8, 16))
    x = keras.layers.LayerNormalization(epsilon=1e-6)(keras.layers.Conv2D(16, 1)(inp))
    out = keras.layers.Activation("gelu")(keras.layers.Dense(16)(x))
    keras.Model(inp, out).save(tmp_path / "ln_gelu.keras")
    model = load_model(tmp_path / "ln_gelu.keras")
    gelu_negs = {n.name for n in model.graph_def.node if n.op == "Neg" and "gelu" in n.name.lower()}
    assert gelu_negs
    plan, result = plan_and_apply(model, load_target("ethos-u55-128"), "int8")
    applied = {a.rule for a in result.applied}
    assert "erf_poly" not in applied and not any(r.startswith("gelu_") for r in applied)
    left = {n.name for n in result.model.graph_def.node if n.op == "Neg"}
    assert gelu_negs <= left  # the GELU's Neg untouched
    assert not plan.unfixable
