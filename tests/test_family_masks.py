"""Attention masks through ``rewrite``, built from stock Keras 3 layers (issue 28):

* ``MultiHeadAttention(use_causal_mask=True)``: Keras's mask constant (``-0.7 * float32.max``) is
  not the user's weight (no exit 2); ``softmax_mask_select`` places it and the job exits 0 on
  edgetpu (no cut), ethos-u55-128 (Vela: 0 CPU operators), tflm (TFLite Micro runs the file) and
  onnx, int8 cosine >= 0.99 on representative data;
* ``softmax(where(h > 0.5, h, -1e9))``: ``elementwise_ramps`` refuses a fit whose bound (1e9) is
  the spread of the values it fits, so the job says the op is unfixable (exit 1) instead of
  calling a bound of 1e9 a fix.

The default run takes one target per model; the whole matrix is ``slow``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.whole_job import assert_runs_whole, job, rules_applied

TOKENS, DIM = 16, 32


@pytest.fixture(scope="module")
def masks(tmp_path_factory) -> dict[str, Path]:
    import keras

    root = tmp_path_factory.mktemp("masks")
    x = keras.Input((TOKENS, DIM))
    h = keras.layers.MultiHeadAttention(2, 16, seed=0)(x, x, use_causal_mask=True)
    keras.Model(x, keras.layers.Dense(DIM, kernel_initializer=keras.initializers.GlorotUniform(
        seed=1))(h + x)).save(root / "causal.keras")
    x = keras.Input((TOKENS, DIM))
    h = keras.layers.Dense(TOKENS, kernel_initializer=keras.initializers.GlorotUniform(
        seed=2))(x)
    keras.Model(x, keras.ops.softmax(keras.ops.where(h > 0.5, h, -1e9), axis=-1)).save(
        root / "where.keras")
    rng = np.random.default_rng(0)
    np.save(root / "calibration.npy", rng.standard_normal((32, TOKENS, DIM)).astype("f4"))
    np.save(root / "data.npy", rng.standard_normal((8, TOKENS, DIM)).astype("f4"))
    return {"causal": root / "causal.keras", "where": root / "where.keras"}


def _causal_runs_whole(masks: dict[str, Path], target: str, out: Path) -> None:
    report = assert_runs_whole(masks["causal"], target, out)
    if target != "onnx":
        assert "softmax_mask_select" in rules_applied(report)
        assert "SELECT_V2" not in report["artifact_ops"]


def test_causal_attention_runs_whole_on_ethos_u55(masks, tmp_path):
    _causal_runs_whole(masks, "ethos-u55-128", tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["edgetpu", "tflm", "onnx"])
def test_causal_attention_runs_whole_on_every_target(masks, tmp_path, target):
    _causal_runs_whole(masks, target, tmp_path / "out")


@pytest.mark.slow
def test_a_where_mask_is_not_fitted_with_a_bound_of_1e9(masks, tmp_path):
    code, report = job(masks["where"], "edgetpu", tmp_path / "out")
    assert code == 1 and report["ok"] is False
    assert "elementwise_ramps" not in rules_applied(report)
    why = {u["op"]: u.get("why", "") for u in report["unsupported_after"]}
    assert "no fix" in why["SELECT_V2"] and "1e+09" in why["SELECT_V2"], why


@pytest.mark.slow
def test_a_file_tflite_micro_aborts_on_is_not_placed(masks, tmp_path):
    """The where-mask's int8 file makes TFLite Micro abort (SIGABRT, no message): the job names
    the operator (found by bisection) instead of "0 unsupported op(s) in the artifact"."""
    code, report = job(masks["where"], "tflm", tmp_path / "out")
    assert code == 1 and report["ok"] is False
    [entry] = report["unsupported_after"]
    assert entry["op"] == "GREATER" and "TFLite Micro cannot run" in entry["reason"], entry
    assert report["equivalence"]["artifact"]["runtime"] == "LiteRT"
