"""Attention masks through ``rewrite``, built from stock Keras 3 layers (issue 28):

* ``MultiHeadAttention(use_causal_mask=True)``: Keras's mask constant (``-0.7 * float32.max``) is
  not the user's weight (no exit 2); ``softmax_mask_select`` places it and the job exits 0 on
  edgetpu (no cut), ethos-u55-128 (Vela: 0 CPU operators), tflm (TFLite Micro runs the file) and
  onnx, int8 cosine >= 0.99 on representative data;
* ``softmax(where(h > 0.5, h, -1e9))`` (a data-dependent condition) and ``MultiHeadAttention(x,
  x, attention_mask=m)`` with a float 0/1 mask as a second model input: ``softmax_mask_compare``
  selects by arithmetic (no GREATER, CAST or SELECT_V2) and the job exits 0 on every target;
* ``where(h > 0.5, h, -1e9)`` with no softmax after it: ``elementwise_ramps`` refuses a fit whose
  bound (1e9) is the spread of the values it fits, so the job says the op is unfixable (exit 1)
  instead of calling a bound of 1e9 a fix, and TFLite Micro aborts on its int8 file.

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
    keras.Model(x, keras.ops.where(h > 0.5, h, -1e9)).save(root / "where_plain.keras")
    rng = np.random.default_rng(0)
    np.save(root / "calibration.npy", rng.standard_normal((32, TOKENS, DIM)).astype("f4"))
    np.save(root / "data.npy", rng.standard_normal((8, TOKENS, DIM)).astype("f4"))
    sub = root / "attention_mask"  # two inputs: .npz keyed by input name
    sub.mkdir()
    x, m = keras.Input((TOKENS, DIM), name="x"), keras.Input((TOKENS, TOKENS), name="mask")
    h = keras.layers.MultiHeadAttention(2, 16, seed=0)(x, x, attention_mask=m)
    keras.Model([x, m], keras.layers.Dense(DIM, kernel_initializer=keras.initializers.
                                           GlorotUniform(seed=1))(h + x)).save(sub / "amask.keras")
    for name, n in (("calibration", 32), ("data", 8)):
        lengths = rng.integers(4, TOKENS + 1, n)  # padding masks: keys past a length are masked
        mask = np.arange(TOKENS)[None, None, :] < lengths[:, None, None]
        np.savez(sub / f"{name}.npz", x=rng.standard_normal((n, TOKENS, DIM)).astype("f4"),
                 mask=np.repeat(mask, TOKENS, 1).astype("f4"))
    return {"causal": root / "causal.keras", "where": root / "where.keras",
            "where_plain": root / "where_plain.keras",
            "amask": sub / "amask.keras"}


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
@pytest.mark.parametrize("target", ["edgetpu", "ethos-u55-128", "tflm", "onnx"])
@pytest.mark.parametrize("model", ["where", "amask"])
def test_data_dependent_masks_run_whole_on_every_target(masks, tmp_path, model, target):
    """softmax(where(h > 0.5, h, -1e9)) and MHA with an attention_mask input; measured at
    landing: where cosine 0.99701..0.99703, amask 0.99950..0.99966, Vela 0 CPU ops, tflm in
    TFLite Micro."""
    report = assert_runs_whole(masks[model], target, tmp_path / "out")
    if target != "onnx":
        assert "softmax_mask_compare" in rules_applied(report)
        assert not {"SELECT_V2", "GREATER", "CAST"} & set(report["artifact_ops"])


@pytest.mark.slow
def test_a_where_mask_is_not_fitted_with_a_bound_of_1e9(masks, tmp_path):
    code, report = job(masks["where_plain"], "edgetpu", tmp_path / "out")
    assert code == 1 and report["ok"] is False
    assert "elementwise_ramps" not in rules_applied(report)
    why = {u["op"]: u.get("why", "") for u in report["unsupported_after"]}
    assert "no fix" in why["SELECT_V2"] and "1e+09" in why["SELECT_V2"], why


@pytest.mark.slow
def test_a_file_tflite_micro_aborts_on_is_not_placed(masks, tmp_path):
    """where(h > 0.5, h, -1e9)'s int8 file makes TFLite Micro abort (SIGABRT, no message): the job
    names the operator (found by bisection) instead of "0 unsupported op(s) in the artifact"."""
    code, report = job(masks["where_plain"], "tflm", tmp_path / "out")
    assert code == 1 and report["ok"] is False
    [entry] = report["unsupported_after"]
    assert entry["op"] == "GREATER" and "TFLite Micro cannot run" in entry["reason"], entry
    assert report["equivalence"]["artifact"]["runtime"] == "LiteRT"
