"""strided_slice_unit_steps: a strided slice with steps > 1 becomes unit-step SLICEs, a PAD
where the last step runs past the end, and rank-3 RESHAPEs: the same elements (exact), and an
int8 file the Edge TPU table accepts (no STRIDED_SLICE with steps > 1, nothing rank 4+ wide)."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.strided_slice_unit_steps import StridedSliceUnitSteps
from rewriter.testing import model_from_function, op_types

RULE = StridedSliceUnitSteps()
RNG = np.random.default_rng(7)


@pytest.mark.parametrize("shape,index", [
    ((1, 16, 16, 8), (slice(None), slice(None, None, 2), slice(None, None, 2), slice(None))),
    ((1, 15, 9, 4), (slice(None), slice(1, None, 2), slice(0, 8, 3), slice(None))),
    ((1, 12, 6), (slice(None), slice(2, 11, 4), slice(None))),
    ((1, 10, 8, 6), (slice(None), slice(None), slice(None), slice(1, None, 2)))])
def test_strided_slices_keep_the_same_elements(shape, index):
    model = model_from_function(lambda x: x[index], [shape])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["strided_slice_unit_steps"]
    assert "StridedSlice" not in op_types(result.model)
    x = RNG.normal(0, 1, shape).astype("f4")
    got = result.model.run({"x0": x})["output_0"]
    assert np.array_equal(got, x[index]), (got.shape, x[index].shape)  # bit for bit


def test_unit_steps_and_negative_steps_are_left_alone():
    unit = model_from_function(lambda x: x[:, 1:5], [(1, 8, 4)])
    assert apply_rules(unit, [RULE]).applied == []
    back = apply_rules(model_from_function(lambda x: x[:, ::-2], [(1, 8, 4)]), [RULE])
    assert back.applied == [] and "not all positive" in back.rejected[0].reason


def test_int8_file_passes_the_edge_tpu_table(tmp_path):
    from rewriter.testing import edgetpu_before_after

    w = RNG.normal(0, 0.3, (3, 3, 8, 8)).astype("f4")
    import tensorflow as tf

    before = model_from_function(
        lambda x: tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))[:, ::2, ::2, :], [(1, 16, 16, 8)])
    after = apply_rules(before, [RULE]).model
    data = [{"x0": RNG.normal(0, 1, (1, 16, 16, 8)).astype("f4")} for _ in range(8)]
    edgetpu_before_after(before, after, data, tmp_path, "STRIDED_SLICE")
