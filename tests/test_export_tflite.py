"""TFLite export: float matches TF, int8 keeps cosine >= 0.99, no Flex ops, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.export import ExportError
from rewriter.export.saved_model import export_saved_model
from rewriter.export.tflite import SYNTHETIC_WARNING, export_tflite
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.verify.data import synthetic_inputs
from rewriter.verify.metrics import compare, stack_samples
from rewriter.verify.runners import LiteRTRunner, TFRunner, rename_outputs, run_tflite


def freeze(fn, specs, output_names) -> Model:
    """A Model from a tf.function traced at ``specs`` (variables frozen to consts)."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(*specs))
    ins = [TensorSpec(s.name, t.name, tuple(t.shape), t.dtype.name)
           for s, t in zip(specs, frozen.inputs, strict=True)]
    outs = [TensorSpec(n, t.name, tuple(t.shape), t.dtype.name)
            for n, t in zip(output_names, frozen.outputs, strict=True)]
    return Model(frozen.graph.as_graph_def(), ins, outs, Source("<memory>", "memory"))


def keras_convbn_elu() -> Model:
    """Keras 3 Conv -> BN -> ELU -> pool -> Dense, with non-trivial BN statistics."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 12, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(8, 3, padding="same")(inp)
    bn = keras.layers.BatchNormalization()
    x = keras.layers.ELU()(bn(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(5, name="logits")(x)
    km = keras.Model(inp, out)
    rng = np.random.default_rng(0)
    bn.moving_mean.assign(rng.normal(size=8).astype(np.float32) * 0.1)
    bn.moving_variance.assign(rng.uniform(0.5, 2.0, size=8).astype(np.float32))
    fn = tf.function(lambda image: km(image, training=False))
    return freeze(fn, [tf.TensorSpec((1, 12, 12, 3), tf.float32, name="image")], ["logits"])


@pytest.fixture(scope="module")
def model() -> Model:
    return keras_convbn_elu()


@pytest.fixture(scope="module")
def float_file(model, tmp_path_factory):
    return export_tflite(model, tmp_path_factory.mktemp("f") / "model.tflite")


@pytest.fixture(scope="module")
def int8_file(model, tmp_path_factory):
    calib = synthetic_inputs(model.inputs, samples=16, seed=1)
    return export_tflite(model, tmp_path_factory.mktemp("q") / "model.tflite", quantize="int8",
                         calibration=calib, int8_io=True)


def _tf_vs(model: Model, path: str, seed: int, samples: int = 4):
    data = synthetic_inputs(model.inputs, samples=samples, seed=seed)
    ref = stack_samples(TFRunner(model).run_many(data))
    names = [o.name for o in model.outputs]
    test = stack_samples([rename_outputs(o, names) for o in LiteRTRunner(path).run_many(data)])
    return ref, test


def test_float_tflite_matches_tf_within_1e_5(model, float_file):
    ref, test = _tf_vs(model, float_file.path, seed=2)
    c = compare(ref, test, atol=1e-5, rtol=1e-5)
    assert c.ok, c.to_json()
    assert float_file.quantize == "none" and float_file.route == "from_saved_model"
    assert {"CONV_2D", "FULLY_CONNECTED"} <= set(float_file.ops)
    assert float_file.warnings == []


def test_float_tflite_matches_a_tf_function_model(tmp_path):
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(3).normal(size=(6, 4)).astype(np.float32))

    @tf.function
    def f(x, y):
        return tf.nn.relu6(tf.matmul(x, w)) * tf.reduce_mean(y), tf.tanh(x)

    specs = [tf.TensorSpec((2, 6), tf.float32, name="x"), tf.TensorSpec((3,), tf.float32,
                                                                        name="y")]
    m = freeze(f, specs, ["a", "b"])
    res = export_tflite(m, tmp_path / "fn.tflite")
    feeds = synthetic_inputs(m.inputs, seed=4)[0]
    ref = m.run(feeds)
    out = run_tflite(res.path, feeds, output_names=["a", "b"])
    assert compare(ref, out, atol=1e-5, rtol=1e-5).ok


def test_tflite_signature_carries_the_model_names(model, float_file):
    runner = LiteRTRunner(float_file.path)
    assert [i.name for i in runner.inputs] == [i.name for i in model.inputs]
    assert runner.outputs == [o.name for o in model.outputs]


def test_int8_tflite_keeps_cosine_above_0_99_on_calibration_like_data(model, int8_file):
    ref, test = _tf_vs(model, int8_file.path, seed=5, samples=8)
    c = compare(ref, test, min_cosine=0.99, atol=np.inf, rtol=0.0)
    assert c.ok, c.to_json()
    assert c.outputs[0].cosine >= 0.99
    assert c.outputs[0].max_abs_error > 0  # it really is quantised


def test_int8_io_gives_int8_input_and_output_tensors(int8_file):
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=int8_file.path)
    assert interp.get_input_details()[0]["dtype"] == np.int8
    assert interp.get_output_details()[0]["dtype"] == np.int8


def test_int8_export_reports_ops_the_converter_left_in_float(int8_file):
    assert "ELU" in int8_file.float_ops
    assert any("left ops in float" in w and "ELU" in w for w in int8_file.warnings)


def test_int8_without_calibration_warns_that_accuracy_is_unmeasured(model, tmp_path):
    res = export_tflite(model, tmp_path / "q.tflite", quantize="int8")
    assert SYNTHETIC_WARNING in res.warnings
    assert res.quantize == "int8"


def test_int8_calibration_sample_missing_an_input_is_refused(model, tmp_path):
    with pytest.raises(ExportError, match="image"):
        export_tflite(model, tmp_path / "q.tflite", quantize="int8",
                      calibration=[{"other": np.zeros((1, 12, 12, 3), np.float32)}])


def test_float16_tflite_is_close_to_tf(model, tmp_path):
    res = export_tflite(model, tmp_path / "h.tflite", quantize="float16")
    ref, test = _tf_vs(model, res.path, seed=6)
    c = compare(ref, test, atol=0.0, rtol=0.0)
    assert c.outputs[0].max_rel_error < 1e-2
    assert c.outputs[0].cosine > 0.9999


def test_unsupported_op_fails_naming_the_op_and_writes_nothing(tmp_path):
    import tensorflow as tf

    m = freeze(tf.function(lambda x: tf.math.erfc(x) * 2.0),
               [tf.TensorSpec((1, 8), tf.float32, name="x")], ["y"])
    target = tmp_path / "bad.tflite"
    with pytest.raises(ExportError) as info:
        export_tflite(m, target)
    assert info.value.ops == ["Erfc"]
    assert "Erfc" in str(info.value) and "Flex" in str(info.value)
    assert info.value.nodes and info.value.nodes[0].startswith("Erfc")
    assert list(tmp_path.iterdir()) == []


def test_unknown_quantization_is_a_user_error(model, tmp_path):
    with pytest.raises(ExportError, match="int4"):
        export_tflite(model, tmp_path / "x.tflite", quantize="int4")


def test_export_replaces_an_existing_file_and_leaves_no_temporaries(model, tmp_path):
    target = tmp_path / "model.tflite"
    target.write_bytes(b"old")
    res = export_tflite(model, target)
    assert target.read_bytes()[4:8] == b"TFL3"
    assert res.size == target.stat().st_size
    assert [p.name for p in tmp_path.iterdir()] == ["model.tflite"]


def test_saved_model_export_serves_the_model_names(model, tmp_path):
    import tensorflow as tf

    res = export_saved_model(model, tmp_path / "saved")
    loaded = tf.saved_model.load(res.path)
    fn = loaded.signatures["serving_default"]
    assert list(fn.structured_input_signature[1]) == ["image"]
    feeds = synthetic_inputs(model.inputs, seed=7)[0]
    out = fn(image=tf.constant(feeds["image"]))
    assert list(out) == ["logits"]
    np.testing.assert_allclose(out["logits"].numpy(), model.run(feeds)["logits"], rtol=1e-6,
                               atol=1e-6)


def test_frozen_graph_fallback_route_converts_float_and_int8(model, tmp_path):
    from rewriter.export.tflite import _convert_once

    calib = synthetic_inputs(model.inputs, samples=8, seed=8)
    for quantize in ("none", "int8"):
        path = tmp_path / f"{quantize}.tflite"
        path.write_bytes(_convert_once(model, "v1_frozen_graph", quantize, calib, False))
        ref, test = _tf_vs(model, str(path), seed=9)
        c = compare(ref, test, atol=1e-5 if quantize == "none" else np.inf, rtol=1e-5,
                    min_cosine=0.99)
        assert c.ok, (quantize, c.to_json())


def test_export_result_lists_int8_io_quantisation(int8_file):
    rows = {(r["kind"], r["name"]): r for r in int8_file.io}
    assert rows[("input", "image")]["dtype"] == "int8"
    assert rows[("output", "logits")]["scale"] > 0
    assert isinstance(rows[("input", "image")]["zero_point"], int)
