"""Runners: one interface over TF, LiteRT, ONNX Runtime and TFLite Micro; names and quantisation."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from rewriter.errors import UserError
from rewriter.export.onnx import export_onnx
from rewriter.export.tflite import export_tflite
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.verify.data import synthetic_inputs
from rewriter.verify.factory import load_any
from rewriter.verify.metrics import compare, stack_samples
from rewriter.verify.runners import (
    LiteRTRunner,
    OnnxRunner,
    RunnerError,
    TFRunner,
    dequantize,
    match_names,
    quantize,
    run_onnx,
    run_tf,
    run_tflite,
)
from rewriter.verify.tflm import TflmRunner, _why, run_tflm, tflm_available

needs_tflm = pytest.mark.skipif(not tflm_available(), reason="tflite-micro not installed")


def _freeze(fn, specs, names) -> Model:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(*specs))
    ins = [TensorSpec(s.name, t.name, tuple(t.shape), t.dtype.name)
           for s, t in zip(specs, frozen.inputs, strict=True)]
    outs = [TensorSpec(n, t.name, tuple(t.shape), t.dtype.name)
            for n, t in zip(names, frozen.outputs, strict=True)]
    return Model(frozen.graph.as_graph_def(), ins, outs, Source("<memory>", "memory"))


@pytest.fixture(scope="module")
def model() -> Model:
    """Conv -> BN -> ELU -> Dense (Keras 3) with two outputs."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1)
    inp = keras.Input((8, 8, 2), batch_size=1)
    x = keras.layers.Conv2D(4, 3, padding="same")(inp)
    x = keras.layers.ELU()(keras.layers.BatchNormalization()(x))
    x = keras.layers.Flatten()(x)
    km = keras.Model(inp, [keras.layers.Dense(3)(x), keras.layers.Dense(2)(x)])
    fn = tf.function(lambda v: km(v, training=False))
    return _freeze(fn, [tf.TensorSpec((1, 8, 8, 2), tf.float32, name="features")],
                   ["head_a", "head_b"])


@pytest.fixture(scope="module")
def files(model, tmp_path_factory):
    d = tmp_path_factory.mktemp("runners")
    calib = synthetic_inputs(model.inputs, samples=16, seed=11)
    return {
        "float": export_tflite(model, d / "f.tflite").path,
        "int8": export_tflite(model, d / "q.tflite", quantize="int8", calibration=calib,
                              int8_io=True).path,
        "onnx": export_onnx(model, d / "m.onnx").path,
    }


def test_quantize_then_dequantize_is_within_half_a_step():
    x = np.linspace(-1, 1, 101, dtype=np.float32)
    q = quantize(x, np.int8, 0.01, 3)
    assert q.dtype == np.int8
    assert np.max(np.abs(dequantize(q, 0.01, 3) - x)) <= 0.005 + 1e-7


def test_quantize_saturates_at_the_type_range():
    q = quantize(np.array([1e6, -1e6]), np.int8, 0.1, 0)
    assert q.tolist() == [127, -128]


def test_match_names_prefers_names_then_normalised_names_then_order():
    assert match_names(["a", "b"], ["b", "a"], "output") == ({"a": "a", "b": "b"}, "by name")
    mapping, how = match_names(["image"], ["serving_default_image:0"], "input")
    assert mapping == {"image": "serving_default_image:0"} and how == "by normalised name"
    mapping, how = match_names(["x", "y"], ["Identity", "Identity_1"], "output")
    assert mapping == {"x": "Identity", "y": "Identity_1"} and how == "by order"


def test_match_names_refuses_different_counts():
    with pytest.raises(RunnerError, match="different outputs"):
        match_names(["a"], ["b", "c"], "output")


def test_tf_runner_returns_the_model_outputs(model):
    feeds = synthetic_inputs(model.inputs, seed=0)[0]
    out = run_tf(model, feeds)
    assert list(out) == ["head_a", "head_b"]
    assert out["head_a"].shape == (1, 3)


def test_litert_float_runner_matches_tf_by_name(model, files):
    feeds = synthetic_inputs(model.inputs, seed=1)[0]
    out = run_tflite(files["float"], feeds)
    assert sorted(out) == ["head_a", "head_b"]  # the file's signature names
    assert compare(run_tf(model, feeds), out, atol=1e-5, rtol=1e-5).ok


def test_litert_int8_runner_quantises_inputs_and_dequantises_outputs(model, files):
    runner = LiteRTRunner(files["int8"])
    assert runner.inputs[0].dtype == "float32"  # callers feed floats
    data = synthetic_inputs(model.inputs, samples=6, seed=2)
    ref = stack_samples(TFRunner(model).run_many(data))
    test = stack_samples(runner.run_many(data))
    assert all(v.dtype == np.float32 for v in test.values())
    c = compare(ref, test, atol=np.inf, rtol=0.0, min_cosine=0.99)
    assert c.ok, c.to_json()


