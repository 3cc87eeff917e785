"""argmax_signed_zero_fold: Keras 3's ``argmax`` prologue (Equal/Bitcast/BitwiseAnd/Less/LogicalAnd/
SelectV2 mapping -0.0 to -tiny) is folded away: the same indices on finite inputs but for a
signed-zero tie, and an int8 file of CONV_2D + ARG_MAX that Vela runs on the Ethos-U55 NPU (tested
through the job: tests/test_family_argmax.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.argmax_signed_zero_fold import ArgmaxSignedZeroFold
from rewriter.testing import model_from_keras, op_types

RULE = ArgmaxSignedZeroFold()
SHAPE = (1, 6, 6, 5)


@pytest.fixture(scope="module")
def keras_argmax():
    import keras

    x = keras.Input(SHAPE[1:], batch_size=1)
    return model_from_keras(keras.Model(x, keras.ops.argmax(x * 1.0, axis=-1)))


def test_the_prologue_goes_and_the_indices_stay(keras_argmax):
    result = apply_rules(keras_argmax, [RULE])
    assert [a.rule for a in result.applied] == ["argmax_signed_zero_fold"]
    assert set(op_types(result.model)) <= {"ArgMax", "Mul"}, op_types(result.model)
    rng = np.random.default_rng(0)
    for x in (rng.normal(0, 1, SHAPE), rng.integers(-2, 3, SHAPE) * 1.0,  # many ties, +0.0s
              np.where(rng.random(SHAPE) < 0.5, -0.0, rng.normal(0, 1, SHAPE))):  # -0.0s
        x = x.astype("f4")
        np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                      keras_argmax.run({"x0": x})["output_0"])


def test_the_stated_exception_a_minus_zero_before_a_plus_zero_at_the_maximum(keras_argmax):
    result = apply_rules(keras_argmax, [RULE])
    x = np.full(SHAPE, -1.0, "f4")
    x[..., 1], x[..., 3] = -0.0, 0.0
    assert np.all(keras_argmax.run({"x0": x})["output_0"] == 3)  # Keras: +0.0 above -0.0
    assert np.all(result.model.run({"x0": x})["output_0"] == 1)  # argmax(x): the first zero
