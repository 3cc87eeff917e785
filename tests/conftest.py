"""Shared fixtures: the sample models in models/, quiet TensorFlow, in-process CLI runs."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

SAMPLES = {
    "keras": MODELS / "convbn_elu.keras",
    "h5_tfkeras": MODELS / "convbn_elu_tfkeras.h5",
    "saved_model": MODELS / "convbn_elu_savedmodel",
    "graphdef": MODELS / "convbn_elu.pb",
    "checkpoint": MODELS / "convbn_elu_tf1" / "model.ckpt",
}


@pytest.fixture(scope="session")
def samples() -> dict[str, Path]:
    return dict(SAMPLES)


@pytest.fixture(scope="session")
def calibration() -> np.ndarray:
    return np.load(MODELS / "calibration.npy")


@pytest.fixture(scope="session")
def gelu_keras(tmp_path_factory) -> Path:
    """A small Keras 3 model with two GELUs (Erfc form in the frozen graph), saved as .keras."""
    import keras

    inp = keras.Input((8, 8, 3), batch_size=1, name="image")
    x = keras.layers.Conv2D(4, 3, padding="same")(inp)
    x = keras.layers.Activation("gelu")(x)
    out = keras.layers.Dense(6, activation=keras.activations.gelu, name="logits")(x)
    path = tmp_path_factory.mktemp("gelu") / "gelu.keras"
    keras.Model(inp, out).save(path)
    return path


@pytest.fixture
def cli(capsys):
    """Run ``rewrite ARGS`` in-process; returns (exit code, stdout, stderr)."""
    from rewriter.cli import main

    def _run(*args: str) -> tuple[int, str, str]:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return _run


@pytest.fixture(scope="session")
def edgetpu_run(tmp_path_factory) -> tuple[int, Path]:
    """``rewrite models/convbn_elu.keras --target edgetpu`` with the shipped calibration data,
    run once for the session: (exit code, output directory)."""
    from rewriter.cli import main

    out = tmp_path_factory.mktemp("edgetpu")
    code = main([str(SAMPLES["keras"]), "--target", "edgetpu", "-o", str(out), "-q",
                 "--calibration", str(MODELS / "calibration.npy")])
    return code, out
