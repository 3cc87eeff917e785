"""``keras.ops.cumsum`` between two Dense layers (stock Keras 3) through ``rewrite`` (issue 28):
exit 0 on ethos-u55-128 (Vela 0 CPU operators), edgetpu (no cut) and tflm (run in TFLite Micro),
int8 cosine >= 0.99 on representative data, and on onnx (``-m slow`` for all but Ethos-U55)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.whole_job import assert_runs_whole, rules_applied


@pytest.fixture(scope="module")
def running_sum(tmp_path_factory) -> Path:
    import keras

    root = tmp_path_factory.mktemp("cumsum")
    init = keras.initializers.GlorotUniform
    x = keras.Input((16, 8))
    h = keras.ops.cumsum(keras.layers.Dense(8, kernel_initializer=init(seed=0))(x), axis=1)
    keras.Model(x, keras.layers.Dense(4, kernel_initializer=init(seed=1))(h)).save(
        root / "cumsum.keras")
    rng = np.random.default_rng(0)
    np.save(root / "calibration.npy", rng.standard_normal((32, 16, 8)).astype("f4"))
    np.save(root / "data.npy", rng.standard_normal((8, 16, 8)).astype("f4"))
    return root / "cumsum.keras"


def _runs_whole(model: Path, target: str, out: Path) -> None:
    report = assert_runs_whole(model, target, out)
    if target != "onnx":
        assert "cumsum_as_conv1x1" in rules_applied(report)
        assert "CUMSUM" not in report["artifact_ops"]


def test_cumsum_runs_whole_on_ethos_u55(running_sum, tmp_path):
    _runs_whole(running_sum, "ethos-u55-128", tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["edgetpu", "tflm", "onnx"])
def test_cumsum_runs_whole(running_sum, tmp_path, target):
    _runs_whole(running_sum, target, tmp_path / "out")
