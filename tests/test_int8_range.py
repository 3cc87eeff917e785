"""Range-starved int8 tensors: the share of a tensor's values below one quantisation step is
measured on the verification samples, a tensor above 50% is flagged with the remedies its
target allows, and a well-conditioned model gets no flag.

The model: x [1, 64] -> ``ident`` (a Dense with the identity kernel: its output is x) -> ``mid``
(Dense 16, ReLU) -> ``logits`` (Dense 4). The starved data puts one value 100 in every sample and
63 values in [0.01, 0.3]: one int8 step of [0, 100] is 100/255 = 0.39, so exactly 63 of the 64
nonzero values of ``ident`` are below one step (98.4375%). The well-conditioned data is uniform
in [-1, 1] (step 2/255: about 0.8% of the values below it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rewriter.export.tflite import export_tflite
from rewriter.frontends import load_model
from rewriter.targets import load_target
from rewriter.tune.int8_range import diagnose, int16_blockers, lines
from rewriter.verify.int8_layers import STARVED, int8_layer_errors

N = 64


def _net():
    import keras

    keras.utils.set_random_seed(5)
    layers = keras.layers
    inp = keras.Input((N,), batch_size=1, name="x")
    ident = layers.Dense(N, use_bias=False, name="ident")
    x = ident(inp)
    x = layers.Dense(16, activation="relu", name="mid")(x)
    model = keras.Model(inp, layers.Dense(4, name="logits")(x))
    ident.set_weights([np.eye(N, dtype=np.float32)])
    return model


def _starved(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.uniform(0.01, 0.3, (n, 1, N)).astype(np.float32)
    x[np.arange(n), 0, rng.integers(0, N, n)] = 100.0
    return x


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = tmp_path_factory.mktemp("range")
    rng = np.random.default_rng(0)
    _net().save(d / "net.keras")
    model = load_model(d / "net.keras")
    out = {"dir": d, "model": model}
    for name, data in (("starved", _starved(rng, 24)),
                       ("plain", rng.uniform(-1, 1, (24, 1, N)).astype(np.float32))):
        np.save(d / f"{name}.npy", data[:, 0])
        samples = [{"x": s} for s in data]
        path = export_tflite(model, d / f"{name}.tflite", quantize="int8",
                             calibration=samples[:16], int8_io=True).path
        out[name] = int8_layer_errors(path, model, samples[16:])
    return out


def _row(layers, needle):
    return next(x for x in layers.ops if needle in x.node)


def test_the_share_below_one_step_is_measured(built):
    layers = built["starved"]
    ident = _row(layers, "ident")
    assert ident.op == "FULLY_CONNECTED"
    assert ident.step == pytest.approx(100 / 255, rel=1e-3)
    assert ident.below_step == pytest.approx(63 / 64)
    assert ident.ref_max_abs == pytest.approx(100.0)
    assert 0.01 < ident.median_abs < 0.3
    assert ident.zeros == 0.0
    # int16 step of the same range, 100/32767 = 0.003: none of the values in [0.01, 0.3] is below
    assert ident.below_int16_step == 0.0
    assert ident.starved and [x.node for x in layers.starved()][-1] == ident.node
    assert not _row(layers, "mid").starved and not _row(layers, "logits").starved


def test_a_well_conditioned_model_is_not_flagged(built):
    layers = built["plain"]
    ident = _row(layers, "ident")
    assert ident.below_step is not None and ident.below_step < 0.03  # |x| < 2/255 of U(-1, 1)
    assert layers.starved() == []
    section = diagnose(layers, load_target("ethos-u55-128"), built["model"])
    assert section["tensors"] == [] and section["diagnosis"] == []
    assert section["threshold"] == STARVED == 0.5
    assert lines(section) == []


@pytest.mark.parametrize("target,int16", [("edgetpu", False), ("ethos-u55-128", True),
                                          ("tflm", True)])
def test_the_diagnosis_names_the_tensor_and_the_remedies_of_the_target(built, target, int16):
    layers = built["starved"]
    section = diagnose(layers, load_target(target), built["model"])
    ident = _row(layers, "ident").node
    assert ident in [t["node"] for t in section["tensors"]]
    (d,) = section["diagnosis"]
    assert ident in d["tensors"] and d["below_step"] == pytest.approx(63 / 64)
    assert "98.4%" in d["text"]
    by = {r["remedy"]: r for r in d["remedies"]}
    # the cut: the first tensor after it that int8 holds, a node of the original model
    assert by["cut"]["applies"] and "mid" in by["cut"]["node"]
    assert f"--inputs {by['cut']['node']}" in by["cut"]["text"]
    assert by["cut"]["host_operators"] == 2  # ident's and mid's FULLY_CONNECTED
    assert by["compress"]["applies"]
    assert by["16x8"]["applies"] is int16
    if not int16:
        assert "8-bit tensors only" in by["16x8"]["text"]
    else:
        assert "--quantize 16x8" in by["16x8"]["text"]
    (line,) = lines(section)
    assert ident in line and "--inputs" in line and ("16x8" in line) is int16
    json.dumps(section, allow_nan=False)


def test_int16_blockers_come_from_the_op_tables():
    assert int16_blockers(load_target("tflm"), ["FULLY_CONNECTED", "LOG", "SQRT"]) == ["LOG",
                                                                                      "SQRT"]
    assert int16_blockers(load_target("ethos-u55-128"), ["CONV_2D", "MUL"]) == []
    assert int16_blockers(load_target("edgetpu"), ["CONV_2D"]) == ["CONV_2D"]


def test_the_job_reports_range_starved_tensors_in_json_md_and_html(built, tmp_path):
    from rewriter.cli import main

    d = built["dir"]
    out = tmp_path / "out"
    code = main(["run", str(d / "net.keras"), "--target", "tflm", "-q", "--no-vela",
                 "--calibration", str(d / "starved.npy"), "-o", str(out)])
    assert code in (0, 1)
    report = json.loads((out / "report.json").read_text())
    section = report["int8_layers"]["range"]
    flagged = {t["node"]: t for t in section["tensors"]}
    ident = next(n for n in flagged if "ident" in n)
    assert flagged[ident]["below_step"] == pytest.approx(63 / 64)
    (diag,) = section["diagnosis"]
    cut = next(r for r in diag["remedies"] if r["remedy"] == "cut")
    md = (out / "report.md").read_text()
    assert "### Range-starved int8 tensors" in md and "**Diagnosis:** " in md
    assert f"`--inputs {cut['node']}`" in md and "98.4%" in md
    page = (out / "report.html").read_text()
    assert "range-diagnosis" in page and "Range-starved int8 tensors" in page
    # the remedy works: the model started at the suggested tensor (data: that tensor's values)
    np.save(tmp_path / "cut.npy", np.concatenate(
        [built["model"].run({"x": s[None]}, fetches=[f"{cut['node']}:0"])[f"{cut['node']}:0"]
         for s in np.load(d / "starved.npy")]))
    code = main(["run", str(d / "net.keras"), "--target", "tflm", "-q", "--inputs", cut["node"],
                 "--calibration", str(tmp_path / "cut.npy"), "-o", str(tmp_path / "cut")])
    cut_report = json.loads((tmp_path / "cut" / "report.json").read_text())
    assert code == 0 and cut_report["int8_layers"]["range"]["tensors"] == []


def test_fixed_range_outputs_are_measured_not_flagged():
    """A confident softmax has most probabilities below its fixed 1/256 step: not a range the
    user chose, so not flagged; a calibrated tensor with the same share is."""
    from rewriter.verify.int8_layers import OpError

    def row(op):
        return OpError(3, op, "t", "n", [1, 10], "int8", 1 / 256, 1.0, 0.0, 0.0, 1.0, 1.0,
                       below_step=0.9)

    assert not row("SOFTMAX").starved and not row("LOGISTIC").starved
    assert row("FULLY_CONNECTED").starved
