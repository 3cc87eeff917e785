"""The ``gpu`` target follows TensorFlow's own GPU compatibility checker.

``op_tables/gpu.toml`` is the op list of ``CheckGpuDelegateCompatibility`` (gpu_compatibility.cc).
The checker's binary form, ``tf.lite.experimental.Analyzer.analyze(..., gpu_compatibility=True)``,
cannot be the judge with the TF and LiteRT builds installed here: it approves every op, which the
first test shows with an op its own source rejects. When that test fails (a build whose analyzer
checks), make the analyzer the gpu target's judge of the exported file, as Vela is for Ethos-U.
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

tf = pytest.importorskip("tensorflow")


def _tflite(fn, shape=(1, 8, 8, 4)) -> bytes:
    f = tf.function(fn, input_signature=[tf.TensorSpec(shape, tf.float32)], autograph=False)
    conv = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    return conv.convert()


def _analyzer_report(model: bytes) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        tf.lite.experimental.Analyzer.analyze(model_content=model, gpu_compatibility=True)
    return out.getvalue()


def test_the_installed_analyzer_approves_an_op_its_source_rejects():
    """gpu_compatibility.cc: MIRROR_PAD "Only Reflective padding is supported"."""
    model = _tflite(lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC"))
    report = _analyzer_report(model)
    assert "MIRROR_PAD" in report
    assert "GPU COMPATIBILITY WARNING" not in report
    assert "looks compatible with GPU delegate" in report


def test_the_table_is_the_checkers_op_list():
    from rewriter.targets import load_target, tflite_builtins

    gpu = load_target("gpu")
    assert set(gpu.ops) <= tflite_builtins()  # every name is a real builtin
    # Ops the checker accepts that the table once lacked (the checker won the disagreement).
    for op in ("GELU", "GATHER", "CAST", "SELECT_V2", "FLOOR", "GREATER", "DEPTH_TO_SPACE"):
        assert gpu.has_op(op), op
    for op in ("FlexErf", "CUSTOM", "ARG_MAX", "WHERE", "BROADCAST_TO"):  # not in the checker
        assert not gpu.has_op(op), op
    assert gpu.ops["MIRROR_PAD"].note == "REFLECT mode only"
    assert "gpu_compatibility.cc" in gpu.source


def test_keras_gelu_is_left_alone_for_the_gpu(cli, gelu_keras, tmp_path):
    code, out, err = cli("check", gelu_keras, "--target", "gpu", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"] and result["unsupported"] == [], err
    code, out, err = cli(gelu_keras, "--target", "gpu", "-o", tmp_path / "out", "--json")
    report = json.loads(out)
    assert code == 0, report["summary"]
    assert report["rules_applied"] == []
    assert report["export"]["ops"]["GELU"] == 2  # the delegate's own GELU kernel runs it
    assert report["equivalence"]["artifact"]["ok"]


def test_the_analyzer_sees_the_same_ops_as_the_table(gelu_keras, tmp_path):
    """The file the job exports, as TF's analyzer lists it: the ops the table judged."""
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model
    from rewriter.targets.artifact import read_artifact

    res = export_tflite(load_model(gelu_keras), tmp_path / "m.tflite", quantize="float16")
    report = _analyzer_report(open(res.path, "rb").read())
    listed = [line.split()[1].split("(")[0] for line in report.splitlines()
              if line.strip().startswith("Op#")]
    assert listed == read_artifact(res.path).op_names() and "GELU" in listed
