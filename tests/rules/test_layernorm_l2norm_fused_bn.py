"""layernorm_l2norm_fused_bn: tf_keras' fused LayerNorm (a training-mode FusedBatchNorm on
[1, R, D, 1]) through an L2 normalization, exactly; in int8 within every Edge TPU limit."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.layernorm_l2norm_fused_bn import LayerNormL2NormFromFusedBatchNorm
from rewriter.testing import assert_close_rel, model_from_keras, op_types

tf_keras = pytest.importorskip("tf_keras")
RULE = LayerNormL2NormFromFusedBatchNorm()
RNG = np.random.default_rng(6)


def _ln(shape, eps=1e-3):
    inp = tf_keras.Input(shape[1:], batch_size=1)
    ln = tf_keras.layers.LayerNormalization(epsilon=eps)
    km = tf_keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2.0, shape[-1]).astype("f4"),
                    RNG.normal(0, 1, shape[-1]).astype("f4")])
    return model_from_keras(km)


@pytest.mark.parametrize("shape", [(1, 16, 32), (1, 4, 4, 6), (1, 10)])
def test_fused_layernorm_becomes_an_l2_normalize(shape):
    model = _ln(shape)
    assert "FusedBatchNormV3" in op_types(model)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert len(result.applied) == 1 and "FusedBatchNormV3" not in ops and ops["Pad"] == 1
    x = (RNG.normal(0, 2, shape) + 1.0).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_inference_batch_norm_is_not_matched():
    inp = tf_keras.Input((4, 4, 8), batch_size=1)
    model = model_from_keras(tf_keras.Model(inp, tf_keras.layers.BatchNormalization()(inp)))
    assert apply_rules(model, [RULE]).applied == []


def test_int8_file_within_every_edge_tpu_limit(tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target

    before = _ln((1, 16, 32))
    target = load_target("edgetpu")
    assert not target.check_graph(before).ok  # RSQRT, SQUARED_DIFFERENCE predicted
    model = apply_rules(before, [RULE]).model
    path = tmp_path / "ln.tflite"
    export_tflite(model, path, quantize="int8", calibration_ranges={"x0": (-4.0, 4.0)})
    check = target.check_artifact(str(path))
    assert check.ok and check.cut is None and check.warnings_summary() == []
