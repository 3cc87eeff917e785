"""Per-layer int8 error of an exported .tflite: every intermediate tensor against the float graph,
and the layer where int8 loses most, found on a layer made badly quantisable on purpose."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.export.tflite import export_tflite
from rewriter.frontends import load_model
from rewriter.verify.int8_layers import int8_layer_errors, layer_of


def _net(outlier: float):
    """conv1 -> ReLU -> conv2 -> ReLU -> conv3 -> pool -> dense, conv3 ignoring conv2's channel 0
    (zero weights). With ``outlier`` > 1 that channel is ``outlier`` times larger than the rest
    (its kernel and bias scaled): the float function is the same, but conv2's per-tensor int8
    step now spans the outlier, and the other 15 channels fall into a few int8 levels."""
    import keras

    keras.utils.set_random_seed(3)
    layers = keras.layers
    inp = keras.Input((16, 16, 3), batch_size=1, name="image")
    x = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv1")(inp)
    x = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv2")(x)
    x = layers.Conv2D(16, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.GlobalAveragePooling2D(name="pool")(x)
    model = keras.Model(inp, layers.Dense(4, name="logits")(x))
    k2, b2 = model.get_layer("conv2").get_weights()
    k2[..., 0] *= outlier
    b2[0] = b2[0] * outlier + 0.1 * outlier
    model.get_layer("conv2").set_weights([k2, b2])
    k3, b3 = model.get_layer("conv3").get_weights()
    k3[:, :, 0, :] = 0.0
    model.get_layer("conv3").set_weights([k3, b3])
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("layers")
    rng = np.random.default_rng(0)
    data = [{"image": rng.uniform(0, 1, (1, 16, 16, 3)).astype(np.float32)} for _ in range(24)]
    out = {}
    for name, outlier in (("plain", 1.0), ("outlier", 300.0)):
        _net(outlier).save(d / f"{name}.keras")
        model = load_model(d / f"{name}.keras")
        path = export_tflite(model, d / f"{name}.tflite", quantize="int8",
                             calibration=data[:16], int8_io=True).path
        out[name] = (path, model, data[16:])
    return out


def test_the_outlier_layer_is_named_the_worst(exported):
    path, model, data = exported["outlier"]
    result = int8_layer_errors(path, model, data)
    worst = result.worst()[0]
    assert worst.layer.startswith("conv2"), [(w.layer, w.added) for w in result.worst()]
    assert worst.channel_spread > 50  # the reason: one channel 300x the others
    assert worst.error_out > 5 * worst.error_in
    assert worst.layer in result.describe() and "channel ranges differ" in result.describe()


def test_without_the_outlier_conv2_loses_far_less(exported):
    bad = {x.layer: x for x in int8_layer_errors(*exported["outlier"]).layers}
    good = {x.layer: x for x in int8_layer_errors(*exported["plain"]).layers}
    conv2 = next(k for k in bad if k.startswith("conv2"))
    assert good[conv2].added < bad[conv2].added / 5
    assert good[conv2].channel_spread < 10


def test_every_operator_output_matches_a_float_tensor(exported):
    path, model, data = exported["plain"]
    result = int8_layer_errors(path, model, data[:2])
    assert result.unmatched == []
    assert [x.op for x in result.ops] == ["INPUT", "CONV_2D", "CONV_2D", "CONV_2D", "MEAN",
                                          "FULLY_CONNECTED"]
    assert [x.layer for x in result.layers][:3] == [layer_of(x.node, None).split("/")[-1]
                                                    for x in result.ops[1:4]]
    final = result.ops[-1]
    assert final.node.endswith("logits_1/BiasAdd") or "logits" in final.node
    # the last op's error is the artifact's output error, measured independently
    from rewriter.verify.runners import LiteRTRunner

    name = model.outputs[0].name
    runner = LiteRTRunner(path)
    ref = np.concatenate([model.run(s)[name] for s in data[:2]])
    got = np.concatenate([runner.run(s)[runner.outputs[0]] for s in data[:2]])
    rmse = float(np.sqrt(np.mean((got - ref) ** 2)))
    assert final.rmse == pytest.approx(rmse, rel=1e-4)


def test_json_is_strict_and_names_the_worst_layers(exported):
    data = int8_layer_errors(*exported["outlier"]).to_json()
    text = json.dumps(data, allow_nan=False)
    back = json.loads(text)
    assert back["worst"][0].startswith("conv2")
    assert {"layer", "ops", "error_in", "error_out", "added", "channel_spread"} <= set(
        back["layers"][0])
    assert back["ops"][0]["op"] == "INPUT"


def test_layer_of_takes_the_scope_under_the_model():
    assert layer_of("PartitionedCall/m_1/elu1_1/Elu/elementwise_ramps/ramps", "m_1") == "elu1_1"
    assert layer_of("block/conv/BiasAdd", None) == "block/conv"
    assert layer_of("Relu", None) == "Relu"


def test_the_job_reports_int8_error_per_layer_in_json_md_and_html(tmp_path):
    """On the sample network for the Edge TPU every layer is reported, the ELU layers with the
    ops their rewrite became, and the worst layer is named in all three forms."""
    from rewriter.cli import main
    from tests.conftest import MODELS, SAMPLES

    out = tmp_path / "out"
    code = main([str(SAMPLES["keras"]), "--target", "edgetpu", "-q", "--calibration",
                 str(MODELS / "calibration.npy"), "-o", str(out)])
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    section = report["int8_layers"]
    assert section["unmatched"] == []
    by_layer = {x["layer"]: x for x in section["layers"]}
    worst = by_layer[section["worst"][0]]
    assert worst["added"] == max(x["added"] for x in section["layers"])
    elus = [x for x in section["layers"] if x["layer"].startswith("elu")]
    assert len(elus) == 3 and all("CONV_2D" in x["ops"] and "RELU" in x["ops"] for x in elus)
    md = (out / "report.md").read_text()
    assert "## int8 error per layer" in md and f"| {section['worst'][0]} |" in md
    page = (out / "report.html").read_text()
    assert 'data-plot="int8-layers"' in page and f'data-layers="{len(section["layers"])}"' in page


def test_an_unrolled_layer_has_one_row_per_occurrence_with_its_own_numbers():
    """An unrolled LSTM repeats a layer's name once per step: the table shows each step's own
    figures (it showed the last step's for every row, keyed by name) and says which step."""
    from rewriter.report.int8 import rows, svg
    from rewriter.verify.int8_layers import Int8Layers, LayerError

    def layer(name, first, added):
        return LayerError(name, first, first + 1, ["FULLY_CONNECTED", "TANH"], f"{name}/n",
                          0.01, added * 2, added, 0.99, 1.0, 0.01)

    steps = [layer("lstm", 0, 0.05), layer("lstm", 2, 0.30), layer("lstm", 4, 0.10),
             layer("dense", 6, 0.02)]
    section = json.loads(json.dumps(Int8Layers([], steps, [], 4, 0.1).to_json()))
    assert section["worst"] == ["lstm", "lstm", "lstm", "dense"]
    assert section["worst_index"] == [1, 2, 0, 3]
    table = rows(section)
    assert [r[3] for r in table] == [0.30, 0.10, 0.05, 0.02]  # error added, each its own
    assert table[0][0] == "lstm [2 of 3, ops #2-#3]" and table[3][0] == "dense"
    assert svg(section).count('class="bar worst"') == 3
    # a report written before worst_index: the first occurrence of each name, once
    del section["worst_index"]
    assert [r[3] for r in rows(section)] == [0.05, 0.02]
