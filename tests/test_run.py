"""The main job end to end on the sample models: rewrite, export, check, prove, report."""

from __future__ import annotations

import json

import numpy as np

from .conftest import MODELS, SAMPLES

CALIB = str(MODELS / "calibration.npy")


def _report(out) -> dict:
    return json.loads((out / "report.json").read_text())


def test_edgetpu_job_succeeds_with_every_op_in_the_table(edgetpu_run):
    code, out = edgetpu_run
    report = _report(out)
    assert code == 0 and report["ok"] is True
    assert {u["op"] for u in report["unsupported_before"]} == {"Elu"}
    assert report["unsupported_after"] == []
    from rewriter.targets import load_target

    table = load_target("edgetpu")
    assert report["artifact_ops"], "artifact ops are listed"
    assert all(table.has_op(op) for op in report["artifact_ops"])
    assert "ELU" not in report["artifact_ops"] and "EXP" not in report["artifact_ops"]
    assert report["placement_after"]["cut"] is None


def test_edgetpu_report_states_rules_and_bounds(edgetpu_run):
    _, out = edgetpu_run
    report = _report(out)
    # Only what the target lacks is rewritten: batch norm is made of ops the Edge TPU has (and
    # the converter folds it into the conv), ELU is not. The Edge TPU has no EXP either, so ELU
    # needs the bounded form, and the report states its bound.
    # Each ELU is fitted on the range its input takes on the calibration data: one bound each.
    [elu] = report["rules_applied"]
    assert elu["rule"] == "elementwise_ramps" and elu["count"] == 3
    assert elu["exact"] is False and 0 < elu["bound"]["max_abs_error"] < 1e-2
    assert len(elu["bounds"]) == 3 and {b["root"] for b in elu["bounds"]} == set(elu["roots"])
    assert all("calibration samples" in b["note"] for b in elu["bounds"])
    assert elu["bound"]["max_abs_error"] == max(b["max_abs_error"] for b in elu["bounds"])
    assert report["unsupported_before"][0]["fix"] == elu["rule"]


def test_edgetpu_artifact_is_full_int8_and_matches(edgetpu_run):
    _, out = edgetpu_run
    report = _report(out)
    assert report["quantize"] == "int8"
    art = report["equivalence"]["artifact"]
    assert art["ok"] is True
    assert art["outputs"]["logits"]["cosine"] >= 0.99
    tf = report["equivalence"]["rewritten_tf"]
    assert tf["ok"] is True
    from rewriter.targets.artifact import read_artifact

    artifact = read_artifact(out / "model.tflite")
    io_dtypes = {t["dtype"] for t in artifact.inputs + artifact.outputs}
    assert io_dtypes == {"int8"}


def test_edgetpu_outdir_holds_every_output(edgetpu_run):
    _, out = edgetpu_run
    for name in ("model.tflite", "report.json", "report.md", "report.html",
                 "saved_model/saved_model.pb"):
        assert (out / name).exists(), name
    md = (out / "report.md").read_text()
    assert "Result: OK" in md and "elementwise_ramps" in md and "Vela" not in md


def test_rewritten_saved_model_computes_the_original(edgetpu_run, calibration):
    _, out = edgetpu_run
    from rewriter.frontends import load_model

    rewritten = load_model(out / "saved_model")
    original = load_model(SAMPLES["keras"])
    x = {"image": calibration[:2][:1]}
    a = next(iter(original.run(x).values()))
    b = next(iter(rewritten.run(x).values()))
    # ELU without Exp is approximate: the report's stated budget bounds the difference.
    assert np.max(np.abs(a - b)) <= 1e-2 * max(1.0, float(np.max(np.abs(a))))
    assert "Elu" not in rewritten.op_histogram()


def test_ethos_u55_puts_every_operator_on_the_npu(tmp_path, cli):
    code, _, _ = cli(SAMPLES["checkpoint"], "--target", "ethos-u55-128", "-o", tmp_path, "-q",
                     "--calibration", CALIB, "--check-each-rule")
    report = _report(tmp_path)
    assert code == 0, report["summary"]
    # every applied rule was checked on its own, and no intermediate tensor left its bound
    assert [c["rule"] for c in report["plots"]["per_rule"]] == report["plan"]["rules"]
    assert report["plots"]["divergence"]["ok"] is True
    assert report["vela"]["cpu_ops"] == 0 and report["vela"]["npu_ops"] > 0
    assert list(tmp_path.glob("*_vela.tflite")) and list(tmp_path.glob("*_summary_*.csv"))
    assert float(report["vela"]["summary"]["inference_time"]) > 0


def test_onnx_target_runs_in_onnx_runtime_within_1e4(tmp_path, cli):
    code, _, _ = cli(SAMPLES["h5_tfkeras"], "--target", "onnx", "--opset", "13", "-o", tmp_path,
                     "-q")
    report = _report(tmp_path)
    assert code == 0, report["summary"]
    m = report["equivalence"]["artifact"]["outputs"]["logits"]
    assert m["max_rel_error"] <= 1e-4
    import onnx

    onnx.checker.check_model(onnx.load(str(tmp_path / "model.onnx")))


def test_unfixable_op_exits_1_and_is_reported(tmp_path, cli):
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.reduce_prod(x, axis=1, keepdims=True)}  # no rule removes PROD

    m = M()
    tf.saved_model.save(m, str(tmp_path / "sm"), signatures={"serving_default": m.__call__})
    code, _, _ = cli(tmp_path / "sm", "--target", "edgetpu", "-o", tmp_path / "out", "-q")
    report = _report(tmp_path / "out")
    assert code == 1 and report["ok"] is False
    assert "REDUCE_PROD" in {u["op"] for u in report["unsupported_after"]}
    assert all(u["fix"] is None for u in report["unsupported_after"] if u["op"] == "REDUCE_PROD")


def test_output_path_that_is_a_file_is_refused(tmp_path, cli):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = cli(SAMPLES["keras"], "--target", "edgetpu", "-o", f)
    assert code == 2 and err.startswith("error: ") and "existing file" in err
    assert f.read_text() == "x"


def test_unknown_target_is_refused(tmp_path, cli):
    code, _, err = cli(SAMPLES["keras"], "--target", "nosuch", "-o", tmp_path)
    assert code == 2 and "unknown target" in err and "edgetpu" in err


def test_exact_only_refuses_the_approximate_rule_and_says_why(tmp_path, cli):
    code, _, _ = cli(SAMPLES["keras"], "--target", "edgetpu", "-o", tmp_path, "-q",
                     "--calibration", CALIB, "--exact-only")
    report = _report(tmp_path)
    assert code == 1 and report["ok"] is False
    assert report["rules_applied"] == []
    (elu,) = [u for u in report["unsupported_before"] if u["op"] == "Elu"]
    assert elu["fix"] is None
    assert "--exact-only refuses it" in elu["why"] and "elementwise_ramps" in elu["why"]
    assert "ELU" in {u["op"] for u in report["unsupported_after"]}
