"""square_of_sqrt: square(layout(sqrt(x))) becomes layout(x), exactly (x >= 0)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.square_of_sqrt import SquareOfSqrt
from rewriter.testing import int8_tflite, model_from_function, op_types
from tests.rules._activation_checks import outputs, rewritten

RULE = SquareOfSqrt()
_W = np.random.default_rng(0).normal(0, 0.5, (1, 1, 4, 4)).astype(np.float32)


def _cqt_like(x):
    """A magnitude, a transpose, then the power again (Basic Pitch's CQT -> normalized log)."""
    mag = tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True))
    return tf.math.log(tf.square(tf.transpose(mag, [0, 2, 1, 3])) + 1e-10)


def test_cancels_through_a_transpose_and_removes_both_ops():
    before, result = rewritten(_cqt_like, RULE, (1, 6, 5, 4))
    ops = op_types(result.model)
    assert ops.get("Sqrt", 0) == 0 and ops.get("Transpose", 0) == 1
    assert [a.rule for a in result.applied] == ["square_of_sqrt"]
    # the Square inside reduce_sum(square(x)) is not the root of a sqrt chain: left as it is
    assert ops.get("Square", 0) == 1


def test_equal_up_to_float32_rounding_over_six_decades_including_zero():
    """x in [0, 1e3] with exact zeros: the log amplifies any absolute error near 0, so the
    rewrite must be exact there (a fitted square root was off by 7.0 after Basic Pitch's log)."""
    before, result = rewritten(lambda x: tf.square(tf.reshape(tf.sqrt(x), [8, 1001])), RULE,
                               (8008,))
    x = np.concatenate([np.zeros(8), np.geomspace(1e-6, 1e3, 8000)]).astype(np.float32)
    got, want = (a.ravel() for a in outputs(before, result.model, x))
    assert result.applied and np.array_equal(got, x)  # the rewrite is x itself
    rel = np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-30)
    assert np.max(rel[want > 0]) <= 2.5e-7 and np.all(want[x == 0] == 0)  # 2 roundings removed


def test_pow_2_without_layout_ops():
    before, result = rewritten(lambda x: tf.pow(tf.sqrt(x), 2.0) + 1.0, RULE, (16,))
    assert "Sqrt" not in op_types(result.model) and "Pow" not in op_types(result.model)
    x = np.linspace(0, 50, 16).astype(np.float32)
    got, want = outputs(before, result.model, x)
    assert np.allclose(got, want, rtol=3e-7, atol=0)


def test_keeps_a_square_root_something_else_reads_and_says_why():
    def fn(x):
        root = tf.sqrt(x)
        return tf.square(root) + tf.exp(root)

    _, result = rewritten(fn, RULE, (16,))
    assert result.applied == [] and "also read by Exp" in result.rejected[0].reason


def test_a_shape_reader_of_the_removed_nodes_reads_the_replacement():
    """A Shape of the transpose that nothing folded (tflm runs SHAPE, so fold_shape_constants
    is not planned there; Basic Pitch's CQT has three): it reads the new transpose."""
    from rewriter.ir.graph import GraphIndex, make_node

    model = model_from_function(
        lambda x: tf.reshape(tf.square(tf.transpose(tf.sqrt(x), [1, 0])), [5, 3]), [(3, 5)])
    g = GraphIndex(model.graph_def)
    transpose = next(n for n in g if n.op == "Transpose")
    reshape = next(n for n in g if n.op == "Reshape")
    g.add(make_node("Shape", "shape_of_t", [transpose.name], {"out_type": np.int32}))
    g.set_inputs(reshape, [reshape.input[0], "shape_of_t"])
    model = model.with_graph(g.to_graph_def())
    assert op_types(model)["Shape"] == 1
    result = apply_rules(model, [RULE])
    assert result.applied and "Sqrt" not in op_types(result.model)
    shape = next(n for n in result.model.graph_def.node if n.op == "Shape")
    assert shape.input[0] in {n.name for n in result.model.graph_def.node if n.op == "Transpose"}
    x = np.random.default_rng(1).uniform(0, 9, (3, 5)).astype(np.float32)
    got, want = outputs(model, result.model, x)
    assert got.shape == want.shape == (5, 3) and np.allclose(got, want, rtol=3e-7)


def test_int8_file_has_neither_op_and_the_power_within_one_step():
    """int8 conversion: SQUARE stays float32 (DEQUANTIZE -> SQUARE -> QUANTIZE) and SQRT, int8 in
    LiteRT, is an op neither Ethos-U nor the Edge TPU runs; after the rewrite the file is all
    int8 and its error is the output's own quantisation step."""
    fn = lambda x: tf.square(tf.sqrt(tf.nn.relu(tf.nn.conv2d(x, _W, 1, "SAME"))))  # noqa: E731
    before, result = rewritten(fn, RULE)
    ops_before, _ = int8_tflite(before)
    ops_after, err_after = int8_tflite(result.model)
    assert ("SQUARE", "float32") in ops_before and "SQRT" in {o for o, _ in ops_before}
    assert not {o for o, _ in ops_after} & {"SQRT", "SQUARE"}
    assert [o for o, dt in ops_after if dt == "float32"] == ["DEQUANTIZE"]
    plain = model_from_function(lambda x: tf.nn.relu(tf.nn.conv2d(x, _W, 1, "SAME")),
                                [before.inputs[0].shape])
    _, err_plain = int8_tflite(plain)
    assert err_after <= err_plain + 1e-6 and err_plain < 2.0 / 255
