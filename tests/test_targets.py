"""Every constraint kind, violated by a tiny model, gives its reason with the observed value.

Graph-level checks (TF graph -> predicted target ops) need no conversion, so they are fast. The
two kinds that only exist in a converted file (fused activation, op version) are checked on a
tiny int8 ``.tflite`` against a table given in memory.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

from rewriter.errors import UserError
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.targets import KINDS, load_target, target_from_table


def build_model(fn, shape, dtype=tf.float32) -> Model:
    """A frozen Model from a tf.function of one input (shape may hold None)."""
    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(shape, dtype, name="x"))
    frozen = convert_variables_to_constants_v2(cf)
    out = frozen.outputs[0]
    return Model(frozen.graph.as_graph_def(),
                 [TensorSpec("x", frozen.inputs[0].name, tuple(shape), dtype.name)],
                 [TensorSpec("y", out.name, tuple(out.shape.as_list()), out.dtype.name)],
                 Source("<memory>", "memory"))


def _w(*shape: int) -> tf.Tensor:
    return tf.constant(np.random.default_rng(0).uniform(-1, 1, shape).astype("float32"))


def _reasons(target: str, fn, shape, quantize: str | None = None) -> list[str]:
    check = load_target(target).check_graph(build_model(fn, shape), quantize)
    return [v.reason for v in check.verdicts if not v.supported]


# (kind, target, model, input shape, the reason expected word for word)
CASES = [
    ("dtypes", "tflm", tf.exp, (1, 8),
     "EXP: Tensors must be float32: observed int8"),
    ("rank_max", "gpu", tf.nn.relu, (1, 2, 3, 4, 5),
     "RELU: Tensor rank must be at most 4: observed rank 5 [1, 2, 3, 4, 5]"),
    ("static_shape", "edgetpu", tf.nn.relu, (None, 8),
     "RELU: Tensor shapes must be static: observed [?, 8]"),
    ("batch_one", "ethos-u55-128",
     lambda x: tf.nn.conv2d(x, _w(3, 3, 4, 4), 1, "SAME"), (2, 8, 8, 4),
     "CONV_2D: Batch must be 1: observed batch 2"),
    ("inner_dims", "edgetpu", tf.nn.relu, (2, 3, 4, 5),
     "RELU: Only the 3 innermost dimension(s) may be larger than 1: observed [2, 3, 4, 5]"),
    ("elements_max", "edgetpu", tf.nn.softmax, (1, 20000),
     "SOFTMAX: Input must have at most 16000 elements: observed 20000 elements"),
    ("hw_product_max", "ethos-u55-128", tf.nn.softmax, (1, 300, 300, 2),
     "SOFTMAX: The product of IFM width and height must be at most 65535: "
     "observed 300x300 = 90000"),
    ("stride_range", "ethos-u55-128",
     lambda x: tf.nn.depthwise_conv2d(x, _w(3, 3, 4, 1), [1, 4, 4, 1], "SAME"), (1, 16, 16, 4),
     "DEPTHWISE_CONV_2D: Stride must be in [1, 3]: observed 4x4"),
    ("same_kernel_max", "ethos-u55-128",
     lambda x: tf.nn.avg_pool2d(x, 9, 1, "SAME"), (1, 16, 16, 4),
     "AVERAGE_POOL_2D: With SAME padding, kernel width and height must be at most 8: "
     "observed 9x9 with SAME padding"),
    ("kernel_height_max", "ethos-u55-128",
     lambda x: tf.nn.max_pool2d(x, (257, 1), 1, "VALID"), (1, 300, 2, 1),
     "MAX_POOL_2D: Kernel height must be at most 256: observed 1x257"),
    ("dilation_equal", "edgetpu",
     lambda x: tf.nn.conv2d(x, _w(3, 3, 4, 4), 1, "SAME", dilations=[2, 1]), (1, 16, 16, 4),
     "CONV_2D: Dilation must be the same in x and y: observed 1x2"),
    ("inputs_max", "tflm", lambda x: tf.concat([x * float(i) for i in range(12)], -1), (1, 4),
     "CONCATENATION: At most 10 input tensors: observed 12 inputs"),
    ("no_batch_axis", "edgetpu", lambda x: tf.reduce_mean(x, axis=0), (1, 4, 4, 8),
     "MEAN: Must not operate along the batch axis: observed axis [0] of [1, 4, 4, 8]"),
    ("mean_depth_reduction", "ethos-u55-128", lambda x: tf.reduce_mean(x, axis=-1),
     (1, 16, 16, 8),
     "MEAN: Reduction over depth is only supported if any of h, w, c is 1: "
     "observed reduces axis 3 of [1, 16, 16, 8]"),
    ("reduced_axis_max", "ethos-u55-128", lambda x: tf.reduce_mean(x, axis=1), (1, 5000, 2, 1),
     "MEAN: Reduced axis must have at most 4095 elements: observed axis 1 has 5000 elements"),
    ("slice_strides_one", "edgetpu", lambda x: x[:, ::2], (1, 8),
     "STRIDED_SLICE: Slice strides must all be 1: observed [1, 2]"),
    ("resize_scale", "ethos-u55-128", lambda x: tf.image.resize(x, (4, 4)), (1, 16, 16, 8),
     "RESIZE_BILINEAR: OFM height and width must be 1x/2x/4x/8x the IFM's (-1 each with "
     "align_corners), equal or 1 per axis, unless the IFM is 1x1 or the OFM equals it (an "
     "upscale: no downscale): observed [1, 16, 16, 8] -> [1, 4, 4, 8]"),
]


@pytest.mark.parametrize("kind,target,fn,shape,expected", CASES, ids=[c[0] for c in CASES])
def test_graph_level_violation_gives_reason_with_observed_value(kind, target, fn, shape,
                                                                  expected):
    assert kind in KINDS
    assert expected in _reasons(target, fn, shape)


def test_satisfied_constraints_give_no_reason():
    """The same ops within the limits pass: the predicates are not always-false."""
    assert _reasons("ethos-u55-128", lambda x: tf.reduce_mean(x, axis=[1, 2]), (1, 16, 16, 8)) == []
    fn = lambda x: tf.nn.depthwise_conv2d(x, _w(3, 3, 4, 1), [1, 2, 2, 1], "SAME")  # noqa: E731
    assert _reasons("ethos-u55-128", fn, (1, 16, 16, 4)) == []
    assert _reasons("tflm", tf.exp, (1, 8), quantize="none") == []
    assert _reasons("ethos-u55-128", lambda x: tf.image.resize(x, (32, 32)), (1, 8, 8, 2)) == []
    assert _reasons("ethos-u55-128", lambda x: tf.compat.v1.image.resize(
        x, (15, 15), align_corners=True), (1, 8, 8, 2)) == []  # (15 - 1) = 2 (8 - 1)


@pytest.fixture(scope="module")
def conv_relu_int8(tmp_path_factory) -> str:
    """A tiny full-int8 .tflite: CONV_2D with a fused RELU."""
    model = build_model(lambda x: tf.nn.relu(tf.nn.conv2d(x, _w(3, 3, 3, 4), 1, "SAME")),
                        (1, 8, 8, 3))
    from rewriter.export.tflite import export_tflite

    path = tmp_path_factory.mktemp("tfl") / "conv.tflite"
    export_tflite(model, path, quantize="int8",
                  calibration=[{"x": np.random.default_rng(i).uniform(-1, 1, (1, 8, 8, 3))
                                .astype("float32")} for i in range(4)])
    return str(path)


def _table(**conv: object) -> dict:
    return {"name": "toy", "title": "Toy NPU", "sources": ["https://example.invalid"],
            "version": "1", "artifact": "tflite", "default_quantize": "int8",
            "partitioning": "per-op",
            "ops": {"CONV_2D": dict(conv), "QUANTIZE": {}, "DEQUANTIZE": {}}}


def test_fused_activation_violation_on_artifact(conv_relu_int8):
    check = target_from_table(_table(fused_activation=["NONE"])).check_artifact(conv_relu_int8)
    reasons = [v.reason for v in check.verdicts if not v.supported]
    assert reasons == ["CONV_2D: Fused activation must be one of NONE: observed RELU"]
    assert check.ok is False


def test_version_max_violation_on_artifact(conv_relu_int8):
    check = target_from_table(_table(version_max=1)).check_artifact(conv_relu_int8)
    reasons = [v.reason for v in check.verdicts if not v.supported]
    assert len(reasons) == 1
    assert reasons[0].startswith("CONV_2D: Op version must be at most 1: observed version ")


def test_edge_tpu_refuses_the_conv_version_tf_writes_for_grouped_convolutions(tmp_path):
    """edgetpu_compiler 16.0 refuses CONV_2D version 6 (google-coral/edgetpu#631); TF 2.21 writes
    it for a grouped convolution (groups=2 here, measured), and the table's version_max says so;
    the ungrouped file (conv_relu_int8's CONV_2D) is version <= 5."""
    from rewriter.export.tflite import export_tflite

    w = _w(3, 3, 2, 4)  # 4 input channels in 2 groups
    model = build_model(lambda x: tf.nn.conv2d(x, w, 1, "SAME"), (1, 8, 8, 4))
    path = tmp_path / "grouped.tflite"
    export_tflite(model, path, quantize="int8",
                  calibration=[{"x": np.random.default_rng(i).uniform(-1, 1, (1, 8, 8, 4))
                                .astype("float32")} for i in range(4)])
    edgetpu = load_target("edgetpu")
    reasons = [v.reason for v in edgetpu.check_artifact(str(path)).verdicts if not v.supported]
    assert reasons == ["CONV_2D: Op version must be at most 5: observed version 6"], reasons


def test_every_kind_is_covered_by_a_test():
    from tests.test_edgetpu_limits import GRAPH_CASES

    covered = {c[0] for c in CASES} | {c[0] for c in GRAPH_CASES} | {
        "fused_activation", "version_max",  # below, on a converted file
        # tests/test_edgetpu_limits.py, on op facts and warnings
        "weights_format", "io_rank3", "alpha_inner_dims", "reshape_may_not_map",
        "resize_may_not_map",
        "no_float_island"}  # tests/test_tflm_target.py, on a converted file and the TF graph
    assert covered == set(KINDS)


def test_unknown_op_is_unsupported_with_the_table_title():
    reasons = _reasons("edgetpu", tf.nn.elu, (1, 8))
    assert reasons == ["ELU is not supported by Coral Edge TPU"]


def test_flex_op_reason_names_the_tf_op():
    reasons = _reasons("tflite", tf.math.erf, (1, 8))
    assert reasons[0].startswith("TF op Erf is not a TFLite builtin: conversion needs Flex ops")


def test_int8_leaves_elu_in_float_so_ethos_u_rejects_it():
    reasons = _reasons("ethos-u55-128", tf.nn.elu, (1, 8, 8, 4), quantize="int8")
    assert reasons == ["ELU: Tensors must be int8: observed float32 (the TFLite converter keeps "
                       "it in float32 in full-int8 conversion, DEQUANTIZE -> op -> QUANTIZE)"]


def test_edgetpu_cut_counts_ops_before_and_after_first_unsupported():
    def fn(x):
        y = tf.nn.conv2d(x, _w(1, 1, 4, 4), 1, "SAME")
        y = tf.nn.elu(y)  # cut here
        return tf.nn.conv2d(y, _w(1, 1, 4, 4), 1, "SAME") + y

    check = load_target("edgetpu").check_graph(build_model(fn, (1, 4, 4, 4)))
    assert check.cut["op"] == "ELU"
    assert (check.cut["mapped_before"], check.cut["cpu_after"]) == (1, 3)
    assert [v.placement for v in check.counted()] == ["accelerator", "cpu", "cpu", "cpu"]


def test_converter_folds_bias_and_relu_into_conv():
    def fn(x):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, _w(1, 1, 4, 4), 1, "SAME"), _w(4)))

    check = load_target("edgetpu").check_graph(build_model(fn, (1, 4, 4, 4)))
    assert [v.target_op for v in check.counted()] == ["CONV_2D"]
    assert check.ok


