"""layernorm_l2norm: LayerNorm over the last axis through an L2 normalization, exactly, and
full int8 with every op in the Edge TPU table."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.layernorm_l2norm import LayerNormL2Norm
from rewriter.testing import assert_close_rel, model_from_keras, op_types

RULE = LayerNormL2Norm()
RNG = np.random.default_rng(5)
GONE = {"Neg", "SquaredDifference", "StopGradient"}


def _ln(shape, axis=-1, eps=1e-6, center=True, scale=True):
    inp = keras.Input(shape[1:], batch_size=shape[0])
    ln = keras.layers.LayerNormalization(axis=axis, epsilon=eps, center=center, scale=scale)
    km = keras.Model(inp, ln(inp))
    weights = []
    if scale:
        weights.append(RNG.uniform(0.5, 2.0, ln.weights[0].shape).astype("f4"))
    if center:
        weights.append(RNG.normal(0, 1, ln.weights[-1].shape).astype("f4"))
    ln.set_weights(weights)
    return model_from_keras(km), weights


def _reference(x, eps, gamma=None, beta=None):
    x = x.astype(np.float64)
    d = x - x.mean(-1, keepdims=True)
    y = d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)
    y = y * gamma if gamma is not None else y
    return y + beta if beta is not None else y


@pytest.mark.parametrize("shape", [(1, 4, 4, 16), (1, 5, 8), (3, 24), (1, 4, 4, 6), (1, 5, 10)])
def test_layernorm_becomes_a_padded_l2_normalize(shape):
    model, _ = _ln(shape)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert [a.rule for a in result.applied] == ["layernorm_l2norm"]
    assert not GONE & set(ops)
    assert ops["Pad"] == 1 and ops["Slice"] == 1 and ops["Rsqrt"] == 1
    assert "ConcatV2" not in ops
    # the mean over C: a MEAN where the Edge TPU reduces depth (C % 4 == 0), else a 1x1 conv
    assert (ops["Mean"], ops["Conv2D"]) == ((1, 0) if shape[-1] % 4 == 0 else (0, 1))
    x = (RNG.normal(0, 2, shape) + 3.0).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def _dense_rows(rows, c):
    """Rows with scales from 1e-5 to 1e5 (variance far below and far above eps), a mean of a
    few scales, and 16 constant rows (d = 0)."""
    scale = 10.0 ** np.linspace(-5, 5, rows)[:, None]
    x = RNG.normal(0, 1, (rows, c)) * scale + RNG.uniform(-3, 3, (rows, 1)) * scale
    x[::rows // 16] = RNG.uniform(-50, 50, (16, 1))[: len(x[::rows // 16])]
    return x.astype("f4")


@pytest.mark.parametrize("eps", [1e-6, 1e-3])
def test_exact_over_dense_samples_of_tiny_and_large_variance(eps):
    rows, c = 512, 32
    model, (gamma, beta) = _ln((rows, c), eps=eps)
    result = apply_rules(model, [RULE])
    x = _dense_rows(rows, c)
    got = result.model.run({"x0": x})["output_0"]
    want = _reference(x, eps, gamma, beta)
    assert np.all(np.isfinite(got))
    assert_close_rel(got, want)
    assert_close_rel(got, model.run({"x0": x})["output_0"])
    # per row too, without gamma/beta: each row of LN(x) has rms sqrt(var / (var + eps))
    plain, _ = _ln((rows, c), eps=eps, center=False, scale=False)
    got = apply_rules(plain, [RULE]).model.run({"x0": x})["output_0"]
    want = _reference(x, eps)
    rel = np.abs(got - want).max(-1) / np.maximum(np.abs(want).max(-1), 1e-30)
    assert rel[np.abs(want).max(-1) > 0].max() < 1e-5


def test_a_row_with_zero_deviation_gives_beta():
    model, (gamma, beta) = _ln((1, 2, 3, 8))
    result = apply_rules(model, [RULE])
    x = np.full((1, 2, 3, 8), 7.0, "f4")
    x[0, 1, 2] = np.arange(8)
    got = result.model.run({"x0": x})["output_0"]
    np.testing.assert_array_equal(got[0, 0], np.broadcast_to(beta, (3, 8)))
    assert_close_rel(got, model.run({"x0": x})["output_0"])


def test_without_gamma_and_beta():
    model, _ = _ln((1, 3, 12), center=False, scale=False)
    result = apply_rules(model, [RULE])
    assert op_types(result.model)["AddV2"] == 1  # the eps channel only: no beta
    x = RNG.normal(0, 2, (1, 3, 12)).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_refuses_a_layernorm_over_several_axes():
    model, _ = _ln((2, 6, 3), axis=[1, 2])
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "normalizes over axes [1, 2], not the last axis only" in result.rejected[0].reason


def test_refuses_rank_5():
    model, _ = _ln((1, 2, 2, 2, 4))
    result = apply_rules(model, [RULE])
    assert result.applied == []
    assert "rank 5 is not 2..4" in result.rejected[0].reason


def test_tf_keras_layernorm_is_matched_too():
    tf_keras = pytest.importorskip("tf_keras")
    inp = tf_keras.Input((4, 4, 8), batch_size=1)
    ln = tf_keras.layers.LayerNormalization(epsilon=1e-6)
    km = tf_keras.Model(inp, ln(inp))
    ln.set_weights([RNG.uniform(0.5, 2.0, 8).astype("f4"), RNG.normal(0, 1, 8).astype("f4")])
    model = model_from_keras(km)
    result = apply_rules(model, [RULE])
    assert len(result.applied) == 1 and "SquaredDifference" not in op_types(result.model)
    x = (RNG.uniform(-3, 3, (1, 4, 4, 8)) + 2.0).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


@pytest.mark.parametrize("shape,mean_ops", [
    ((1, 4, 4, 16), ["MEAN"]), ((1, 4, 4, 6), ["CONV_2D"]), ((1, 5, 10), ["RESHAPE", "CONV_2D",
                                                                        "RESHAPE"])])
def test_full_int8_has_one_l2_normalization_within_every_edge_tpu_limit(tmp_path, shape,
                                                                         mean_ops):
    """The whole output in the exported file passes the Edge TPU table with every documented
    limitation: no constant concatenated (PAD then ADD), MEAN only over a depth % 4 == 0,
    no reshape that moves data (no warning either)."""
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_artifact

    model, _ = _ln(shape)
    rewritten = apply_rules(model, [RULE]).model
    path = tmp_path / "ln.tflite"
    export_tflite(rewritten, path, quantize="int8", int8_io=True,
                  calibration_ranges={"x0": (-4.0, 4.0)})
    ops = [(o.op, o.dtype) for o in read_artifact(str(path)).ops]
    assert [o for o, _ in ops] == [*mean_ops, "SUB", "PAD", "ADD", "L2_NORMALIZATION", "SLICE",
                                   "MUL", "ADD"]
    assert {dt for _, dt in ops} == {"int8"}
    check = load_target("edgetpu").check_artifact(str(path))
    assert check.ok and check.cut is None
    assert check.warnings_summary() == []


def test_a_convnext_block_runs_whole_on_the_edge_tpu_in_int8(tmp_path):
    """The job end to end: planned only because the converter fuses the L2 normalize, no
    unsupported op left and no documented limitation broken, no cut, int8 output close to
    float."""
    import json

    from keras import layers

    from rewriter.cli import main

    inp = keras.Input((16, 16, 3), batch_size=1)
    x = layers.Conv2D(16, 4, strides=4)(inp)
    y = layers.DepthwiseConv2D(7, padding="same")(x)
    y = layers.LayerNormalization(epsilon=1e-6)(y)
    y = layers.Dense(16)(layers.Dense(64, activation="relu")(y))
    out = layers.Dense(4)(layers.GlobalAveragePooling2D()(layers.Add()([x, y])))
    path = tmp_path / "block.keras"
    keras.Model(inp, out).save(path)
    code = main([str(path), "--target", "edgetpu", "-o", str(tmp_path / "out"), "-q"])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert code == 0 and report["ok"] is True
    # the pointwise Dense layers: FULLY_CONNECTED outputs must be one-dimensional on the Edge TPU
    rules = {r["rule"] for r in report["rules_applied"]}
    assert rules == {"layernorm_l2norm", "matmul_as_conv1x1"}
    assert "L2_NORMALIZATION" in report["artifact_ops"] and "RSQRT" not in report["artifact_ops"]
    assert report["unsupported_rewritten_graph"] == [] and report["unsupported_after"] == []
    assert report["placement_after"]["cut"] is None
    [cmp] = report["equivalence"]["artifact"]["outputs"].values()
    assert cmp["cosine"] > 0.99