def test_outputs_of_a_file_without_signature_are_renamed_by_order(model, tmp_path):
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([model.concrete_function()])
    path = tmp_path / "nosig.tflite"
    path.write_bytes(converter.convert())
    feeds = synthetic_inputs(model.inputs, seed=3)[0]
    out = run_tflite(path, feeds, output_names=["head_a", "head_b"])
    assert compare(run_tf(model, feeds), out, atol=1e-5, rtol=1e-5).ok


def test_positional_signature_keys_map_by_position_not_by_file_order(model, tmp_path):
    """Output names that are not signature keys ("a/head") are exported as output_0, output_1;
    the file lists its outputs in another order, and each name still gets its own tensor."""
    from dataclasses import replace

    named = replace(model, outputs=[replace(o, name=f"{o.name}/x") for o in model.outputs])
    path = export_tflite(named, tmp_path / "positional.tflite").path
    runner = LiteRTRunner(path)
    assert runner.outputs == ["output_1", "output_0"]  # the file's order: not the model's
    mapping, how = match_names(["head_a/x", "head_b/x"], runner.outputs, "output")
    assert mapping == {"head_a/x": "output_0", "head_b/x": "output_1"}
    assert how == "by signature position"
    feeds = synthetic_inputs(model.inputs, seed=3)[0]
    out = run_tflite(path, feeds, output_names=["head_a/x", "head_b/x"])
    want = run_tf(model, feeds)
    for name in ("head_a", "head_b"):
        assert out[f"{name}/x"].shape == want[name].shape
        np.testing.assert_allclose(out[f"{name}/x"], want[name], rtol=1e-5, atol=1e-5)


def test_onnx_runner_matches_tf(model, files):
    feeds = synthetic_inputs(model.inputs, seed=4)[0]
    out = run_onnx(files["onnx"], feeds)
    assert compare(run_tf(model, feeds), out, atol=1e-5, rtol=1e-5).ok


def test_load_any_picks_the_runtime_from_the_file(files, tmp_path):
    assert isinstance(load_any(files["float"]), LiteRTRunner)
    assert isinstance(load_any(files["onnx"]), OnnxRunner)
    with pytest.raises(UserError, match="no such file"):
        load_any(tmp_path / "missing.tflite")


def test_load_any_runs_a_keras_file_in_tf(tmp_path):
    import keras

    inp = keras.Input((4,), batch_size=1, name="v")
    keras.Model(inp, keras.layers.Dense(2, name="d")(inp)).save(tmp_path / "m.keras")
    runner = load_any(tmp_path / "m.keras")
    assert isinstance(runner, TFRunner)
    out = runner.run({"v": np.ones((1, 4), np.float32)})
    assert list(out.values())[0].shape == (1, 2)


def test_corrupt_tflite_is_a_runner_error(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"not a flatbuffer at all")
    with pytest.raises(RunnerError, match="LiteRT cannot load"):
        LiteRTRunner(bad)


@needs_tflm
def test_tflm_float_and_int8_match_litert(model, files):
    data = synthetic_inputs(model.inputs, samples=3, seed=5)
    for kind, atol in (("float", 1e-5), ("int8", 0.0)):
        lite = stack_samples(LiteRTRunner(files[kind]).run_many(data))
        micro = stack_samples(TflmRunner(files[kind]).run_many(data))
        # int8: one quantisation step at most (kernels may round differently)
        step = 0.0 if kind == "float" else _output_steps(files[kind])
        c = compare(lite, micro, atol={"head_a": atol + step[0] if step else atol,
                                       "head_b": atol + step[1] if step else atol}, rtol=1e-5)
        assert c.ok, (kind, c.to_json())


def _output_steps(path: str) -> list[float]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=path)
    by_name = {}
    sig = interp._get_full_signature_list()["serving_default"]["outputs"]
    for d in interp.get_output_details():
        name = next(k for k, v in sig.items() if v == d["index"])
        by_name[name] = float(d["quantization"][0]) * 1.001
    return [by_name["head_a"], by_name["head_b"]]


@needs_tflm
def test_run_tflm_single_sample_matches_tf(model, files):
    feeds = synthetic_inputs(model.inputs, seed=6)[0]
    out = run_tflm(files["float"], feeds, output_names=["head_a", "head_b"])
    assert compare(run_tf(model, feeds), out, atol=1e-5, rtol=1e-5).ok


@needs_tflm
def test_tflm_missing_kernel_is_a_runner_error_naming_the_op(tmp_path):
    import tensorflow as tf

    m = _freeze(tf.function(lambda x: tf.math.top_k(x, 3).values),
                [tf.TensorSpec((1, 8), tf.float32, name="x")], ["y"])
    path = export_tflite(m, tmp_path / "topk.tflite").path
    with pytest.raises(RunnerError) as info:
        TflmRunner(path).run({"x": np.arange(8, dtype=np.float32)[None]})
    assert info.value.ops == ["TOPK_V2"]


def test_tflm_crash_reports_the_signal_and_the_message():
    proc = subprocess.CompletedProcess(["x"], -6, "", "Traceback (most recent call last):\n"
                                       "  File x\nsomething failed\n")
    assert _why(proc) == "killed by SIGABRT: something failed"
