"""sparsemax_pairwise: Keras 3's sparsemax (TopKV2, Cumsum, a division) from 1x1 convolutions,
RELU6, MUL and fitted ramps; within the bound it states, int8 everywhere, refused without data,
and the textbook form told apart from Keras 3.15's (keras-team/keras#23425)."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules import get_rule
from rewriter.rules.sparsemax_pairwise import sparsemax_pairwise, sparsemax_reference
from rewriter.testing import int8_tflite, model_from_function, op_types

RULE = get_rule("sparsemax_pairwise")
SHAPE = (1, 4, 4, 8)


def _data(n=4, seed=0, scale=1.5):
    rng = np.random.default_rng(seed)
    return [{"x0": rng.normal(0, scale, SHAPE).astype("f4")} for _ in range(n)]


def _keras_sparsemax(x):
    import keras

    return keras.ops.sparsemax(x)


def _textbook_sparsemax(x):
    """Martins & Astudillo's tau = (S_K - 1) / K, as tf_addons computed it."""
    import tensorflow as tf

    z = tf.sort(x, direction="DESCENDING", axis=-1)
    cum = tf.cumsum(z, axis=-1)
    r = tf.range(1, x.shape[-1] + 1, dtype=x.dtype)
    k = tf.reduce_sum(tf.cast(z - (cum - 1) / r > 0, x.dtype), axis=-1, keepdims=True)
    s_k = tf.gather(cum, tf.cast(k, tf.int32) - 1, axis=-1, batch_dims=len(x.shape) - 1)
    return tf.maximum(x - (s_k - 1) / k, 0.0)


def test_the_float_forms_are_the_references():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 2.0, (2000, 8))
    for form in ("keras", "textbook"):
        got, _ = sparsemax_pairwise(x, form, 1e-4, 1e-4)
        np.testing.assert_allclose(got, sparsemax_reference(x, form), atol=1e-3)
    textbook = sparsemax_reference(x, "textbook")  # the projection onto the simplex
    np.testing.assert_allclose(textbook.sum(axis=-1), 1.0, atol=1e-9)


@pytest.mark.parametrize("fn,form", [(_keras_sparsemax, "keras"),
                                     (_textbook_sparsemax, "textbook")])
def test_rewritten_within_the_stated_bound_and_no_sort(fn, form):
    model = model_from_function(fn, [SHAPE])
    assert {"TopKV2", "Cumsum"} <= set(op_types(model))
    result = apply_rules(model, [RULE], data=_data())
    [applied] = result.applied
    assert set(op_types(result.model)) <= RULE.emits | {"Placeholder", "Const", "Identity"}
    bound = applied.bound.max_abs_error
    assert 0 < bound < 0.02 and form in applied.bound.note
    for feeds in _data():
        got = result.model.run(feeds)["output_0"].astype(np.float64)
        want = model.run(feeds)["output_0"]
        assert np.abs(got - want).max() <= bound + 1e-5  # float32 rounding of the graph
    # unseen data of the same kind: still close (the bound is measured on the calibration set)
    feeds = _data(seed=9)[0]
    err = np.abs(result.model.run(feeds)["output_0"] - model.run(feeds)["output_0"]).max()
    assert err < 0.05


def test_int8_every_op_int8_and_close():
    model = model_from_function(_keras_sparsemax, [SHAPE])
    data = _data(scale=1.0)
    result = apply_rules(model, [RULE], data=data)
    ops, rel = int8_tflite(result.model, -2.5, 2.5)
    names = {o for o, _ in ops}
    assert {o for o, dt in ops if dt == "float32"} <= {"DEQUANTIZE"}
    assert not names & {"TOPK_V2", "CUMSUM", "DIV", "GATHER", "SUM"}, names
    assert rel < 0.1, rel


def test_refused_without_data():
    model = model_from_function(_keras_sparsemax, [SHAPE])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "calibration data" in result.rejected[0].reason