def test_hard_swish_pattern_is_predicted_as_hard_swish():
    def fn(x):
        return x * tf.nn.relu6(x + 3.0) / 6.0

    check = load_target("edgetpu").check_graph(build_model(fn, (1, 8)))
    assert [v.target_op for v in check.counted()] == ["HARD_SWISH"]
    assert check.cut["op"] == "HARD_SWISH"


def test_tf_op_status_for_the_planner():
    assert load_target("edgetpu").tf_op_status("Elu", "int8").supported is False
    assert load_target("ethos-u55-128").tf_op_status("Elu", "int8").supported is False
    assert load_target("ethos-u55-128").tf_op_status("Conv2D", "int8").supported is True
    status = load_target("tflite").tf_op_status("Erfc", "none")
    assert not status.supported and "Flex" in status.reason


def test_unknown_target_is_a_user_error():
    with pytest.raises(UserError, match="unknown target 'nope'"):
        load_target("nope")


def test_opset_on_a_tflite_target_is_a_user_error():
    with pytest.raises(UserError, match="--opset applies to ONNX targets"):
        load_target("edgetpu", opset=13)


def test_keras_hard_swish_form_is_predicted_as_hard_swish():
    def fn(x):
        return x * (tf.nn.relu6(x + 3.0) / 6.0)

    check = load_target("tflm").check_graph(build_model(fn, (1, 8)))
    assert [v.target_op for v in check.counted()] == ["HARD_SWISH"]


