"""fold_shape_constants: Shape/StridedSlice/Pack/Prod/Fill chains become Consts, exactly."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.fold_shape_constants import FoldShapeConstants
from rewriter.testing import model_from_function, op_types

RULE = FoldShapeConstants()


def _flatten_rows(x):
    y = tf.nn.relu(x)
    s = tf.shape(y)
    rows = tf.reduce_prod(s[:-1])
    return tf.reshape(y, tf.stack([rows, s[-1]])) * tf.ones(tf.stack([1, s[-1]]))


def test_shape_chains_fold_to_constants_and_values_stay_equal():
    model = model_from_function(_flatten_rows, [(2, 3, 4)])
    before = op_types(model)
    assert {"StridedSlice", "Pack"} <= set(before)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert not {"Shape", "StridedSlice", "Pack", "Prod", "Fill"} & set(ops)
    assert set(ops) == {"Relu", "Reshape", "Mul"}
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("f4")
    np.testing.assert_array_equal(result.model.run({"x0": x})["output_0"],
                                  model.run({"x0": x})["output_0"])


def test_the_reshape_reads_an_int32_const_under_the_old_node_name():
    model = model_from_function(_flatten_rows, [(2, 3, 4)])
    shape_in = next(n for n in model.graph_def.node if n.op == "Reshape").input[1]
    result = apply_rules(model, [RULE])
    nodes = {n.name: n for n in result.model.graph_def.node}
    assert nodes[shape_in].op == "Const"
    assert nodes[shape_in].attr["dtype"].type == tf.int32.as_datatype_enum
    assert tf.make_ndarray(nodes[shape_in].attr["value"].tensor).tolist() == [6, 4]


def test_dynamic_shapes_and_float_math_are_left_alone():
    model = model_from_function(lambda x: tf.reshape(x, tf.stack([tf.shape(x)[0], -1])) * 2.0,
                                [(None, 3, 4)])
    result = apply_rules(model, [RULE])
    assert {"Shape", "StridedSlice", "Pack", "Mul"} <= set(op_types(result.model))
    assert result.applied == []


def test_a_huge_fill_is_refused_with_its_size():
    model = model_from_function(lambda x: x + tf.fill(tf.stack([300, 300]), 1.0), [(300, 300)])
    result = apply_rules(model, [RULE])
    assert "Fill" in op_types(result.model)
    fill = [r for r in result.rejected if "Fill" in r.node]
    assert fill and fill[0].reason == "folded value would have 90000 elements (limit 65536)"
