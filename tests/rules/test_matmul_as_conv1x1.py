"""matmul_as_conv1x1: a matmul with constant weights over several rows becomes a 1x1
convolution, exactly, and in int8 its CONV_2D passes every Edge TPU limit (a FULLY_CONNECTED's
output must be one-dimensional there)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.matmul_as_conv1x1 import MatMulAsConv1x1
from rewriter.testing import (
    assert_close_rel,
    model_from_function,
    model_from_keras,
    op_types,
)

RULE = MatMulAsConv1x1()
RNG = np.random.default_rng(11)


def _dense(shape, units=12):
    inp = keras.Input(shape[1:], batch_size=shape[0])
    return model_from_keras(keras.Model(inp, keras.layers.Dense(units)(inp)))


def _run(model, x):
    return model.run({model.inputs[0].name: x})[model.outputs[0].name]


@pytest.mark.parametrize("shape", [(1, 4, 4, 8), (1, 16, 32), (6, 8), (2, 5, 8)])
def test_dense_over_rows_becomes_a_conv1x1(shape):
    model = _dense(shape)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert [a.rule for a in result.applied] == ["matmul_as_conv1x1"]
    assert ops["Conv2D"] == 1 and not {"MatMul", "BatchMatMulV2"} & set(ops)
    x = RNG.normal(0, 2, shape).astype("f4")
    assert_close_rel(_run(result.model, x), _run(model, x))


def test_a_tensordot_reshape_is_looked_through_on_a_feature_map():
    """Dense on [1, 4, 4, 8] freezes as Reshape -> MatMul -> Reshape: the conv reads the
    [1, 4, 4, 8] tensor itself (no Reshape of the rule's own regroups dimensions)."""
    result = apply_rules(_dense((1, 4, 4, 8)), [RULE])
    conv = next(n for n in result.model.graph_def.node if n.op == "Conv2D")
    src = next(n for n in result.model.graph_def.node if n.name == conv.input[0].split(":")[0])
    assert src.op != "Reshape"


@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul_and_transposed_weights(transpose_b):
    w = RNG.normal(0, 1, (6, 8) if transpose_b else (8, 6)).astype("f4")
    model = model_from_function(lambda x: tf.matmul(x, w, transpose_b=transpose_b), [(1, 5, 8)])
    assert {"BatchMatMulV2"} & set(op_types(model))
    result = apply_rules(model, [RULE])
    assert len(result.applied) == 1
    x = RNG.normal(0, 1, (1, 5, 8)).astype("f4")
    assert_close_rel(_run(result.model, x), _run(model, x))


def test_leaves_a_single_row_and_activation_weights_alone():
    result = apply_rules(_dense((1, 8)), [RULE])
    assert result.applied == [] and result.rejected == []
    both = model_from_function(lambda a, b: tf.matmul(a, b), [(4, 8), (8, 3)])
    assert apply_rules(both, [RULE]).applied == []


@pytest.mark.parametrize("shape", [(1, 4, 4, 8), (1, 16, 32)])
def test_int8_file_has_conv_2d_within_every_edge_tpu_limit(tmp_path, shape):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_artifact

    before = _dense(shape)
    target = load_target("edgetpu")
    assert not target.check_graph(before).ok  # FULLY_CONNECTED with a multi-row output
    model = apply_rules(before, [RULE]).model
    path = tmp_path / "dense.tflite"
    export_tflite(model, path, quantize="int8", int8_io=True,
                  calibration_ranges={model.inputs[0].name: (-3.0, 3.0)})
    ops = read_artifact(str(path)).op_names()
    assert "CONV_2D" in ops and "FULLY_CONNECTED" not in ops
    check = target.check_artifact(str(path))
    assert check.ok and check.cut is None and check.warnings_summary() == []
