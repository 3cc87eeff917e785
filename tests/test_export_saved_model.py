"""The rewritten float model is written as a SavedModel that computes what the Model computes."""

from __future__ import annotations

import numpy as np

from rewriter.export.saved_model import export_saved_model
from rewriter.frontends import load_model


def test_keras3_swish_custom_gradient_wrapper_does_not_block_the_export(tmp_path):
    """Keras 3 swish freezes with a tf.custom_gradient IdentityN (as in EfficientNet), which
    tf.saved_model.save cannot trace gradients for; the inference SavedModel must still save."""
    import keras

    inp = keras.Input((6,), name="x")
    out = keras.layers.Dense(4, activation="swish", name="dense")(inp)
    keras.Model(inp, out).save(tmp_path / "swish.keras")
    model = load_model(tmp_path / "swish.keras")
    assert "IdentityN" in {n.op for n in model.graph_def.node}
    assert any("custom_gradient" in note for note in model.source.notes)
    export_saved_model(model, tmp_path / "sm")
    reloaded = load_model(tmp_path / "sm")
    x = {"x": np.linspace(-3, 3, 6, dtype=np.float32)[None]}
    want = next(iter(model.run(x).values()))
    got = next(iter(reloaded.run(x).values()))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_keras3_swish_model_converts_to_int8_on_the_signature_route(tmp_path):
    """With the custom-gradient markers left in, int8 calibration failed on the primary route
    ("model has 0 Signatures") and the file came out without a signature."""
    import keras

    from rewriter.export.tflite import export_tflite

    inp = keras.Input((6,), name="x")
    out = keras.layers.Dense(4, activation="swish", name="dense")(inp)
    keras.Model(inp, out).save(tmp_path / "swish.keras")
    model = load_model(tmp_path / "swish.keras")
    result = export_tflite(model, tmp_path / "m.tflite", quantize="int8")
    assert result.route == "from_saved_model"
