"""The tflm target: an int8 model stays int8 on the microcontroller (no float islands), and the
artifact is proven in TFLite Micro's own interpreter, which the [tflm] extra installs."""

from __future__ import annotations

import json

import pytest

from rewriter.verify.tflm import tflm_available

from .conftest import MODELS, SAMPLES

needs_tflm = pytest.mark.skipif(not tflm_available(), reason="pip install 'rewriter[tflm]'")


def test_float_island_in_an_int8_model_is_unsupported_and_has_a_rule(cli):
    code, out, _ = cli("check", SAMPLES["keras"], "--target", "tflm", "--graph-only", "--json")
    result = json.loads(out)
    assert code == 1
    (elu,) = result["unsupported"]
    assert elu["op"] == "Elu" and "Must not run in float inside an int8 model" in elu["reason"]
    from rewriter.rules import rules_for_op

    # Some ELU rule fixes it, but not elu_exact: TFLM's EXP kernel is float only.
    assert elu["fix"] in {r.name for r in rules_for_op("Elu")} and elu["fix"] != "elu_exact"


def test_a_float_model_has_no_islands(cli):
    code, out, _ = cli("check", SAMPLES["keras"], "--target", "tflm", "--graph-only",
                       "--quantize", "none", "--json")
    assert code == 0 and json.loads(out)["ok"]


def test_the_artifact_marks_the_island_not_the_io(calibration, tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_artifact

    calib = [{"image": c[None]} for c in calibration[:8]]
    path = export_tflite(load_model(SAMPLES["keras"]), tmp_path / "m.tflite", quantize="int8",
                         calibration=calib).path
    islands = [(f.op, f.boundary) for f in read_artifact(path).ops if f.float_island]
    assert sorted(op for op, _ in islands) == ["DEQUANTIZE"] * 3 + ["ELU"] * 3 + ["QUANTIZE"] * 3
    assert not any(boundary for _, boundary in islands)
    check = load_target("tflm").check_artifact(path)
    assert {u["op"] for u in check.unsupported_summary()} == {"ELU", "QUANTIZE", "DEQUANTIZE"}


@needs_tflm
def test_tflm_job_removes_the_island_and_runs_the_file_in_tflite_micro(cli, tmp_path):
    code, out, _ = cli(SAMPLES["keras"], "--target", "tflm", "--calibration",
                       MODELS / "calibration.npy", "-o", tmp_path / "out", "--json")
    report = json.loads(out)
    assert code == 0, report["summary"]
    (applied,) = report["rules_applied"]
    assert applied["rule"] != "elu_exact" and applied["count"] == 3
    assert report["unsupported_after"] == [] and "ELU" not in report["export"]["ops"]
    art = report["equivalence"]["artifact"]
    assert art["runtime"] == "TFLite Micro"
    assert art["ok"]


def test_tflm_job_without_tflite_micro_says_what_to_install(cli, monkeypatch, tmp_path):
    import rewriter.verify.tflm as tflm

    monkeypatch.setattr(tflm, "tflm_available", lambda: False)
    code, _, err = cli(SAMPLES["keras"], "--target", "tflm", "-o", tmp_path / "out")
    assert code == 2
    assert err.startswith("error: the tflm target proves the artifact in TFLite Micro")
    assert "pip install 'rewriter[tflm]'" in err and not (tmp_path / "out").exists()


def test_verify_tflm_without_tflite_micro_says_what_to_install(cli, monkeypatch, tmp_path):
    import tensorflow as tf

    import rewriter.verify.tflm as tflm

    fn = tf.function(lambda x: tf.nn.relu(x), input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()])
    model = tmp_path / "relu.tflite"
    model.write_bytes(converter.convert())
    monkeypatch.setattr(tflm, "tflm_available", lambda: False)
    code, _, err = cli("verify", model, model, "--tflm")
    assert code == 2
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "TFLite Micro's interpreter is not installed: pip install 'rewriter[tflm]'" in err


