"""--qat: TFMOT's quantization-aware training for tf_keras models; Keras 3 models (TFMOT cannot
take them) fall back to --recover, and the report says so."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import SAMPLES

pytest.importorskip("tensorflow_model_optimization")


def _tf_keras_net(path):
    """A tf_keras conv / BN / ReLU net (layers TFMOT's default 8-bit scheme supports)."""
    import tf_keras

    tf_keras.utils.set_random_seed(0)
    layers = tf_keras.layers
    inp = tf_keras.Input((16, 16, 3), batch_size=1, name="image")
    x = inp
    for i in range(2):
        x = layers.Conv2D(8, 3, padding="same", name=f"conv{i}")(x)
        x = layers.BatchNormalization(name=f"bn{i}")(x)
        x = layers.ReLU(name=f"relu{i}")(x)
    x = layers.GlobalAveragePooling2D()(x)
    model = tf_keras.Model(inp, layers.Dense(4, name="logits")(x))
    rng = np.random.default_rng(0)
    for i in range(2):
        model.get_layer(f"bn{i}").set_weights([rng.uniform(0.5, 2, 8), rng.normal(0, 0.5, 8),
                                               rng.normal(0, 0.3, 8), rng.uniform(0.3, 2, 8)])
    model.save(path)
    return path


def test_qat_fine_tunes_a_tf_keras_model_with_tfmot(cli, tmp_path):
    model = _tf_keras_net(tmp_path / "net.h5")
    code, out, _ = cli(model, "--target", "edgetpu", "--qat", "--epochs", "3", "-o",
                       tmp_path / "out", "--json")
    report = json.loads(out)
    rec = report["recover"]
    assert rec["method"] == "tfmot", rec["notes"]
    assert rec["variables"] == 5  # conv0, bn0, conv1, bn1, logits: weights copied back
    assert len(rec["loss"]) == 3 and all(np.isfinite(rec["loss"]))
    assert "TFMOT quantization-aware training" in rec["notes"][0]
    assert "--qat (3 epochs on 32 samples)" in report["summary"]
    assert code in (0, 1) and rec["after"]["logits"]["cosine"] > 0.9


def test_qat_on_a_keras_3_model_says_why_and_uses_recover(cli, tmp_path):
    code, out, _ = cli(SAMPLES["keras"], "--target", "edgetpu", "--qat", "--epochs", "1",
                       "-o", tmp_path / "out", "--json")
    rec = json.loads(out)["recover"]
    assert rec["method"] == "distillation"
    assert rec["notes"][0].startswith("--qat: TFMOT's quantization-aware training works with "
                                      "tf_keras (Keras 2) models only")
    assert "fine-tuned by --recover's distillation instead" in rec["notes"][0]
