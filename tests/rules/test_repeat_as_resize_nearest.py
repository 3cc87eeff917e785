"""repeat_as_resize_nearest: Keras 3 UpSampling2D (a repeat per axis) becomes one exact
ResizeNearestNeighbor, which the Edge TPU and TFLite Micro run in int8."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.repeat_as_resize_nearest import RepeatAsResizeNearest
from rewriter.testing import int8_tflite, model_from_function, model_from_keras, op_types

RULE = RepeatAsResizeNearest()


def _upsampling(size=(2, 2), shape=(6, 5, 3)):
    inp = keras.Input(shape, batch_size=1)
    return model_from_keras(keras.Model(inp, keras.layers.UpSampling2D(size)(inp)))


def test_keras3_upsampling2d_becomes_one_resize_nearest():
    model = _upsampling((2, 3))
    assert {"Tile", "ExpandDims"} <= set(op_types(model))
    result = apply_rules(model, [RULE])
    assert dict(op_types(result.model)) == {"ResizeNearestNeighbor": 1}
    x = np.random.default_rng(0).normal(size=(1, 6, 5, 3)).astype(np.float32)
    got = result.model.run({"x0": x})["output_0"]
    np.testing.assert_array_equal(got, model.run({"x0": x})["output_0"])  # bit-exact
    np.testing.assert_array_equal(got, np.repeat(np.repeat(x, 2, axis=1), 3, axis=2))


def test_a_repeat_along_channels_is_left_alone():
    model = model_from_function(lambda x: tf.repeat(x, 2, axis=3), [(1, 4, 4, 3)])
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "Tile" in op_types(result.model)


def test_does_not_fire_on_int32_and_says_why():
    model = model_from_function(lambda x: tf.repeat(x, 2, axis=1), [(1, 4, 4, 3)],
                                dtype="int32")
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "int32" in result.rejected[0].reason


def test_int8_tflite_has_resize_and_no_tile_with_int8_error_of_one_step():
    result = apply_rules(_upsampling(), [RULE])
    ops, err = int8_tflite(result.model)
    names = [o for o, _ in ops]
    assert "RESIZE_NEAREST_NEIGHBOR" in names and "TILE" not in names
    assert ("RESIZE_NEAREST_NEIGHBOR", "int8") in ops
    assert err <= 1.0 / 127 + 1e-6  # one quantization step of the [-1, 1] input
