"""Activation rules on real architectures (slow): MobileNetV3Small's hard swishes (Keras 3 and
tf_keras) and ConvNeXtTiny's GELUs are all rewritten, outputs stay within 1e-5 relative, and the
converted files hold no HARD_SWISH / GELU (the int8 MobileNetV3Small passes the Edge TPU table)."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.testing import max_rel_error, model_from_keras

pytestmark = pytest.mark.slow


def _mobilenet(legacy: bool):
    if legacy:
        import tf_keras

        return tf_keras.applications.MobileNetV3Small(input_shape=(96, 96, 3), weights=None)
    import keras

    return keras.applications.MobileNetV3Small(input_shape=(96, 96, 3), weights=None)


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_mobilenetv3small_every_hard_swish_unfused_and_edgetpu_int8_ok(tmp_path, legacy):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target

    model = model_from_keras(_mobilenet(legacy))
    result = apply_rules(model, ["hard_swish_unfused"])
    assert result.rule_counts() == {"hard_swish_unfused": 19}
    x = np.random.default_rng(0).uniform(0, 255, (1, 96, 96, 3)).astype(np.float32)
    want = model.run({"x0": x})["output_0"]
    assert max_rel_error(result.model.run({"x0": x})["output_0"], want) < 1e-5
    cal = [{"x0": np.random.default_rng(i).uniform(0, 255, x.shape).astype(np.float32)}
           for i in range(4)]
    path = tmp_path / "m.tflite"
    res = export_tflite(result.model, path, quantize="int8", calibration=cal)
    assert "HARD_SWISH" not in res.ops and res.float_ops == []
    check = load_target("edgetpu").check_artifact(str(path))
    assert check.ok and check.cut is None


def test_convnexttiny_every_gelu_rewritten_and_no_gelu_in_tflite(tmp_path):
    import keras

    from rewriter.export.tflite import export_tflite

    model = model_from_keras(keras.applications.ConvNeXtTiny(input_shape=(32, 32, 3),
                                                             weights=None))
    result = apply_rules(model, ["gelu_erf_poly"])
    assert result.rule_counts() == {"gelu_erf_poly": 18}
    x = np.random.default_rng(0).uniform(0, 255, (1, 32, 32, 3)).astype(np.float32)
    want = model.run({"x0": x})["output_0"]
    assert max_rel_error(result.model.run({"x0": x})["output_0"], want) < 1e-5
    res = export_tflite(result.model, tmp_path / "m.tflite")
    assert "GELU" not in res.ops and res.ops.count("EXP") == 18
