"""A bilinear 4x downscale through ``rewrite`` (issue 28), built from stock Keras 3 layers:
Conv2D 8 -> ``Resizing(4, 4, interpolation="bilinear")`` on 16x16 -> Conv2D 1x1 4.

Ethos-U55 runs RESIZE_BILINEAR only as an upscale (Vela puts the downscale on the CPU; ``check``
now predicts it from the table's scale constraint); ``resize_bilinear_as_avg_pool`` makes it a
SLICE and two AVERAGE_POOL_2Ds (exact). Measured at landing: ethos-u55-128 exit 0, Vela 4 NPU / 0
CPU, int8 cosine 0.99987; edgetpu 0.99987 and tflm (TFLite Micro) 0.99988 run RESIZE_BILINEAR
itself; onnx exit 0. Every job here is ``slow`` (~1 min each on the shared machine).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.whole_job import assert_runs_whole, rules_applied


@pytest.fixture(scope="module")
def resize_model(tmp_path_factory) -> Path:
    import keras

    root = tmp_path_factory.mktemp("resize")
    init = keras.initializers.GlorotUniform
    x = keras.Input((16, 16, 3))
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu", kernel_initializer=init(0))(x)
    h = keras.layers.Resizing(4, 4, interpolation="bilinear")(h)
    keras.Model(x, keras.layers.Conv2D(4, 1, kernel_initializer=init(1))(h)).save(
        root / "resize.keras")
    rng = np.random.default_rng(0)
    np.save(root / "calibration.npy", rng.standard_normal((32, 16, 16, 3)).astype("f4"))
    np.save(root / "data.npy", rng.standard_normal((8, 16, 16, 3)).astype("f4"))
    return root / "resize.keras"


@pytest.mark.slow
@pytest.mark.parametrize("target", ["ethos-u55-128", "edgetpu", "tflm", "onnx"])
def test_bilinear_downscale_runs_whole(resize_model, tmp_path, target):
    report = assert_runs_whole(resize_model, target, tmp_path / "out")
    if target == "ethos-u55-128":
        assert "resize_bilinear_as_avg_pool" in rules_applied(report)
        assert "RESIZE_BILINEAR" not in report["artifact_ops"]
        assert [u["op"] for u in report["unsupported_before"]] == ["ResizeBilinear"]