def _keras3_gelu(x):
    return (0.5 * x) * tf.math.erfc(-x * 0.7071067811865476)


def test_keras3_gelu_erfc_form_is_predicted_as_one_gelu():
    """The converter fuses 0.5x * erfc(-x/sqrt2) into GELU, which TFLite Micro lacks."""
    check = load_target("tflm").check_graph(build_model(_keras3_gelu, (1, 8)), "none")
    assert [v.target_op for v in check.counted()] == ["GELU"]
    assert [v.reason for v in check.verdicts if not v.supported] == [
        "GELU is not supported by TensorFlow Lite Micro (no GELU kernel in the op resolver); "
        "the interpreter has no kernel for it: the model fails to load"]


def test_keras3_gelu_on_onnx_is_an_erfc_node():
    """tf2onnx keeps Erfc, which is not an ONNX op."""
    check = load_target("onnx").check_graph(build_model(_keras3_gelu, (1, 8)))
    bad = [(v.op, v.reason) for v in check.verdicts if not v.supported]
    assert bad == [("Erfc", "Erfc is not an ONNX op (no schema in onnx.defs); onnx.checker and "
                    "the runtimes reject the model")]


def test_l2_normalize_over_the_last_axis_is_predicted_as_one_l2_normalization():
    """x * rsqrt(max(sum(x^2, -1), eps)): the converter emits L2_NORMALIZATION, which the Edge
    TPU runs, so its Rsqrt and Sum are not reported."""
    check = load_target("edgetpu").check_graph(
        build_model(lambda x: tf.math.l2_normalize(x, axis=-1), (1, 4, 6)))
    assert [v.target_op for v in check.counted()] == ["L2_NORMALIZATION"]
    assert check.ok
    folded = [v.op for v in check.verdicts if v.placement == "none"]
    assert sorted(folded) == ["Maximum", "Rsqrt", "Square", "Sum"]


@pytest.mark.parametrize("axis,eps", [(1, 1e-12), (-1, 1e-3)])
def test_l2_normalize_the_converter_does_not_fuse_is_not_predicted_as_fused(axis, eps):
    """Measured: the converter keeps SQUARE/SUM/MAXIMUM/RSQRT/MUL for another axis or eps >=
    1e-3."""
    check = load_target("edgetpu").check_graph(
        build_model(lambda x: tf.math.l2_normalize(x, axis=axis, epsilon=eps), (1, 4, 6)))
    ops = [v.target_op for v in check.counted()]
    assert ops == ["SQUARE", "SUM", "MAXIMUM", "RSQRT", "MUL"]
    assert not check.ok
