"""`rewrite verify A B`: any two formats, exit 0 on match, 1 on mismatch with the needed tolerance,
2 on bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.export.onnx import export_onnx
from rewriter.export.tflite import export_tflite
from rewriter.frontends import load_model


def _keras_model(seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((8, 8, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(4, 3, padding="same")(inp)
    x = keras.layers.ELU()(keras.layers.BatchNormalization()(x))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inp, keras.layers.Dense(3, name="logits")(x))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("verify")
    _keras_model(0).save(d / "model.keras")
    _keras_model(1).save(d / "other.keras")
    model = load_model(d / "model.keras")
    calib = [{"image": np.random.default_rng(k).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)}
             for k in range(16)]
    return {
        "keras": d / "model.keras",
        "other": d / "other.keras",
        "float": export_tflite(model, d / "model.tflite").path,
        "int8": export_tflite(model, d / "int8.tflite", quantize="int8", calibration=calib).path,
        "onnx": export_onnx(model, d / "model.onnx").path,
        "dir": d,
    }


def test_keras_and_its_float_tflite_match(cli, files):
    code, out, _ = cli("verify", files["keras"], files["float"])
    assert code == 0, out
    assert out.strip().endswith("match")
    assert "outputs matched by name" in out


def test_keras_and_its_onnx_match(cli, files):
    code, out, _ = cli("verify", files["keras"], files["onnx"], "--samples", "2")
    assert code == 0, out


def test_int8_tflite_fails_float_tolerance_and_says_what_would_pass(cli, files):
    code, out, _ = cli("verify", files["keras"], files["int8"], "--rtol", "1e-5")
    assert code == 1
    assert "MISMATCH" in out
    assert "would need --atol logits:" in out


def test_int8_tflite_passes_on_cosine(cli, files):
    code, out, _ = cli("verify", files["keras"], files["int8"], "--min-cosine", "0.99")
    assert code == 0, out


def test_needed_tolerance_printed_on_mismatch_makes_it_pass(cli, files):
    code, out, _ = cli("verify", files["keras"], files["int8"], "--rtol", "0")
    needed = out.split("would need --atol logits:")[1].split()[0]
    code, out, _ = cli("verify", files["keras"], files["int8"], "--rtol", "0",
                       "--atol", f"logits:{needed}")
    assert code == 0, out


def test_different_weights_mismatch_with_exit_1(cli, files):
    code, _, _ = cli("verify", files["keras"], files["other"])
    assert code == 1


def test_json_output_has_per_output_metrics(cli, files):
    code, out, _ = cli("verify", files["keras"], files["float"], "--json", "--samples", "3")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert data["samples"] == 3 and data["data"]["source"] == "synthetic"
    m = data["outputs"]["logits"]
    assert m["max_abs_error"] < 1e-5 and m["cosine"] > 0.99999
    assert {"max_rel_error", "rmse", "l2_rel_error", "needed_atol", "needed_rtol"} <= set(m)


def test_inputs_from_npy_and_npz(cli, files, tmp_path):
    x = np.random.default_rng(3).uniform(0, 1, (5, 8, 8, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", image=x)
    for f in ("x.npy", "x.npz"):
        code, out, _ = cli("verify", files["keras"], files["float"], "--inputs",
                           tmp_path / f, "--samples", "10", "--json")
        assert code == 0
        assert json.loads(out)["samples"] == 5


def test_inputs_from_an_image_directory(cli, files, tmp_path):
    import tensorflow as tf

    img = np.random.default_rng(4).integers(0, 255, (20, 16, 3), dtype=np.uint8)
    (tmp_path / "a.png").write_bytes(tf.io.encode_png(img).numpy())
    (tmp_path / "b.jpg").write_bytes(tf.io.encode_jpeg(img).numpy())
    code, _, err = cli("verify", files["keras"], files["float"], "--inputs", tmp_path)
    assert code == 2 and "--pixel-range" in err  # the model has no Rescaling layer
    code, out, _ = cli("verify", files["keras"], files["float"], "--inputs", tmp_path,
                       "--pixel-range", "0,1", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["samples"] == 2
    assert result["data"]["inputs"]["image"]["mapping"].startswith("pixels 0..255 mapped")


@pytest.mark.parametrize("args, message", [
    (["--inputs", "missing.npy"], "no such file"),
    (["--atol", "abc"], "--atol"),
    (["--atol", "nosuch:1e-3"], "unknown output"),
    (["--samples", "0"], "--samples"),
])
def test_bad_input_exits_2_with_one_line(cli, files, args, message):
    code, _, err = cli("verify", files["keras"], files["float"], *args)
    assert code == 2
    *progress, last = err.splitlines()  # lines of the steps that finished, then the error
    assert last.startswith("error:") and message in last
    assert not any(line.startswith("error") for line in progress) and "Traceback" not in err


def test_npy_of_the_wrong_shape_is_refused(cli, files, tmp_path):
    np.save(tmp_path / "bad.npy", np.zeros((2, 5), np.float32))
    code, _, err = cli("verify", files["keras"], files["float"], "--inputs", tmp_path / "bad.npy")
    assert code == 2 and "does not fit input 'image'" in err


def test_missing_model_exits_2(cli, files):
    code, _, err = cli("verify", files["keras"], files["dir"] / "nope.tflite")
    assert code == 2 and "no such file" in err


def test_tflm_flag_runs_the_tflite_in_tflite_micro(cli, files):
    from rewriter.verify.tflm import tflm_available

    if not tflm_available():
        pytest.skip("tflite-micro not installed")
    code, out, _ = cli("verify", files["keras"], files["float"], "--tflm", "--samples", "2")
    assert code == 0, out
    assert "candidate  tflm:" in out


def test_int8_model_is_compared_by_cosine_like_the_main_job(cli, files):
    code, out, _ = cli("verify", files["keras"], files["int8"], "--samples", "2")
    assert code == 0 and "is quantized: compared by cosine >= 0.99" in out
    # element-wise float tolerances, when asked for, measure the quantization error: mismatch
    code, out, _ = cli("verify", files["keras"], files["int8"], "--samples", "2",
                       "--rtol", "1e-5")
    assert code == 1 and "would need" in out
    code, out, _ = cli("verify", files["keras"], files["float"], "--samples", "2")
    assert code == 0 and "is quantized" not in out


def test_html_page_has_a_histogram_per_output(cli, files, tmp_path):
    page = tmp_path / "sub" / "cmp.html"
    code, out, _ = cli("verify", files["keras"], files["int8"], "--samples", "3",
                       "--min-cosine", "0.99", "--html", page)
    assert code == 0, out
    assert f"html       {page}" in out
    text = page.read_text()
    assert 'data-plot="histogram" data-stage="candidate" data-output="logits"' in text
    assert "rewrite verify: model.keras vs int8.tflite" in text and "<script" not in text
    assert 'data-total="9"' in text  # 3 samples x 3 logits


def test_html_needs_an_html_file_name(cli, files, tmp_path):
    code, _, err = cli("verify", files["keras"], files["float"], "--html", tmp_path)
    assert code == 2 and err.startswith("error: --html")


def test_sample_model_and_its_tflite_match_on_the_calibration_data(cli, samples, tmp_path):
    model = load_model(samples["keras"])
    tflite = export_tflite(model, tmp_path / "model.tflite").path
    calib = samples["keras"].parent / "calibration.npy"
    code, out, _ = cli("verify", samples["keras"], tflite, "--inputs", calib,
                       "--html", tmp_path / "v.html")
    assert code == 0, out
    # every sample of --inputs (up to 32), not 4 of them
    assert f"{len(np.load(calib))} sample(s), " in out and (tmp_path / "v.html").is_file()


@pytest.fixture(scope="module")
def rewritten(samples, tmp_path_factory):
    """The tf_keras sample (fused BN) and a SavedModel of it with BN folded and ELU rewritten."""
    from rewriter.export.saved_model import export_saved_model
    from rewriter.rewrite.passes import apply_rules

    d = tmp_path_factory.mktemp("rewritten")
    result = apply_rules(load_model(samples["h5_tfkeras"]),
                         ["batchnorm_fold_into_conv", "elu_exact"])
    assert {a.rule for a in result.applied} == {"batchnorm_fold_into_conv", "elu_exact"}
    return {"a": samples["h5_tfkeras"], "b": export_saved_model(result.model, d / "sm").path,
            "roots": [a.root for a in result.applied]}


def test_first_divergence_and_each_rule_on_a_correct_rewrite(cli, rewritten, tmp_path):
    code, out, _ = cli("verify", rewritten["a"], rewritten["b"], "--samples", "2",
                       "--first-divergence", "--check-each-rule", "--html", tmp_path / "v.html")
    assert code == 0, out
    assert "inside     no divergence:" in out
    assert "per rule   1. batchnorm_fold_into_conv at " in out
    assert "per rule   2. elu_exact at " in out
    page = (tmp_path / "v.html").read_text()
    assert 'data-plot="node-errors"' in page and "Outputs after each rule" in page


def test_check_each_rule_names_a_broken_bn_fold_and_its_node(cli, rewritten, monkeypatch):
    from tests.test_per_rule import break_bn_epsilon

    break_bn_epsilon(monkeypatch)
    code, out, _ = cli("verify", rewritten["a"], rewritten["b"], "--samples", "2",
                       "--check-each-rule", "--json")
    data = json.loads(out)
    assert code == 1 and data["ok"] is True  # B itself matches; re-applying the rule breaks
    bad = [c for c in data["per_rule"] if not c["ok"] and c["node"]]
    assert bad[0]["rule"] == "batchnorm_fold_into_conv"
    assert bad[0]["node"] == rewritten["roots"][0]


def test_inside_checks_need_two_tf_models(cli, files):
    code, _, err = cli("verify", files["keras"], files["float"], "--first-divergence")
    assert code == 2 and "--first-divergence needs two TF models" in err
