"""GroupNormalization in a conv block (stock Keras 3) through ``rewrite`` (issue 28): exit 0 on
ethos-u55-128 (Vela 0 CPU operators) and tflm (run in TFLite Micro), int8 cosine >= 0.99 on
representative data, and on onnx; on edgetpu (no RSQRT) through ``groupnorm_l2norm``: no cut,
every op in the Edge TPU table, int8 cosine >= 0.99."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.whole_job import assert_runs_whole, rules_applied


@pytest.fixture(scope="module")
def block(tmp_path_factory) -> Path:
    import keras

    root = tmp_path_factory.mktemp("groupnorm")
    init = keras.initializers.GlorotUniform
    x = keras.Input((16, 16, 8))
    h = keras.layers.Conv2D(16, 3, padding="same", kernel_initializer=init(seed=0))(x)
    h = keras.layers.Activation("relu")(keras.layers.GroupNormalization(groups=4)(h))
    keras.Model(x, keras.layers.Conv2D(8, 1, kernel_initializer=init(seed=1))(h)).save(
        root / "block.keras")
    rng = np.random.default_rng(0)
    np.save(root / "calibration.npy", rng.standard_normal((32, 16, 16, 8)).astype("f4"))
    np.save(root / "data.npy", rng.standard_normal((8, 16, 16, 8)).astype("f4"))
    return root / "block.keras"


def _runs_whole(model: Path, target: str, out: Path) -> None:
    report = assert_runs_whole(model, target, out)
    if target != "onnx":
        want = "groupnorm_l2norm" if target == "edgetpu" else "groupnorm_decompose"
        assert rules_applied(report) == [want]


def test_groupnorm_block_runs_whole_on_ethos_u55(block, tmp_path):
    _runs_whole(block, "ethos-u55-128", tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["edgetpu", "tflm", "onnx"])
def test_groupnorm_block_runs_whole(block, tmp_path, target):
    _runs_whole(block, target, tmp_path / "out")
