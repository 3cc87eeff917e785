"""ONNX export: matches TF at opsets 13 and 17, passes onnx.checker, names ops it cannot export."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.export import ExportError
from rewriter.export.onnx import _check_model, export_onnx
from rewriter.ir.model import Model, Source, TensorSpec
from rewriter.verify.data import synthetic_inputs
from rewriter.verify.metrics import compare, stack_samples
from rewriter.verify.runners import OnnxRunner, TFRunner


def freeze_keras(km, shape, in_name: str, out_name: str) -> Model:
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    spec = tf.TensorSpec(shape, tf.float32, name=in_name)
    fn = tf.function(lambda x: km(x, training=False)).get_concrete_function(spec)
    frozen = convert_variables_to_constants_v2(fn)
    t_in, t_out = frozen.inputs[0], frozen.outputs[0]
    return Model(frozen.graph.as_graph_def(),
                 [TensorSpec(in_name, t_in.name, tuple(shape), "float32")],
                 [TensorSpec(out_name, t_out.name, tuple(t_out.shape), "float32")],
                 Source("<memory>", "memory"))


@pytest.fixture(scope="module")
def model() -> Model:
    """Keras 3 Conv -> BN -> ELU -> pool -> Dense."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((10, 10, 3), batch_size=1)
    x = keras.layers.Conv2D(6, 3)(inp)
    x = keras.layers.BatchNormalization(epsilon=1e-3)(x)
    x = keras.layers.ELU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    out = keras.layers.Dense(3)(x)
    return freeze_keras(keras.Model(inp, out), (1, 10, 10, 3), "pixels", "scores")


@pytest.mark.parametrize("opset", [13, 17])
def test_onnx_matches_tf_within_1e_5_and_passes_the_checker(model, tmp_path, opset):
    import onnx

    res = export_onnx(model, tmp_path / "m.onnx", opset=opset)
    proto = onnx.load(res.path)
    onnx.checker.check_model(proto, full_check=True)
    assert res.opset == opset
    assert next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == opset
    data = synthetic_inputs(model.inputs, samples=3, seed=opset)
    ref = stack_samples(TFRunner(model).run_many(data))
    test = stack_samples(OnnxRunner(res.path).run_many(data))
    c = compare(ref, test, atol=1e-5, rtol=1e-5)
    assert c.ok, c.to_json()
    assert "Conv" in res.ops and "Elu" in res.ops


def test_onnx_inputs_and_outputs_carry_the_model_names(model, tmp_path):
    runner = OnnxRunner(export_onnx(model, tmp_path / "m.onnx").path)
    assert [i.name for i in runner.inputs] == ["pixels"]
    assert runner.outputs == ["scores"]


def test_keras3_gelu_export_fails_naming_erfc_and_writes_nothing(tmp_path):
    import keras

    inp = keras.Input((8,), batch_size=1)
    km = keras.Model(inp, keras.layers.Dense(4, activation="gelu")(inp))
    m = freeze_keras(km, (1, 8), "x", "y")
    assert "Erfc" in m.op_histogram()
    with pytest.raises(ExportError) as info:
        export_onnx(m, tmp_path / "gelu.onnx")
    err = info.value
    assert err.ops == ["Erfc"]
    assert "Erfc" in str(err) and "not an ONNX operator" in str(err)
    assert err.nodes and err.nodes[0].endswith("Erfc")
    assert not (tmp_path / "gelu.onnx").exists()


def test_checker_failure_no_op_registered_is_reported_with_the_op():
    from onnx import TensorProto, helper

    node = helper.make_node("Erfc", ["x"], ["y"], name="gelu/Erfc")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ExportError) as info:
        _check_model(proto)
    assert info.value.ops == ["Erfc"]
    assert info.value.nodes == ["gelu/Erfc"]
    assert "No Op registered for Erfc" in info.value.detail


def test_onnx_export_result_lists_ops_and_size(model, tmp_path):
    res = export_onnx(model, tmp_path / "m.onnx")
    assert res.format == "onnx" and res.size == (tmp_path / "m.onnx").stat().st_size
    assert sum(res.op_histogram().values()) == len(res.ops)
    assert np.isfinite(res.seconds)
