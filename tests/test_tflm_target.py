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
    from rewriter.artifact import read_artifact
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model
    from rewriter.targets import load_target

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
