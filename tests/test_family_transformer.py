"""A small transformer encoder (MultiHeadAttention + LayerNorm + GELU MLP), Keras 3 and tf_keras,
through ``rewrite`` on edgetpu, ethos-u55-128, tflm and onnx, with representative data
(embedded token sequences, :func:`tests.families.token_embeddings`):

* edgetpu: no cut and nothing outside the documented table (attention, softmax, Dense over
  tokens and LayerNorm rewritten);
* ethos-u55-128: Vela places every operator on the NPU (0 CPU operators);
* tflm: TFLite Micro's own interpreter runs the file (a subprocess) and matches;
* onnx: ``onnx.checker`` passes and ONNX Runtime matches within 1e-4 relative;
* int8 targets: cosine >= 0.98 against the float original.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rewriter.cli import main
from tests.families import token_embeddings, transformer_encoder

TOKENS, DIM, MLP = 16, 32, 64
TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")
MIN_INT8_COSINE = 0.98


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("encoders")
    paths = {"keras3": root / "encoder.keras", "tf_keras": root / "encoder.h5"}
    transformer_encoder(TOKENS, DIM, heads=2, mlp=MLP).save(paths["keras3"])
    # tf_keras with its default LayerNorm epsilon (1e-3): its fused FusedBatchNorm path
    transformer_encoder(TOKENS, DIM, heads=2, mlp=MLP, legacy=True, epsilon=1e-3).save(
        paths["tf_keras"])
    np.save(root / "calibration.npy", token_embeddings(32, TOKENS, DIM, seed=1))
    np.save(root / "data.npy", token_embeddings(8, TOKENS, DIM, seed=2))
    return paths


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("flavour", ["keras3", "tf_keras"])
def test_encoder_runs_whole_on_the_target(encoders, tmp_path, flavour, target):
    model_path = encoders[flavour]
    root = model_path.parent
    out = tmp_path / "out"
    code = main([str(model_path), "--target", target, "--calibration",
                 str(root / "calibration.npy"), "--data", str(root / "data.npy"),
                 "-o", str(out), "-q"])
    report = json.loads((out / "report.json").read_text())
    assert code == 0 and report["ok"] is True
    assert report["unsupported_after"] == []
    [cmp] = report["equivalence"]["artifact"]["outputs"].values()
    if target == "onnx":
        import onnx

        onnx.checker.check_model(onnx.load(str(out / "model.onnx")))
        assert cmp["max_rel_error"] <= 1e-4
        return
    assert cmp["cosine"] >= MIN_INT8_COSINE
    if target == "edgetpu":
        assert report["placement_after"]["cut"] is None
        assert "BATCH_MATMUL" not in report["artifact_ops"]
    if target.startswith("ethos-u"):
        assert report["vela"]["cpu_ops"] == 0
    if target == "tflm":
        _runs_in_tflite_micro(model_path, out / "model.tflite", root / "data.npy")


def _runs_in_tflite_micro(model_path: Path, tflite: Path, data: Path) -> None:
    from rewriter.frontends import load_model
    from rewriter.verify.tflm import TflmRunner

    model = load_model(str(model_path))
    name, out = model.inputs[0].name, model.outputs[0].name
    xs = np.load(data)
    got = TflmRunner(tflite).run_many([{name: x[None]} for x in xs])
    want = [model.run({name: x[None]})[out] for x in xs]
    micro = np.stack([next(iter(g.values())) for g in got])
    assert np.all(np.isfinite(micro))
    assert _cosine(micro, np.stack(want)) >= MIN_INT8_COSINE
