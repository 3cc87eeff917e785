"""softmax_mask_compare: ``softmax(where(c, x, M))`` with a data-dependent condition (``x > 0.5``,
a 0/1 mask input cast to bool) becomes ``softmax(x + d (M' - x))`` with ``d`` built by two
saturating gains (no GREATER, CAST, SELECT_V2): the same softmax up to float32 rounding, the
threshold's neighbours included, and an int8 file of MUL/ADD/SOFTMAX that keeps the scores' scale."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.softmax_mask_compare import WINDOW, SoftmaxMaskCompare
from rewriter.rules.softmax_mask_select import GAP
from rewriter.testing import assert_close_rel, int8_tflite, model_from_function, op_types

RULE = SoftmaxMaskCompare()
SHAPE = (1, 2, 8, 8)
T = np.float32(0.5)
NEAR = (T, np.nextafter(T, np.float32(1)), np.nextafter(T, np.float32(0)))  # t and its neighbours


def _data(n: int = 8, scale: float = 1.0):
    rng = np.random.default_rng(0)
    return [{"x0": (scale * rng.normal(0, 1, SHAPE)).astype("f4")} for _ in range(n)]


CASES = {
    "greater": lambda x: tf.nn.softmax(tf.where(x > 0.5, x, -1e9)),
    "greater_equal": lambda x: tf.nn.softmax(tf.where(x >= 0.5, x, -1e9)),
    "less": lambda x: tf.nn.softmax(tf.where(x < 0.5, x, float("-inf"))),
    "less_equal_swapped": lambda x: tf.nn.softmax(tf.where(x <= 0.5, -1e9, x)),
    "const_first": lambda x: tf.nn.softmax(tf.where(0.5 < x, x, -3.4e38)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compares_become_arithmetic_and_the_softmax_is_the_same_at_the_threshold(case):
    model = model_from_function(CASES[case], [SHAPE])
    result = apply_rules(model, [RULE], data=_data())
    assert [a.rule for a in result.applied] == ["softmax_mask_compare"]
    ops = op_types(result.model)
    assert not {"SelectV2", "Greater", "GreaterEqual", "Less", "LessEqual"} & set(ops), ops
    rng = np.random.default_rng(1)
    for _ in range(6):
        x = rng.normal(0, 1, SHAPE).astype("f4")
        x[0, 0, :, :3] = NEAR  # the threshold and the float32 values either side of it
        want, got = model.run({"x0": x})["output_0"], result.model.run({"x0": x})["output_0"]
        assert_close_rel(got, want, rtol=1e-5)
        assert np.max(np.abs(got - want)) <= math.exp(-GAP)  # masked rows' total weight
        np.testing.assert_array_equal(got[want == 0] < math.exp(-GAP) / SHAPE[-1], True)


def test_fully_masked_rows_stay_uniform():
    model = model_from_function(CASES["greater"], [SHAPE])
    result = apply_rules(model, [RULE], data=_data())
    x = np.random.default_rng(2).normal(0, 1, SHAPE).astype("f4")
    x[0, 0, 0, :] = -1.0  # every score below the threshold
    got = result.model.run({"x0": x})["output_0"]
    assert_close_rel(got, model.run({"x0": x})["output_0"])
    np.testing.assert_allclose(got[0, 0, 0], 1 / 8, rtol=1e-5)


def test_a_threshold_at_zero_is_exact_outside_its_stated_window():
    model = model_from_function(lambda x: tf.nn.softmax(tf.where(x > 0.0, x, -1e9)), [SHAPE])
    result = apply_rules(model, [RULE], data=_data(scale=3.0))
    x = np.random.default_rng(3).normal(0, 3, SHAPE).astype("f4")
    scale = max(float(np.max(np.abs(d["x0"]))) for d in _data(scale=3.0))
    w = WINDOW * scale  # |t| = 0 < 2**-7 scale: the window (t' - w, t') holds 0 itself
    x[0, 0, :, 0] = (-1.01 * w, -2 * w, 1e-30, -1e-6, -1e-3, 1e-3, -1.0, 1.0)  # outside it
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def _masked_attention():
    def f(scores, mask):
        keep = tf.expand_dims(tf.cast(mask, tf.bool), 1)
        keep = tf.logical_and(tf.constant(np.tril(np.ones((8, 8), bool))[None, None]), keep)
        return tf.nn.softmax(tf.where(keep, scores, -0.7 * np.finfo(np.float32).max))
    return model_from_function(f, [SHAPE, (1, 8, 8)])


def _mask_data(n: int = 8, lo: float = 0.0):
    rng = np.random.default_rng(4)
    out = []
    for _ in range(n):
        mask = (np.arange(8)[None, None] < rng.integers(2, 9)).repeat(8, 1).astype("f4")
        out.append({"x0": rng.normal(0, 1, SHAPE).astype("f4"),
                    "x1": np.where(mask > 0, mask, lo).astype("f4")})
    return out


def test_a_float_mask_input_through_cast_expand_dims_and_a_causal_and():
    model = _masked_attention()
    result = apply_rules(model, [RULE], data=_mask_data())
    assert [a.rule for a in result.applied] == ["softmax_mask_compare"]
    assert not {"Cast", "LogicalAnd", "SelectV2"} & set(op_types(result.model))
    for feeds in _mask_data(4):
        want, got = model.run(feeds)["output_0"], result.model.run(feeds)["output_0"]
        assert_close_rel(got, want)
        assert np.max(np.abs(got - want)) <= math.exp(-GAP)


def test_refusals_say_why():
    no_data = apply_rules(model_from_function(CASES["greater"], [SHAPE]), [RULE])
    assert no_data.applied == [] and "no observed range" in no_data.rejected[0].reason
    not_01 = apply_rules(_masked_attention(), [RULE], data=_mask_data(lo=-1.0))
    assert not_01.applied == [] and "not 0/1" in not_01.rejected[0].reason
    shallow = apply_rules(model_from_function(
        lambda x: tf.nn.softmax(tf.where(x > 0.5, x, -2.0)), [SHAPE]), [RULE], data=_data())
    assert shallow.applied == [] and "not a mask" in shallow.rejected[0].reason


def test_int8_is_mul_add_softmax_and_keeps_the_scores_scale():
    scale = np.full(SHAPE, 3.0, "f4")

    def masked(value):
        return model_from_function(
            lambda x: tf.nn.softmax(tf.where(x * scale > 0.5, x * scale, value)), [SHAPE])

    before = masked(-1e9)
    _, err_before = int8_tflite(before)
    rng = np.random.default_rng(5)
    after = apply_rules(before, [RULE], data=[{"x0": rng.uniform(-1, 1, SHAPE).astype("f4")}
                                              for _ in range(8)]).model
    ops, err_after = int8_tflite(after)
    assert {op for op, _ in ops} <= {"MUL", "ADD", "SOFTMAX", "QUANTIZE", "DEQUANTIZE"}, ops
    assert all(dt == "int8" for op, dt in ops if op not in ("QUANTIZE", "DEQUANTIZE")), ops
    assert err_before > 0.3, err_before  # -1e9 in the select's range: every score is 0
    assert err_after < 0.05, err_after
