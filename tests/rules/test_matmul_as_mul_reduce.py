"""matmul_as_mul_reduce: a matmul of two activations (attention's Q K^T and P V) becomes SLICE,
broadcast MUL and a sum over the contracted axis per batch index, exactly; in int8 every op is
within the Edge TPU's documented limits (no BATCH_MATMUL, at most 3 dimensions above 1)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.matmul_as_mul_reduce import MAX_SLICES, MatMulAsMulReduce
from rewriter.testing import assert_close_rel, model_from_function, op_types

RULE = MatMulAsMulReduce()
RNG = np.random.default_rng(3)
GONE = {"Einsum", "BatchMatMulV2", "BatchMatMul", "BatchMatMulV3"}


def _check(fn, shapes, reductions):
    model = model_from_function(fn, shapes)
    result = apply_rules(model, [RULE])
    ops = op_types(result.model)
    assert result.applied and not GONE & set(ops)
    assert (ops["Conv2D"], ops["DepthwiseConv2dNative"]) == reductions
    feeds = {f"x{i}": RNG.normal(0, 2, s).astype("f4") for i, s in enumerate(shapes)}
    assert_close_rel(result.model.run(feeds)["output_0"], model.run(feeds)["output_0"])
    return result


def test_keras3_attention_scores_sum_over_the_innermost_axis_with_a_ones_conv():
    """Q K^T per head: P[1, T, S, H] = Q[1, T, 1, H] * K[1, 1, S, H], a 1x1 conv of ones."""
    result = _check(lambda q, k: tf.einsum("BTNH,BSNH->BNTS", q, k), [(1, 6, 3, 4)] * 2,
                    (3, 0))
    assert op_types(result.model)["ConcatV2"] == 1  # the 3 heads back together


def test_keras3_attention_values_sum_over_a_middle_axis_with_a_depthwise_conv_of_ones():
    _check(lambda p, v: tf.einsum("BNTS,BSNH->BTNH", p, v), [(1, 2, 5, 6), (1, 6, 2, 4)],
           (0, 2))


def test_tf_keras_attention_equations():
    _check(lambda k, q: tf.einsum("aecd,abcd->acbe", k, q), [(1, 6, 2, 4)] * 2, (2, 0))
    _check(lambda p, v: tf.einsum("acbe,aecd->abcd", p, v), [(1, 2, 5, 6), (1, 6, 2, 4)],
           (0, 2))


@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (False, True), (True, False)])
def test_batch_matmul_with_adjoints_and_two_batch_axes(adj_x, adj_y):
    a = (2, 3, 4, 5) if adj_x else (2, 3, 5, 4)
    b = (2, 3, 7, 4) if adj_y else (2, 3, 4, 7)
    model = model_from_function(lambda x, y: tf.matmul(x, y, adjoint_a=adj_x, adjoint_b=adj_y),
                                [a, b])
    result = apply_rules(model, [RULE])
    assert len(result.applied) == 1 and op_types(result.model)["Mul"] >= 6
    feeds = {"x0": RNG.normal(0, 1, a).astype("f4"), "x1": RNG.normal(0, 1, b).astype("f4")}
    assert_close_rel(result.model.run(feeds)["output_0"], model.run(feeds)["output_0"])


def test_refusals_say_why():
    cases = [
        (lambda a, b: tf.einsum("bij,bjk->bik", tf.transpose(a, [0, 2, 1]), b),
         [(1, 4, 3), (1, 4, 5)], None),
        (lambda a, b: tf.einsum("ik,jk->ji", a, b), [(3, 4), (5, 4)], None),
        (lambda a, b: tf.einsum("ikl,jkl->ij", a, b), [(3, 4, 2), (5, 4, 2)],
         "2 contracted labels, not 1"),
        (lambda a, b: tf.einsum("ki,jk->ij", a, b), [(4, 3), (5, 4)], "need a TRANSPOSE"),
        (lambda a, b: tf.matmul(a, b), [(MAX_SLICES + 1, 2, 3), (MAX_SLICES + 1, 3, 2)],
         f"more than {MAX_SLICES}"),
    ]
    for fn, shapes, why in cases:
        result = apply_rules(model_from_function(fn, shapes), [RULE])
        if why is None:  # fits a layout: fires
            assert len(result.applied) == 1
        else:
            assert result.applied == [] and why in result.rejected[0].reason


def test_int8_attention_runs_within_every_edge_tpu_limit(tmp_path):
    from rewriter.export.tflite import export_tflite
    from rewriter.targets import load_target
    from rewriter.targets.artifact import read_artifact

    def attention(q, k, v):
        p = tf.nn.softmax(tf.einsum("BTNH,BSNH->BNTS", q, k) * 0.5, axis=-1)
        return tf.einsum("BNTS,BSNH->BTNH", p, v)

    model = model_from_function(attention, [(1, 8, 2, 4)] * 3)
    rewritten = apply_rules(model, [RULE, "softmax_rows"]).model
    path = tmp_path / "att.tflite"
    export_tflite(rewritten, path, quantize="int8",
                  calibration=[{f"x{i}": RNG.normal(0, 1, (1, 8, 2, 4)).astype("f4")
                                for i in range(3)} for _ in range(8)])
    ops = read_artifact(str(path)).op_names()
    assert "BATCH_MATMUL" not in ops and "CONV_2D" in ops and "DEPTHWISE_CONV_2D" in ops
    check = load_target("edgetpu").check_artifact(str(path))
    assert check.ok and check.cut is None and check.warnings_summary() == []
