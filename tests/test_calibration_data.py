"""Which of the user's samples calibrate and which verify (``rewriter.job.stages.job_data``): every
sample given calibrates (up to the cap), and the verdict rests on samples calibration never saw.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.defaults import CALIBRATION_CAP


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A conv net no rule touches (so the job converts the model as it is), and 48 samples
    whose samples 36..39 reach 3x the range of the others."""
    import keras

    tmp = tmp_path_factory.mktemp("caldata")
    inp = keras.Input((16, 16, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(8, 3, activation="relu")(inp)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    out = keras.layers.Dense(4, name="logits")(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out)
    model.save(tmp / "m.keras")
    data = np.random.default_rng(0).uniform(-1, 1, (48, 16, 16, 3)).astype(np.float32)
    data[36:40] *= 3
    np.save(tmp / "cal.npy", data)
    np.save(tmp / "other.npy", data[:10] * 0.5)
    return model, tmp, data


def _stack(samples):
    return np.concatenate([s["image"] for s in samples])


def test_one_set_is_split_into_disjoint_calibration_and_verification(small):
    from rewriter.frontends import load_model
    from rewriter.job.stages import job_data

    _, tmp, data = small
    model = load_model(tmp / "m.keras")
    job = job_data(model, "int8", calibration=str(tmp / "cal.npy"))
    np.testing.assert_array_equal(_stack(job.calibration_samples), data[:40])  # all 40, not 32
    np.testing.assert_array_equal(_stack(job.samples), data[40:])
    assert job.describe() == (
        "verdict on 8 sample(s) held back from --calibration; int8 calibrated on 40 sample(s) "
        f"of {tmp / 'cal.npy'} (every one not held back; cap {CALIBRATION_CAP})")
    ver = job.to_json()["verification"]
    assert ver["disjoint"] and ver["recipe"]["skip"] == 40
    assert job.to_json()["calibration"]["cap"] == CALIBRATION_CAP
    # --data alone, int8: the same split (no synthetic calibration beside real data)
    alone = job_data(model, "int8", inputs=str(tmp / "cal.npy"))
    np.testing.assert_array_equal(_stack(alone.calibration_samples), data[:40])
    assert alone.basis == "8 sample(s) held back from --data" and not alone.warnings
    # the same file given twice is one set
    twice = job_data(model, "int8", calibration=str(tmp / "cal.npy"), inputs=str(tmp / "cal.npy"))
    np.testing.assert_array_equal(_stack(twice.samples), data[40:])
    # --calibration-samples lowers the cap
    ten = job_data(model, "int8", calibration=str(tmp / "cal.npy"), calibration_samples=10)
    np.testing.assert_array_equal(_stack(ten.calibration_samples), data[:10])
    assert "(the cap, --calibration-samples 10)" in ten.calibrated


def test_two_sets_calibrate_on_all_of_one_and_verify_on_the_other(small):
    from rewriter.frontends import load_model
    from rewriter.job.stages import job_data

    _, tmp, data = small
    model = load_model(tmp / "m.keras")
    job = job_data(model, "int8", calibration=str(tmp / "cal.npy"), inputs=str(tmp / "other.npy"))
    np.testing.assert_array_equal(_stack(job.calibration_samples), data)
    # every sample of --data is verified on (it holds 10), not 8 of them
    np.testing.assert_array_equal(_stack(job.samples), data[:10] * 0.5)
    assert job.basis == "10 sample(s) of --data (not calibrated on)"
    # up to DATA_SAMPLES, or --samples; the summary says when more were given
    four = job_data(model, "int8", calibration=str(tmp / "cal.npy"),
                    inputs=str(tmp / "other.npy"), samples=4)
    np.testing.assert_array_equal(_stack(four.samples), data[:4] * 0.5)
    assert four.basis == ("4 sample(s) of --data (not calibrated on; its first 4: --samples N "
                          "for more)")
    # nothing calibrates in float: the calibration file is verified on as given
    flt = job_data(model, "none", calibration=str(tmp / "cal.npy"))
    np.testing.assert_array_equal(_stack(flt.samples), data[:8])
    assert flt.calibrated == ""


def test_one_sample_both_calibrates_and_verifies_and_says_so(small, tmp_path):
    from rewriter.frontends import load_model
    from rewriter.job.stages import job_data

    _, tmp, data = small
    np.save(tmp_path / "one.npy", data[:1])
    job = job_data(load_model(tmp / "m.keras"), "int8", calibration=str(tmp_path / "one.npy"))
    assert not job.disjoint and len(job.samples) == len(job.calibration_samples) == 1
    assert "too few to hold one back" in job.basis
    assert "the verdict says nothing about other inputs" in job.warnings[0]


def test_the_jobs_int8_file_is_the_plain_converters_on_the_same_samples(small, cli):
    """The job calibrates on all 40 samples it does not verify on, exactly as the TFLite
    converter given those 40 does (identical outputs); calibrating on the first 32 (the old
    default) differs, since samples 36..39 widen the ranges."""
    import tensorflow as tf

    from rewriter.verify.runners import LiteRTRunner

    model, tmp, data = small
    out = tmp / "out"
    code, stdout, _ = cli(tmp / "m.keras", "--target", "tflite", "--quantize", "int8",
                          "--calibration", tmp / "cal.npy", "-o", out, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["data"]["calibration"]["samples"] == 40
    assert "verdict on 8 sample(s) held back from --calibration; int8 calibrated on 40" in (
        report["summary"])

    def plain(samples: np.ndarray):
        conv = tf.lite.TFLiteConverter.from_keras_model(model)
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: ([s[None]] for s in samples)
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        path = tmp / f"plain{len(samples)}.tflite"
        path.write_bytes(conv.convert())
        return path

    def outputs(path):
        runner = LiteRTRunner(path)
        return np.stack([next(iter(runner.run({"image": s[None]}).values()))
                         for s in data[40:]])

    job = outputs(out / "model.tflite")
    np.testing.assert_array_equal(job, outputs(plain(data[:40])))
    assert np.abs(job - outputs(plain(data[:32]))).max() > 1e-3
