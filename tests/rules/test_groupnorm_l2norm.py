"""groupnorm_l2norm: Keras 3 GroupNormalization through an L2 normalization over each group's
elements (no RSQRT), exact in float; full int8 with every op in the Edge TPU table, no cut."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.groupnorm_l2norm import GroupNormL2Norm
from rewriter.testing import assert_close_rel, op_types
from tests.rules.test_groupnorm_decompose import WEIGHTS, _gn_model, _reference

RULE = GroupNormL2Norm()
RNG = np.random.default_rng(7)


@pytest.mark.parametrize("shape,groups,center,scale", [
    ((1, 8, 8, 16), 4, True, True), ((1, 5, 7, 6), 3, True, False), ((1, 4, 4, 8), 8, False, True),
    ((1, 6, 6, 8), 1, True, True)])
def test_keras3_groupnorm_through_l2_normalize_matches(shape, groups, center, scale):
    model = _gn_model(shape, groups, center, scale)
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["groupnorm_l2norm"]
    ops = op_types(result.model)
    assert not {"Neg", "SquaredDifference"} & set(ops), ops
    x = RNG.normal(0, 2, shape).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])
    x = (RNG.uniform(-1, 1, shape) + 50.0).astype("f4")  # |mean| >> std: centred first
    assert_close_rel(result.model.run({"x0": x})["output_0"],
                     _reference(x, groups, WEIGHTS[id(model)]))


def test_full_int8_runs_on_the_edge_tpu_table_with_no_cut(tmp_path):
    """The original is cut on the Edge TPU (its rank-5 RESHAPE); the rewrite has no cut, no unsupported op,
    RSQRT gone, one L2_NORMALIZATION; the int8 output stays close to float."""
    from rewriter.export.tflite import export_tflite
    from rewriter.targets.artifact import read_artifact
    from rewriter.testing import edgetpu_before_after

    shape = (1, 8, 8, 16)
    model = _gn_model(shape, 4)
    after = apply_rules(model, [RULE]).model
    data = [{"x0": RNG.normal(0, 1, shape).astype("f4")} for _ in range(16)]
    _, path = edgetpu_before_after(model, after, data, tmp_path, "RESHAPE")
    ops = [o.op for o in read_artifact(str(path)).ops]
    assert "L2_NORMALIZATION" in ops and "RSQRT" not in ops, ops
    import tensorflow as tf

    interp = tf.lite.Interpreter(model_path=str(path))
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
    x = RNG.normal(0, 1, shape).astype("f4")
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    got = interp.get_tensor(out["index"]).astype(np.float64).ravel()
    want = model.run({"x0": x})["output_0"].astype(np.float64).ravel()
    cos = got @ want / np.linalg.norm(got) / np.linalg.norm(want)
    rel = np.sqrt(np.mean((got - want) ** 2) / np.mean(want ** 2))
    print(f"int8 cosine {cos:.4f} rms rel {rel:.3f}")
    assert cos >= 0.99 and rel < 0.15, (cos, rel)
    del export_tflite
