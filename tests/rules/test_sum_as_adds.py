"""sum_as_adds: a Sum over one axis of static size K <= 8 becomes K strided slices (strides 1)
added in a chain, with a Reshape when keep_dims is False.

Float: within 1e-6 relative of TF's Sum (the order of the additions differs). The rule is
targeted (only the Sums the target refuses). In int8 the rewritten file passes the Edge TPU
table (no cut, where the SUM cut it) and is within one int8 step of the float Sum, as the
int8 SUM kernel is.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.sum_as_adds import MAX_TERMS, SumAsAdds
from rewriter.testing import assert_close_rel, model_from_function, op_types

RULE = SumAsAdds()


@pytest.mark.parametrize("shape, axis, keep", [
    ((1, 309, 172, 2), -1, False),  # Basic Pitch's re**2 + im**2
    ((1, 4, 4, 8), 1, True),
    ((2, 8, 3), 1, False),
    ((3, 5), 0, True),
    ((1, 6, 1), 2, False),
])
def test_sum_becomes_a_chain_of_adds_and_is_close(shape, axis, keep):
    def fn(x):
        return tf.reduce_sum(x * x, axis=axis, keepdims=keep)

    model = model_from_function(fn, [shape])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["sum_as_adds"]
    ops = op_types(result.model)
    k = shape[axis]
    assert ops["Sum"] == 0 and ops["StridedSlice"] == k and ops["AddV2"] == k - 1
    rng = np.random.default_rng(k)
    x = rng.normal(size=shape).astype("f4")
    got, want = result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"]
    assert got.shape == want.shape
    assert_close_rel(got, want, 1e-6)


def test_long_axes_and_several_axes_are_left_alone():
    assert RULE.targeted and MAX_TERMS == 8
    for fn, reason in ((lambda x: tf.reduce_sum(x, -1), "9 elements, not 1 to 8"),
                       (lambda x: tf.reduce_sum(x, [1, 2]), "reduces 2 axes")):
        result = apply_rules(model_from_function(fn, [(1, 2, 3, 9)]), [RULE])
        assert result.applied == [] and op_types(result.model)["Sum"] == 1
        assert any(reason in r.reason for r in result.rejected), result.rejected


def test_targeted_rule_leaves_sums_outside_the_focus():
    model = model_from_function(lambda x: tf.reduce_sum(x, -1), [(1, 3, 2)])
    assert apply_rules(model, [RULE], focus=[]).applied == []


def test_int8_file_passes_the_edge_tpu_table(tmp_path):
    from rewriter.testing import edgetpu_before_after
    from tests.rules.test_mirror_pad_as_slices import _int8_run

    shape = (1, 8, 16, 2)
    model = model_from_function(lambda x: tf.reduce_sum(x, -1), [shape])
    rng = np.random.default_rng(0)
    data = [{"x0": rng.uniform(-1, 1, shape).astype("f4")} for _ in range(8)]
    paths = edgetpu_before_after(model, apply_rules(model, [RULE]).model, data, tmp_path, "SUM")
    x = rng.uniform(-1, 1, shape).astype("f4")
    errs = {}
    for name, path in zip(("before", "after"), paths):
        got, scale = _int8_run(path, x)
        errs[name] = np.abs(got - x.sum(-1)).max() / scale
    # in steps of the output scale; measured 0.97 for both: the one ADD rounds as the int8 SUM
    # kernel does (the input's rounding, 0.5 step of its scale per term, plus the output's)
    assert errs["after"] <= 1.0 and errs["after"] <= errs["before"] + 0.05, errs