@pytest.mark.skipif(not tflm_available(), reason="TFLite Micro not installed")
def test_a_model_whose_tensors_outgrow_the_first_arena_still_runs(tmp_path):
    """Two live 1x192x192x64 int8 activations (2.4 MB each) do not fit the first arena (4 MB for
    a small file; before, the job stopped with exit 2): the interpreter is given the next size,
    and its outputs match LiteRT's on the same file within one output step."""
    import numpy as np
    import tensorflow as tf

    from rewriter.export.tflite import export_tflite
    from rewriter.testing import model_from_function
    from rewriter.verify.runners import LiteRTRunner
    from rewriter.verify.tflm import MIN_ARENA, TflmRunner, arena_sizes

    rng = np.random.default_rng(0)
    w1 = tf.constant(rng.normal(0, 0.3, (1, 1, 4, 64)).astype("f4"))
    w2 = tf.constant(rng.normal(0, 0.1, (1, 1, 64, 4)).astype("f4"))

    def fn(x):
        h = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        return tf.nn.conv2d(h, w2, 1, "SAME") + tf.nn.conv2d(tf.nn.relu(h - 0.1), w2, 1, "SAME")

    model = model_from_function(fn, [(1, 192, 192, 4)])
    data = [{"x0": rng.uniform(-1, 1, (1, 192, 192, 4)).astype("f4")} for _ in range(2)]
    path = export_tflite(model, tmp_path / "big.tflite", quantize="int8", calibration=data,
                         int8_io=True).path
    assert arena_sizes(10)[0] == MIN_ARENA and arena_sizes(10)[1] == 2 * MIN_ARENA
    from ai_edge_litert.interpreter import Interpreter

    micro = TflmRunner(path).run_many(data[:1])[0]
    lite = LiteRTRunner(path).run(data[0])
    step = Interpreter(path).get_output_details()[0]["quantization"][0]
    [(k, v)] = lite.items()
    assert np.ptp(v) > 20 * step  # a real output, not a constant
    # the two runtimes' int8 kernels round differently: within one output step
    assert np.max(np.abs(micro[k] - v)) <= step * 1.001


@pytest.mark.skipif(not tflm_available(), reason="TFLite Micro not installed")
def test_a_file_tflite_micro_fails_to_run_is_measured_in_litert_and_not_ok(cli, tmp_path):
    """An int8 SQRT (kept by --exact-only: its rule is approximate): TFLite Micro's kernel takes
    float only and the invocation fails. Before, the job stopped with exit 2 and no report; now
    the file is measured in LiteRT, the report says why, and the job is not OK (exit 1)."""
    import tensorflow as tf

    from rewriter.testing import model_from_function

    model = model_from_function(lambda x: tf.sqrt(tf.nn.relu(x) + 0.1) * 2.0, [(1, 16)])
    path = tmp_path / "sqrt.pb"
    path.write_bytes(model.graph_def.SerializeToString())
    code, _, err = cli(path, "--target", "tflm", "--exact-only", "-o", tmp_path / "out", "-q")
    assert code == 1, err
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    artifact = report["equivalence"]["artifact"]
    assert artifact["runtime"] == "LiteRT" and "Node SQRT" in artifact["runtime_fallback"]
    assert "in LiteRT, not in the target's runtime" in report["summary"]
    assert report["ok"] is False
    assert min(o["cosine"] for o in artifact["outputs"].values()) > 0.999


def test_the_arena_grows_until_the_model_fits_and_the_largest_sizes_error_is_raised():
    """``_interpreter`` against a stand-in runtime whose allocation fails below ``need`` bytes:
    it is given the first size that fits; when none does, the largest size's error is raised."""
    from types import SimpleNamespace

    from rewriter.verify.tflm import MAX_ARENA, _interpreter, arena_sizes

    def runtime(need):
        tried = []

        def from_bytes(data, arena_size):
            tried.append(arena_size)
            if arena_size < need:
                raise RuntimeError(f"arena {arena_size} too small")
            return ("interpreter", arena_size)

        return SimpleNamespace(Interpreter=SimpleNamespace(from_bytes=from_bytes)), tried

    sizes = arena_sizes(100)
    assert len(sizes) >= 3 and sizes[-1] == MAX_ARENA
    rt, tried = runtime(sizes[2])
    assert _interpreter(rt, b"x" * 100) == ("interpreter", sizes[2]) and tried == sizes[:3]
    rt, tried = runtime(sizes[-1])
    assert _interpreter(rt, b"x" * 100) == ("interpreter", sizes[-1]) and tried == sizes
    rt, tried = runtime(MAX_ARENA + 1)
    with pytest.raises(RuntimeError, match=f"arena {MAX_ARENA} too small"):
        _interpreter(rt, b"x" * 100)
    assert tried == sizes
