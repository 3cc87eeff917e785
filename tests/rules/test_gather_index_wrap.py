"""gather_index_wrap: Keras 3 Embedding's where(i < 0, i + n, i) removed when the calibration ids are
>= 0: bit-for-bit the same rows for every id in [0, n); refused on a negative sample id and without
samples; in full int8 the file has no LESS/ADD/SELECT, loads in TFLite Micro (the original does
not: no SELECT kernel) and its GATHER returns the int8 table rows (within half a step)."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.frontends.function import model_from_function
from rewriter.rewrite.passes import apply_rules
from rewriter.rules.gather_index_wrap import GatherIndexWrap
from rewriter.testing import op_types

RULE = GatherIndexWrap()
N, D, T = 20, 6, 12


@pytest.fixture(scope="module")
def embedding():
    import keras

    layer = keras.layers.Embedding(N, D, embeddings_initializer=keras.initializers.RandomNormal(
        seed=3))
    layer.build((1, T))
    table = np.asarray(layer.embeddings.numpy(), np.float64)
    return model_from_function(lambda i: layer(i), [(1, T)], dtype="int32"), table


def _ids(lo: int = 0, count: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x0": rng.integers(lo, N, (1, T)).astype("int32")} for _ in range(count)]


def test_wrap_removed_and_rows_identical(embedding):
    model, table = embedding
    ops = op_types(model)
    assert ops["Less"] == 1 and ops["SelectV2"] == 1 and ops["GatherV2"] == 1
    result = apply_rules(model, [RULE], data=_ids())
    assert [a.rule for a in result.applied] == ["gather_index_wrap"]
    after = op_types(result.model)
    assert "Less" not in after and "SelectV2" not in after and after["GatherV2"] == 1
    every = np.arange(N, dtype="int32")
    for k in range(0, N, T):  # every id in [0, n), bit for bit
        ids = np.resize(np.roll(every, -k), (1, T))
        got = result.model.run({"x0": ids})["output_0"]
        assert np.array_equal(got, model.run({"x0": ids})["output_0"])
        assert np.array_equal(got[0], table[ids[0]].astype("f4"))


def test_refused_on_negative_ids_and_without_samples(embedding):
    model, _ = embedding
    result = apply_rules(model, [RULE], data=_ids(lo=-3))
    assert result.applied == [] and "< 0" in result.rejected[0].reason
    result = apply_rules(model, [RULE])
    assert result.applied == [] and "no calibration samples" in result.rejected[0].reason


def test_int8_file_loads_in_tflite_micro_and_gathers_the_int8_rows(embedding, tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.verify.runners import RunnerError
    from rewriter.verify.tflm import TflmRunner, tflm_available

    model, table = embedding
    data = _ids(count=16)
    after = apply_rules(model, [RULE], data=data).model
    paths = {}
    for m, name in ((model, "before"), (after, "after")):
        paths[name] = tmp_path / f"{name}.tflite"
        export_tflite(m, paths[name], quantize="int8", calibration=data)
    target = load_target("tflm")
    art = target.check_artifact(str(paths["after"]))
    ops = [v.target_op for v in art.verdicts]
    assert "GATHER" in ops and not {"LESS", "SELECT", "SELECT_V2", "ADD"} & set(ops), ops
    assert all(v.supported for v in art.verdicts)
    if not tflm_available():
        pytest.skip("TFLite Micro (pip install 'rewriter[tflm]') is not installed")
    with pytest.raises(RunnerError, match="SELECT"):
        TflmRunner(paths["before"]).run_many(data[:1])
    step = (table.max() - min(table.min(), 0.0)) / 255  # the table's int8 scale (per tensor)
    for feeds, out in zip(data, TflmRunner(paths["after"]).run_many(data), strict=True):
        [got] = out.values()
        err = np.abs(np.asarray(got, np.float64)[0] - table[feeds["x0"][0]])
        assert err.max() <= step / 2 + 1e-6, (err.max(), step)
