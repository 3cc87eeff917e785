"""Pre-quantisation rewrites: cross-layer equalisation is exact in float and evens out the
activation ranges it targets; bias correction cancels the int8 file's mean shift per layer."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.export.tflite import export_tflite
from rewriter.frontends import load_model
from rewriter.ir.graph import GraphIndex
from rewriter.tune.prequant import correct_bias, equalize, find_pairs


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    """conv/BN/ReLU6 -> depthwise/BN/ReLU -> 1x1 conv/BN (linear) -> conv, with BN statistics
    that give each activation channel a different range (the MobileNetV2 block shape)."""
    import keras

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    layers = keras.layers
    inp = keras.Input((12, 12, 3), batch_size=1, name="image")
    x = layers.ReLU(6.0)(layers.BatchNormalization(name="bn0")(
        layers.Conv2D(8, 3, padding="same", use_bias=False, name="c0")(inp)))
    x = layers.ZeroPadding2D(1)(x)
    x = layers.ReLU()(layers.BatchNormalization(name="bn1")(
        layers.DepthwiseConv2D(3, use_bias=False, name="d1")(x)))
    x = layers.BatchNormalization(name="bn2")(layers.Conv2D(6, 1, use_bias=False, name="p2")(x))
    x = layers.Conv2D(4, 3, padding="same", name="c3")(x)
    model = keras.Model(inp, layers.Dense(3, name="logits")(layers.GlobalAveragePooling2D()(x)))
    for name, n in (("bn0", 8), ("bn1", 8), ("bn2", 6)):
        gamma = rng.uniform(0.3, 3.0, n) * np.where(np.arange(n) % 3 == 0, 6.0, 1.0)
        model.get_layer(name).set_weights([gamma, rng.normal(0.5, 0.5, n),
                                           rng.normal(0, 0.2, n), rng.uniform(0.5, 2, n)])
    path = tmp_path_factory.mktemp("prequant") / "net.keras"
    model.save(path)
    m = load_model(path)
    data = [{"image": rng.uniform(0, 1, (1, 12, 12, 3)).astype(np.float32)} for _ in range(24)]
    return m, data


def test_equalization_is_exact_in_float(net):
    model, data = net
    eq = equalize(model, data[:8])
    assert eq.folded == 3 and len(eq.pairs) == 3
    assert {p["activation"] for p in eq.pairs} == {"Relu", "linear"}  # ReLU6 became Relu + min
    ops = [n.op for n in eq.model.graph_def.node]
    assert "Relu6" not in ops and ops.count("Minimum") == 1
    for s in data[8:]:
        a, b = model.run(s)["logits"], eq.model.run(s)["logits"]
        np.testing.assert_allclose(b, a, rtol=0, atol=2e-6 * np.abs(a).max())


def test_equalization_evens_out_the_ranges_into_a_depthwise_conv(net):
    model, data = net
    eq = equalize(model, data[:8])
    into_depthwise = [p for p in eq.pairs if "depthwise" in p["conv2"]]
    assert into_depthwise and into_depthwise[0]["range_spread_before"] > 3
    assert into_depthwise[0]["range_spread_after"] == pytest.approx(1.0, abs=1e-6)
    assert all(1 / 16 <= p["scale_min"] <= p["scale_max"] <= 16 for p in eq.pairs)


def test_pairs_need_single_consumers_and_constant_kernels(net):
    model, _ = net
    from rewriter.rewrite.passes import apply_rules

    g = GraphIndex(apply_rules(model, ["batchnorm_fold_into_conv"]).model.graph_def)
    pairs = find_pairs(g)
    assert len(pairs) == 3
    last = next(n for n in g if n.op == "Conv2D" and "/c3" in n.name)  # feeds the pooling
    assert all(p.conv1.name != last.name for p in pairs)


def test_bias_correction_cancels_the_mean_int8_error_of_each_layer(net, tmp_path):
    from rewriter.verify.int8_layers import int8_layer_errors

    model, data = net
    calib, held = data[:16], data[16:]

    def export(m):
        return export_tflite(m, tmp_path / "round.tflite", quantize="int8",
                             calibration=calib).path

    def mean_shift(m):
        path = export_tflite(m, tmp_path / "check.tflite", quantize="int8",
                             calibration=calib).path
        layers = int8_layer_errors(path, m, held).layers
        shares = [x.bias_share for x in layers if np.isfinite(x.bias_share)]
        return float(np.mean(shares))  # the part of each layer's own error that is a shift

    corrected = correct_bias(model, calib[:8], export, iterations=2)
    assert corrected.layers and corrected.to_json()["max_shift"] > 0
    ops = [n for n in corrected.model.graph_def.node
           if "_rewriter_rule" in n.attr and n.attr["_rewriter_rule"].s == b"bias_correction"]
    assert len(ops) == len(corrected.layers)
    assert mean_shift(corrected.model) < mean_shift(model)
