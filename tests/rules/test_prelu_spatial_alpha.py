"""prelu_spatial_alpha: a Keras PReLU whose alpha is [H, W, C] (default ``shared_axes`` on 4-D
input) made fit the Edge TPU's 1-D alpha limit, exactly; untouched when alpha is already 1-D."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.prelu_spatial_alpha import PreluSpatialAlpha
from rewriter.targets import load_target
from rewriter.testing import dense_line, model_from_keras, op_types
from tests.rules._activation_checks import max_abs, outputs, tflite_ops

RULE = PreluSpatialAlpha()
SHAPE = (1, 4, 4, 4)


def _prelu(alpha: np.ndarray, shared_axes=None, legacy: bool = False):
    k = pytest.importorskip("tf_keras") if legacy else keras
    inp = k.Input(SHAPE[1:], batch_size=1)
    layer = k.layers.PReLU(shared_axes=shared_axes)
    out = layer(inp)
    layer.set_weights([alpha.astype("f4")])
    return model_from_keras(k.Model(inp, out))


def _spatial_alpha(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.6, 1.4, SHAPE[1:])


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_spatial_alpha_becomes_relu_sub_mul_add(legacy):
    result = apply_rules(_prelu(_spatial_alpha(), legacy=legacy), [RULE])
    assert result.rule_counts() == {"prelu_spatial_alpha": 1}
    ops = op_types(result.model)
    assert ops["Sub"] == 1 and ops["Relu"] == 1 and "Neg" not in ops


def test_spatially_constant_alpha_collapses_to_one_value_per_channel():
    alpha = np.broadcast_to(np.array([0.1, -0.3, 0.7, 2.0]), SHAPE[1:])
    result = apply_rules(_prelu(alpha), [RULE])
    assert result.rule_counts() == {"prelu_spatial_alpha": 1}
    c = [n for n in result.model.graph_def.node if n.name.endswith("/neg_alpha")]
    assert [d.size for d in c[0].attr["value"].tensor.tensor_shape.dim] == [1, 1, 4]


def test_does_not_fire_when_alpha_is_already_1d_and_says_why():
    result = apply_rules(_prelu(np.array([[[0.1, 0.2, 0.3, 0.4]]]), shared_axes=[1, 2]), [RULE])
    assert result.applied == []
    assert "already 1-D" in result.rejected[0].reason


def test_planner_leaves_it_where_the_target_runs_the_prelu():
    from rewriter.rewrite.planner import plan

    model = _prelu(_spatial_alpha())
    for target in ("tflm", "ethos-u55-128"):
        assert "prelu_spatial_alpha" not in plan(model, load_target(target), "int8").rules
    assert "prelu_spatial_alpha" in plan(model, load_target("edgetpu"), "int8").rules


@pytest.mark.parametrize("constant", [False, True], ids=["spatial", "per_channel"])
def test_bitwise_equal_in_float_on_a_dense_grid(constant):
    alpha = np.broadcast_to([0.1, -0.3, 0.7, 2.0], SHAPE[1:]) if constant else _spatial_alpha()
    model = _prelu(alpha)
    result = apply_rules(model, [RULE])
    x = dense_line(-50.0, 50.0, 256 * 64, shape=(256, *SHAPE[1:]))  # 256 points per position
    x = np.concatenate([x, np.zeros((1, *SHAPE[1:]), "f4")])
    worst = max(max_abs(*outputs(model, result.model, x[i:i + 1])) for i in range(len(x)))
    assert worst == 0.0


def test_int8_on_litert_matches_the_float_original_and_passes_the_edge_tpu(tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.verify.runners import run_tflite

    model = _prelu(_spatial_alpha())
    result = apply_rules(model, [RULE])
    rng = np.random.default_rng(1)
    cal = [{"x0": rng.uniform(-4, 4, SHAPE).astype("f4")} for _ in range(16)]
    path = tmp_path / "m.tflite"
    res = export_tflite(result.model, path, quantize="int8", calibration=cal)
    assert set(res.ops) - {"QUANTIZE", "DEQUANTIZE"} == {"RELU", "SUB", "MUL", "ADD"}
    assert set(res.float_ops) == set()
    check = load_target("edgetpu").check_artifact(str(path))
    assert check.ok and check.cut is None
    x = rng.uniform(-4, 4, (1, *SHAPE[1:])).astype("f4")
    want = model.run({"x0": x})["output_0"]
    got = run_tflite(str(path), {"x0": x})
    got = np.asarray(next(iter(got.values())) if isinstance(got, dict) else got, "f8")
    # one int8 step of the output (range about 2 * 4 * 1.4 over 255 steps) plus one of alpha*x
    assert max_abs(got, want) < 0.1


def test_per_channel_form_converts_to_one_prelu(tmp_path):
    alpha = np.broadcast_to([0.1, -0.3, 0.7, 2.0], SHAPE[1:])
    result = apply_rules(_prelu(alpha), [RULE])
    ops8, float_ops = tflite_ops(result.model, tmp_path, "int8")
    assert ops8 == {"PRELU"} and float_ops == set()


def _net(path: Path) -> None:
    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), batch_size=1)
    x = keras.layers.Conv2D(16, 3, padding="same")(inp)
    prelu = keras.layers.PReLU()
    x = keras.layers.Conv2D(8, 3, padding="same")(prelu(x))
    model = keras.Model(inp, x)
    alpha = np.random.default_rng(3).uniform(0.05, 0.4, (16, 16, 16)).astype("f4")
    prelu.set_weights([alpha])
    model.save(path)


def test_rewrite_conv_prelu_conv_maps_to_the_edge_tpu_with_no_cut(tmp_path):
    src = tmp_path / "net.keras"
    _net(src)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "rewriter", str(src), "--target", "edgetpu",
                           "-o", str(out)], capture_output=True, text=True, timeout=600)
    report = json.loads((out / "report.json").read_text())
    assert report["plan"]["rules"] == ["prelu_spatial_alpha"], proc.stderr[-2000:]
    assert report["placement_after"]["cut"] is None
    assert report["placement_after"]["ops_on_accelerator"] == \
        report["placement_after"]["ops_total"]
    art = report["equivalence"]["artifact"]["outputs"]
    assert min(o["cosine"] for o in art.values()) >= 0.99
    assert proc.returncode == 0, proc.stdout[-2000:]
