"""softmax_rows: a softmax over several rows becomes one SOFTMAX per row (SPLIT, CONCATENATION),
exactly; in int8 every SOFTMAX is 1-D as the Edge TPU's documented table requires."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.softmax_rows import MAX_ROW, MAX_ROWS, SoftmaxRows
from rewriter.testing import assert_close_rel, model_from_function, op_types

RULE = SoftmaxRows()
RNG = np.random.default_rng(4)


@pytest.mark.parametrize("shape,softmaxes", [((1, 2, 3, 5), 6), ((4, 7), 4), ((1, 1, 3, 6), 3)])
def test_each_row_gets_its_own_softmax(shape, softmaxes):
    model = model_from_function(tf.nn.softmax, [shape])
    result = apply_rules(model, [RULE])
    assert [a.rule for a in result.applied] == ["softmax_rows"] and result.rejected == []
    assert op_types(result.model)["Softmax"] == softmaxes
    x = RNG.normal(0, 3, shape).astype("f4")
    assert_close_rel(result.model.run({"x0": x})["output_0"], model.run({"x0": x})["output_0"])


def test_one_row_is_left_alone_and_limits_are_refused():
    assert apply_rules(model_from_function(tf.nn.softmax, [(1, 1, 9)]), [RULE]).applied == []
    long = apply_rules(model_from_function(tf.nn.softmax, [(2, MAX_ROW + 1)]), [RULE])
    assert long.applied == [] and f"longer than {MAX_ROW}" in long.rejected[0].reason
    many = apply_rules(model_from_function(tf.nn.softmax, [(MAX_ROWS + 1, 2)]), [RULE])
    assert many.applied == [] and f"more than {MAX_ROWS}" in many.rejected[0].reason


def test_int8_softmaxes_are_1d_within_every_edge_tpu_limit(tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target

    before = model_from_function(tf.nn.softmax, [(1, 2, 4, 8)])
    target = load_target("edgetpu")
    assert not target.check_graph(before).ok  # [1, 2, 4, 8] is not 1-D
    model = apply_rules(before, [RULE]).model
    path = tmp_path / "softmax.tflite"
    export_tflite(model, path, quantize="int8", calibration_ranges={"x0": (-4.0, 4.0)})
    check = target.check_artifact(str(path))
    assert check.ok and check.cut is None and check.warnings_summary() == []
    assert sum(v.target_op == "SOFTMAX" for v in check.verdicts) == 8
