"""Reading exported files: ops, dtypes, shapes and options of a .tflite, and ONNX nodes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from rewriter.errors import UserError
from rewriter.targets import load_target
from rewriter.targets.artifact import read_artifact
from tests.test_targets import _w, build_model


@pytest.fixture(scope="module")
def conv_elu_int8(tmp_path_factory) -> str:
    """int8 .tflite: CONV_2D (stride 2, fused RELU6) -> ELU (left in float) -> MEAN."""
    from rewriter.export.tflite import export_tflite

    def fn(x):
        y = tf.nn.relu6(tf.nn.conv2d(x, _w(3, 3, 3, 8), 2, "SAME"))
        return tf.reduce_mean(tf.nn.elu(y), axis=[1, 2])

    path = tmp_path_factory.mktemp("art") / "m.tflite"
    cal = [{"x": np.random.default_rng(i).uniform(-1, 1, (1, 16, 16, 3)).astype("float32")}
           for i in range(4)]
    export_tflite(build_model(fn, (1, 16, 16, 3)), path, quantize="int8", calibration=cal)
    return str(path)


def test_tflite_ops_in_execution_order_with_options(conv_elu_int8):
    art = read_artifact(conv_elu_int8)
    assert art.kind == "tflite"
    names = art.op_names()
    assert names[0] == "QUANTIZE" and names[-1] == "DEQUANTIZE"
    conv = next(f for f in art.ops if f.op == "CONV_2D")
    assert (conv.strides, conv.kernel, conv.fused_activation) == ((2, 2), (3, 3), "RELU6")
    assert (conv.dtype, conv.input_shape, conv.output_shape) == ("int8", (1, 16, 16, 3),
                                                                 (1, 8, 8, 8))
    mean = next(f for f in art.ops if f.op == "MEAN")
    assert mean.axes == (1, 2)


def test_tflite_float_island_and_edges(conv_elu_int8):
    art = read_artifact(conv_elu_int8)
    elu = next(f for f in art.ops if f.op == "ELU")
    assert elu.dtype == "float32"
    assert art.ops[0].boundary and art.ops[-1].boundary
    assert not any(f.boundary for f in art.ops[1:-1])


def test_artifact_check_on_ethos_u_names_the_float_elu(conv_elu_int8):
    check = load_target("ethos-u55-128").check_artifact(conv_elu_int8)
    reasons = {v.target_op: v.reason for v in check.verdicts if not v.supported}
    assert reasons["ELU"] == ("ELU: Tensors must be int8: observed float32 (the int8 converter "
                              "left it in float32, between DEQUANTIZE and QUANTIZE)")
    assert "DEQUANTIZE" in reasons and not check.ok


def test_onnx_nodes_dtypes_and_opset_reasons(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["n"]),
                               helper.make_node("Gelu", ["n"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    art = read_artifact(path)
    assert (art.kind, art.opset, art.op_names()) == ("onnx", 20, ["Neg", "Gelu"])
    assert art.ops[0].dtype == "float32" and art.ops[0].input_shape == (1, 4)
    check = load_target("onnx", opset=17).check_artifact(str(path))
    assert [v.reason for v in check.verdicts if not v.supported] == [
        "ONNX op Gelu needs opset 20: target opset is 17; onnx.checker and the runtimes "
        "reject the model"]
    rknn = load_target("rknn", opset=20).check_artifact(str(path))
    # Neg: "Not Supported" in RKNN's op-support document; Gelu: not in it at all
    assert [v.target_op for v in rknn.verdicts if not v.supported] == ["Neg", "Gelu"]


def test_erfc_is_no_onnx_op(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Erfc", ["x"], ["y"])], "g", [x], [y])
    path = tmp_path / "erfc.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    check = load_target("onnx").check_artifact(str(path))
    assert check.verdicts[0].reason.startswith("Erfc is not an ONNX op (no schema in onnx.defs)")


def test_garbage_file_is_a_user_error(tmp_path):
    bad = tmp_path / "bad.tflite"
    bad.write_bytes(b"")
    with pytest.raises(UserError, match="not a TFLite flatbuffer"):
        read_artifact(bad)
    other = tmp_path / "x.txt"
    other.write_text("x")
    with pytest.raises(UserError, match="expected a .tflite or .onnx file"):
        read_artifact(other)


def test_wrong_artifact_kind_for_target_is_a_user_error(conv_elu_int8):
    with pytest.raises(UserError, match="onnx deploys .onnx files"):
        load_target("onnx").check_artifact(conv_elu_int8)
