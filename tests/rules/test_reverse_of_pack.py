"""reverse_of_pack: reversing a Pack along its packed axis is packing in the other order.

Exact (data movement only): outputs are compared for equality. The Keras shape is covered too:
a Bidirectional GRU with return_sequences, once unrolled, ends in ReverseV2(Transpose(Pack)).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.reverse_of_pack import ReverseOfPack
from rewriter.testing import model_from_function, op_types

RULE = ReverseOfPack()


def _steps(x):
    return [tf.tanh(x * (i + 1.0)) for i in range(5)]


def test_reverse_through_a_transpose_becomes_a_reversed_pack_and_is_equal():
    def fn(x):
        packed = tf.stack(_steps(x), axis=0)  # [5, 1, 3]
        return tf.reverse(tf.transpose(packed, [1, 0, 2]), axis=[1])

    model = model_from_function(fn, [(1, 3)])
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert "ReverseV2" not in ops and ops["Pack"] == 1 and ops["Transpose"] == 1
    x = np.linspace(-2, 2, 3, dtype="f4").reshape(1, 3)
    np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                  model.run({"x0": x})["output_0"])


def test_reverse_along_another_axis_is_not_matched():
    def fn(x):
        return tf.reverse(tf.stack(_steps(x), axis=0), axis=[2])

    model = model_from_function(fn, [(1, 3)])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and op_types(result.model)["ReverseV2"] == 1


def test_unrolled_bidirectional_gru_sequences_lose_their_reverse():
    import keras

    from rewriter.testing import model_from_keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((6, 4), batch_size=1)
    out = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True))(inp)
    model = model_from_keras(keras.Model(inp, keras.layers.Flatten()(out)))
    unrolled = apply_rules(model, ["while_unroll"]).model
    assert op_types(unrolled)["ReverseV2"] == 1
    result = apply_rules(unrolled, [RULE])
    assert "ReverseV2" not in op_types(result.model)
    x = np.random.default_rng(0).uniform(-3, 3, (1, 6, 4)).astype("f4")
    np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                  unrolled.run({"x0": x})["output_0"])
