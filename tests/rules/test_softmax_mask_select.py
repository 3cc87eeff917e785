"""softmax_mask_select: ``softmax(where(c, x, M))`` with a constant condition and a mask value
(Keras's ``-0.7 * float32.max``, ``-1e9``) becomes ``softmax(x*c + (1-c)*M')`` with ``M'`` placed
``17 + ln n`` below the scores' calibration range: the same softmax up to float32 rounding (masked
weights below ``4.1e-8 / n``), MUL and ADD only, and an int8 file whose scores keep their scale."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.softmax_mask_select import GAP, MARGIN, SoftmaxMaskSelect, mask_gap
from rewriter.testing import assert_close_rel, int8_tflite, model_from_function, op_types

RULE = SoftmaxMaskSelect()
SHAPE = (1, 2, 8, 8)  # heads, queries, keys
CAUSAL = np.tril(np.ones((8, 8), bool))[None, None]
KERAS_MASK = np.float32(-0.7 * np.finfo(np.float32).max)
LO, HI = -3.0, 3.0


def _masked_softmax(mask_value, cond=CAUSAL):
    return model_from_function(
        lambda x: tf.nn.softmax(tf.where(tf.constant(cond), x, tf.constant(mask_value))),
        [SHAPE])


def _data(lo: float = LO, hi: float = HI, n: int = 4):
    rng = np.random.default_rng(0)
    out = [{"x0": rng.uniform(lo, hi, SHAPE).astype("f4")} for _ in range(n)]
    out[0]["x0"].flat[:2] = (lo, hi)
    return out


@pytest.mark.parametrize("mask_value", [KERAS_MASK, np.float32(-1e9), np.float32(-np.inf)])
def test_masks_become_mul_add_and_the_softmax_is_the_same(mask_value):
    model = _masked_softmax(mask_value)
    result = apply_rules(model, [RULE], data=_data())
    assert [a.rule for a in result.applied] == ["softmax_mask_select"]
    ops = op_types(result.model)
    assert "SelectV2" not in ops and ops["Mul"] == 1 and ops["Softmax"] == 1
    rng = np.random.default_rng(1)
    for x in (rng.uniform(LO, HI, SHAPE), rng.normal(0, 1, SHAPE)):
        x = x.astype("f4")
        want = model.run({"x0": x})["output_0"]
        got = result.model.run({"x0": x})["output_0"]
        assert_close_rel(got, want, rtol=1e-5)
        assert np.max(np.abs(got - want)) <= math.exp(-GAP) / SHAPE[-1]
        assert np.all(got[~np.broadcast_to(CAUSAL, SHAPE)] < math.exp(-GAP) / SHAPE[-1])


def test_exact_at_the_edge_of_the_domain_every_unmasked_score_at_the_widened_minimum():
    result = apply_rules(_masked_softmax(KERAS_MASK), [RULE], data=_data())
    lo = LO - MARGIN * (HI - LO)
    x = np.where(np.broadcast_to(CAUSAL, SHAPE), lo, HI).astype("f4")  # masked ones the largest
    got = result.model.run({"x0": x})["output_0"]
    keep = np.broadcast_to(CAUSAL, SHAPE)
    counts = keep.sum(-1, keepdims=True)
    want = np.where(keep, 1.0 / counts, 0.0)
    assert np.max(np.abs(got - want)) <= 2 ** -24 + math.exp(-GAP) / SHAPE[-1]
    assert mask_gap(8) == pytest.approx(17 + math.log(8))


def test_fully_masked_rows_stay_uniform():
    cond = CAUSAL.copy()
    cond[..., 0, :] = False
    model = _masked_softmax(KERAS_MASK, cond)
    result = apply_rules(model, [RULE], data=_data())
    x = np.random.default_rng(2).uniform(LO, HI, SHAPE).astype("f4")
    got, want = result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"]
    assert_close_rel(got, want)
    assert np.allclose(got[..., 0, :], 1 / 8)


def test_refusals_say_why():
    model = _masked_softmax(KERAS_MASK)
    no_data = apply_rules(model, [RULE])
    assert no_data.applied == [] and "no observed range" in no_data.rejected[0].reason
    shallow = apply_rules(_masked_softmax(np.float32(-5.0)), [RULE], data=_data())
    assert shallow.applied == [] and "not a mask" in shallow.rejected[0].reason
    dynamic = model_from_function(
        lambda x: tf.nn.softmax(tf.where(x > 0.5, x, -1e9)), [SHAPE])
    assert apply_rules(dynamic, [RULE], data=_data()).applied == []  # not this shape


def test_int8_keeps_the_scores_scale_where_minus_1e9_flattens_them():
    scale = np.full(SHAPE, 3.0, "f4")  # scores in [-3, 3] on the converter's inputs in [-1, 1]

    def masked(value):
        return model_from_function(lambda x: tf.nn.softmax(
            tf.where(tf.constant(CAUSAL), x * scale, tf.constant(np.float32(value)))), [SHAPE])

    before = masked(-1e9)
    _, err_before = int8_tflite(before)
    after = apply_rules(before, [RULE], data=_data(-1, 1)).model
    ops, err_after = int8_tflite(after)
    assert "SELECT_V2" not in {op for op, _ in ops}
    assert all(dt == "int8" for op, dt in ops if op not in ("QUANTIZE", "DEQUANTIZE")), ops
    assert err_before > 0.3, err_before  # every score quantizes to 0: uniform rows
    assert err_after < 0.05, err_after


@pytest.fixture(scope="module")
def causal_attention():
    import keras

    from rewriter.testing import model_from_keras

    x = keras.Input((8, 16), batch_size=1)
    h = keras.layers.MultiHeadAttention(2, 8, seed=0)(x, x, use_causal_mask=True)
    return model_from_keras(keras.Model(x, h))


def test_keras_causal_attention_loses_its_mask_constant_exactly(causal_attention):
    from rewriter.export.validate import mask_constants

    model = causal_attention
    assert len(mask_constants(model.graph_def)) == 1  # Keras's -0.7 * float32.max
    rng = np.random.default_rng(3)
    data = [{"x0": rng.normal(0, 1, (1, 8, 16)).astype("f4")} for _ in range(8)]
    result = apply_rules(model, [RULE], data=data)
    assert [a.rule for a in result.applied] == ["softmax_mask_select"]
    assert mask_constants(result.model.graph_def) == set()
    for feeds in data[:3]:
        assert_close_rel(result.model.run(feeds)["output_0"], model.run(feeds)["output_0"])


def test_the_mask_constant_is_not_called_a_user_weight(causal_attention):
    from rewriter.export.result import ExportError
    from rewriter.export.validate import check_weights

    check_weights(causal_attention, masks_fixed=True)  # before the job: the rule replaces it
    with pytest.raises(ExportError, match="softmax mask constant .* no rule replaced it"):
        check_weights(causal_attention)


def test_int8_targets_predict_the_quantizer_crash_and_float_does_not(causal_attention):
    from rewriter.targets import load_target

    tflm = load_target("tflm")
    blocked = [v for v in tflm.check_graph(causal_attention, "int8").verdicts
               if not v.supported]
    assert [v.op for v in blocked] == ["SelectV2"]
    assert "the int8 quantizer crashes on it" in blocked[0].reason
    assert all(v.supported for v in tflm.check_graph(causal_attention, "none").verdicts
               if v.op == "SelectV2")
