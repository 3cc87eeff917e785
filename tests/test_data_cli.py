"""The main job and `rewrite verify` on the user's own data: images mapped as the model expects,
the data named in report.json, verify agreeing with the job, NaN never a match."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import MODELS, SAMPLES

CALIB = MODELS / "calibration.npy"


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    """The shipped calibration images (values in [0, 1]) as 8-bit PNGs."""
    import tensorflow as tf

    d = tmp_path_factory.mktemp("pngs")
    for k, x in enumerate(np.load(CALIB)):
        img = np.round(x.reshape(32, 32, 3) * 255).astype(np.uint8)
        (d / f"{k:02d}.png").write_bytes(tf.io.encode_png(img).numpy())
    return d


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory):
    """The Quick start's job: the sample network for the Edge TPU on the shipped data."""
    from rewriter.cli import main

    out = tmp_path_factory.mktemp("quick")
    code = main([str(SAMPLES["keras"]), "--target", "edgetpu", "-q", "--calibration",
                 str(CALIB), "-o", str(out)])
    assert code == 0
    return out


def test_image_folder_without_a_mapping_exits_2_with_the_hint(cli, image_dir, tmp_path):
    code, _, err = cli(SAMPLES["keras"], "--target", "tflite", "-q", "--calibration", image_dir,
                       "-o", tmp_path / "out")
    assert code == 2
    assert err.startswith("error: ") and "--pixel-range" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out" / "report.json").exists()


def test_image_folder_with_pixel_range_passes_on_correctly_scaled_data(cli, image_dir,
                                                                       tmp_path):
    out = tmp_path / "out"
    code, stdout, _ = cli(SAMPLES["keras"], "--target", "edgetpu", "--calibration", image_dir,
                          "--pixel-range", "0,1", "-o", out)
    assert code == 0, stdout
    data = json.loads((out / "report.json").read_text())["data"]
    for role in ("calibration", "verification"):
        assert data[role]["source"] == str(image_dir) and data[role]["format"] == "images"
        image = data[role]["inputs"]["image"]
        assert image["mapping"].startswith("pixels 0..255 mapped linearly to [0, 1]")
        assert 0.0 <= image["min"] and image["max"] <= 1.0
    assert data["calibration"]["samples"] == 12  # 16 images, the last 4 held back to verify
    assert data["verification"]["samples"] == 4 and data["verification"]["disjoint"]
    # measured again on the .npy the PNGs came from, i.e. correctly scaled real data
    code, stdout, _ = cli("verify", SAMPLES["keras"], out / "model.tflite", "--inputs", CALIB,
                          "--samples", "16", "--json")
    result = json.loads(stdout)
    assert code == 0 and result["outputs"]["logits"]["cosine"] >= 0.99


def test_a_model_with_a_rescaling_layer_takes_images_with_no_flag(cli, image_dir, tmp_path):
    import keras

    inp = keras.Input((32, 32, 3), batch_size=1, name="image")
    x = keras.layers.Rescaling(1 / 255.0)(inp)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    out = keras.layers.Dense(4, name="logits")(keras.layers.GlobalAveragePooling2D()(x))
    keras.Model(inp, out).save(tmp_path / "m.keras")
    code, stdout, _ = cli(tmp_path / "m.keras", "--target", "edgetpu", "-q", "--calibration",
                          image_dir, "-o", tmp_path / "out", "--json")
    report = json.loads(stdout)
    assert code == 0, report["summary"]
    image = report["data"]["calibration"]["inputs"]["image"]
    assert "raw pixels 0..255, scaled by the model's" in image["mapping"]
    assert image["max"] > 200  # fed raw
    assert "synthetic" not in report["summary"].lower()


def test_quick_start_then_verify_agrees_with_the_job(cli, quick_start):
    code, stdout, _ = cli("verify", SAMPLES["keras"], quick_start / "model.tflite")
    assert code == 0, stdout
    assert "the job's verification data" in stdout and "tolerances: the job's" in stdout
    assert f"4 sample(s), {CALIB.resolve()}" in stdout  # held back from the 16 given


def test_verify_of_the_rewritten_saved_model_uses_the_rules_bounds(cli, quick_start):
    code, stdout, _ = cli("verify", SAMPLES["keras"], quick_start / "saved_model", "--json")
    result = json.loads(stdout)
    assert code == 0
    job = json.loads((quick_start / "report.json").read_text())
    want = job["equivalence"]["rewritten_tf"]["outputs"]["logits"]
    got = result["outputs"]["logits"]
    assert (got["atol"], got["rtol"], got["min_cosine"]) == (
        want["atol"], want["rtol"], want["min_cosine"])
    assert got["atol"] > 1e-4  # the ELU rule's bound, not the 1e-5 default


def test_verify_with_own_data_states_the_defaults(cli, quick_start):
    code, stdout, _ = cli("verify", SAMPLES["keras"], quick_start / "saved_model", "--samples",
                          "2")
    assert "data options given, so its data and tolerances are not used" in stdout
    assert "tolerances: defaults" in stdout


def test_verify_compares_on_every_sample_of_its_inputs(cli, quick_start, tmp_path):
    """Data given is used: 12 samples compared (up to 32), not the 4 of synthetic data."""

    np.save(tmp_path / "x.npy", np.random.default_rng(3).uniform(-1, 1, (12, 32, 32, 3))
            .astype(np.float32))
    code, stdout, _ = cli("verify", SAMPLES["keras"], quick_start / "saved_model", "--inputs",
                          tmp_path / "x.npy", "--json")
    assert json.loads(stdout)["data"]["samples"] == 12, stdout[-1500:]


def test_job_without_data_says_its_verdict_rests_on_synthetic_data(cli, tmp_path):
    code, stdout, _ = cli(SAMPLES["keras"], "--target", "tflite", "--quantize", "none",
                          "-o", tmp_path / "out", "--json")
    report = json.loads(stdout)
    assert code == 0
    assert "SYNTHETIC data only" in report["summary"]
    verification = report["data"]["verification"]
    assert verification["source"] == "synthetic" and verification["recipe"]["seed"] == 0
    assert "uniform in [-1, 1] (default" in verification["inputs"]["image"]["mapping"]


def test_all_nan_data_is_a_mismatch_that_names_the_nan(cli, tmp_path, quick_start):
    np.save(tmp_path / "nan.npy", np.full((2, 32, 32, 3), np.nan, np.float32))
    code, stdout, _ = cli("verify", SAMPLES["keras"], quick_start / "model.tflite", "--inputs",
                          tmp_path / "nan.npy")
    assert code == 1
    assert "logits: 20 non-finite element(s) (20 NaN in the reference" in stdout
    assert "MISMATCH" in stdout


def test_nan_calibration_data_is_refused_before_converting(cli, tmp_path):
    x = np.load(CALIB)[:4].copy()
    x[1, 0, 0, 0] = np.inf
    np.save(tmp_path / "bad.npy", x)
    code, _, err = cli(SAMPLES["keras"], "--target", "edgetpu", "-q", "--calibration",
                       tmp_path / "bad.npy", "-o", tmp_path / "out")
    assert code == 2 and "1 NaN/Inf value(s)" in err
