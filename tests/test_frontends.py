"""Every model format loads into one frozen Model that computes what the original computes."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.frontends import LoadOptions, detect_format, load_model

from .conftest import SAMPLES


@pytest.fixture(scope="module")
def keras_reference(calibration):
    import keras

    model = keras.saving.load_model(SAMPLES["keras"])
    x = calibration[:1]
    return x, np.asarray(model(x, training=False))


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_format_computes_the_original_outputs(kind, keras_reference):
    x, ref = keras_reference
    model = load_model(SAMPLES[kind])
    assert [i.shape for i in model.inputs] == [(1, 32, 32, 3)]
    assert model.outputs[0].shape == (1, 10)
    out = next(iter(model.run({model.inputs[0].name: x}).values()))
    assert np.max(np.abs(out - ref)) <= 1e-6


def test_formats_are_detected_from_content(samples):
    assert detect_format(str(samples["keras"])) == "keras"
    assert detect_format(str(samples["h5_tfkeras"])) == "h5"
    assert detect_format(str(samples["saved_model"])) == "saved_model"
    assert detect_format(str(samples["graphdef"])) == "graphdef"
    assert detect_format(str(samples["checkpoint"])) == "checkpoint"
    assert detect_format(str(samples["checkpoint"]) + ".meta") == "checkpoint"


def test_keras3_batchnorm_is_unfused_and_tf_keras_is_fused(samples):
    keras3 = load_model(samples["keras"]).op_histogram()
    legacy = load_model(samples["h5_tfkeras"]).op_histogram()
    assert "FusedBatchNormV3" not in keras3 and keras3["Rsqrt"] == 3
    assert legacy["FusedBatchNormV3"] == 3


def test_dynamic_batch_defaults_to_one_and_says_so(samples):
    model = load_model(samples["keras"])
    assert model.inputs[0].shape[0] == 1
    assert any("batch dimension fixed to 1" in n for n in model.source.notes)


def test_input_shape_option_sets_batch(samples, calibration):
    model = load_model(samples["keras"], LoadOptions(input_shapes={"image": (2, 32, 32, 3)}))
    assert model.inputs[0].shape == (2, 32, 32, 3)
    out = model.run({"image": calibration[:2]})["logits"]
    assert out.shape == (2, 10)


def test_graphdef_text_format_loads(tmp_path, samples, calibration):
    from google.protobuf import text_format

    gd = load_model(samples["graphdef"]).graph_def
    path = tmp_path / "model.pbtxt"
    path.write_text(text_format.MessageToString(gd))
    model = load_model(path)
    assert model.source.format == "graphdef_text"
    ref = load_model(samples["graphdef"]).run({"image": calibration[:1]})["Identity"]
    np.testing.assert_array_equal(model.run({"image": calibration[:1]})["Identity"], ref)


def test_saved_model_other_signature_is_named(tmp_path):
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def double(self, x):
            return {"y": x * 2.0}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"double": m.double})
    model = load_model(tmp_path / "sm", LoadOptions(signature="double"))
    assert [o.name for o in model.outputs] == ["y"]
    out = model.run({"x": np.ones((1, 4), np.float32)})["y"]
    np.testing.assert_array_equal(out, np.full((1, 4), 2.0, np.float32))


def test_multi_input_multi_output_keras_model(tmp_path):
    import keras

    a = keras.Input((4,), name="a")
    b = keras.Input((4,), name="b")
    s = keras.layers.Add(name="sum")([a, b])
    d = keras.layers.Dense(3, name="head")(s)
    model = keras.Model([a, b], {"sum": s, "head": d})
    model.save(tmp_path / "mm.keras")
    loaded = load_model(tmp_path / "mm.keras")
    assert [i.name for i in loaded.inputs] == ["a", "b"]
    feeds = {"a": np.ones((1, 4), np.float32), "b": np.full((1, 4), 2.0, np.float32)}
    outs = loaded.run(feeds)
    assert len(outs) == 2
    ref = model(feeds)
    got = sorted(outs.values(), key=lambda v: v.shape[-1])
    want = sorted((np.asarray(v) for v in ref.values()), key=lambda v: v.shape[-1])
    for g, w in zip(got, want):
        assert np.max(np.abs(g - w)) <= 1e-6


def test_keras3_grouped_conv_is_inlined_and_becomes_depthwise(tmp_path):
    """Keras 3 runs Conv2D(groups=C) in a jit-compiled function; the frozen graph must hold a
    plain op that converters and the op tables see, computing the same outputs."""
    import keras

    inp = keras.Input((8, 8, 4), name="x")
    y = keras.layers.Conv2D(8, 3, padding="same", groups=4, name="grouped")(inp)
    model = keras.Model(inp, y)
    rng = np.random.default_rng(0)
    model.get_layer("grouped").set_weights(
        [rng.normal(size=(3, 3, 1, 8)).astype(np.float32),
         rng.normal(size=8).astype(np.float32)])
    model.save(tmp_path / "g.keras")
    loaded = load_model(tmp_path / "g.keras")
    ops = loaded.op_histogram()
    assert "StatefulPartitionedCall" not in ops and ops.get("DepthwiseConv2dNative") == 1
    assert not loaded.graph_def.library.function
    x = rng.uniform(-1, 1, (1, 8, 8, 4)).astype(np.float32)
    want = np.asarray(model(x))
    got = next(iter(loaded.run({"x": x}).values()))
    assert np.max(np.abs(got - want)) <= 1e-5 * max(1.0, float(np.max(np.abs(want))))
