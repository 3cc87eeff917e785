"""``--quantize 16x8``: int16 activations with int8 weights, on the targets that run it."""

from __future__ import annotations

import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def convnet(tmp_path_factory):
    """A small conv net and 24 samples of data (the job holds 6 back to verify on)."""
    import keras

    tmp = tmp_path_factory.mktemp("x16")
    inp = keras.Input((16, 16, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(8, 3, activation="relu")(inp)
    x = keras.layers.DepthwiseConv2D(3, activation="relu6")(x)
    x = keras.layers.AveragePooling2D(2)(x)
    out = keras.layers.Dense(4, name="logits")(keras.layers.Flatten()(x))
    keras.Model(inp, out).save(tmp / "m.keras")
    data = np.random.default_rng(0).uniform(-1, 1, (24, 16, 16, 3)).astype(np.float32)
    np.save(tmp / "data.npy", data)
    return tmp


def _tensor_types(path) -> set[str]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    return {np.dtype(t["dtype"]).name for t in interp.get_tensor_details()}


def _run(cli, convnet, target):
    out = convnet / target
    code, stdout, _ = cli(convnet / "m.keras", "--target", target, "--quantize", "16x8",
                          "--calibration", convnet / "data.npy", "-o", out, "--json")
    return code, json.loads(stdout), out


def test_16x8_job_runs_in_tflite_micro_with_int16_activations(cli, convnet):
    code, report, out = _run(cli, convnet, "tflm")
    assert code == 0, report["summary"]
    assert report["quantize"] == "16x8"
    art = report["equivalence"]["artifact"]
    assert art["runtime"] == "TFLite Micro"
    assert art["outputs"]["logits"]["cosine"] >= 0.99  # measured 0.9963 on 6 held-back samples
    types = _tensor_types(out / "model.tflite")
    assert "int16" in types and "int8" in types and "float32" not in types  # int16 I/O too
    assert "16x8 calibrated on 18 sample(s)" in report["summary"]
    assert report["int8_layers"]["summary"].startswith("16x8 loses most in layer")


@pytest.mark.slow
def test_16x8_job_compiles_with_vela_all_on_the_npu(cli, convnet):
    code, report, _ = _run(cli, convnet, "ethos-u55-128")
    assert code == 0, report["summary"]
    assert report["vela"]["cpu_ops"] == 0 and report["vela"]["npu_ops"] >= 4
    assert report["equivalence"]["artifact"]["outputs"]["logits"]["cosine"] >= 0.99
