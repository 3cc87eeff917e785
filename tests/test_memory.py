"""Weights as variables (rewriter.ir.model.lift_weights): what the converter's SavedModel and the
per-layer int8 comparison run, so a job does not copy its weights at every step TensorFlow takes
(the memory figures: ``benchmarks/memory_ratio.py``, README "Memory")."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def dense_model(tmp_path_factory):
    import keras

    from rewriter.frontends import LoadOptions, load_model

    inp = keras.Input((8, 8, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)  # 108 weights: kept
    x = keras.layers.Flatten()(x)
    out = keras.layers.Dense(64, name="head")(keras.layers.Dense(32, activation="relu",
                                                                  name="hidden")(x))
    path = tmp_path_factory.mktemp("dense") / "dense.keras"
    keras.Model(inp, out).save(path)
    return load_model(str(path), LoadOptions())


def test_lift_weights_lifts_large_float_constants_only(dense_model):
    from rewriter.ir.model import WEIGHT_MIN_ELEMENTS, lift_weights

    graph, variables = lift_weights(dense_model.graph_def)
    sizes = {name: int(np.prod(v.shape)) for name, v in variables.items()}
    assert sorted(sizes.values()) == [2048, 8192]  # hidden 256x32, head 32x64
    assert all(n >= WEIGHT_MIN_ELEMENTS for n in sizes.values())
    by_name = {n.name: n for n in graph.node}
    for name in variables:
        node = by_name[name.split(":")[0]]
        assert node.op == "Const" and len(node.attr["value"].tensor.tensor_shape.dim) == 0
    assert graph.ByteSize() < dense_model.graph_def.ByteSize() - 4 * (2048 + 8192)


def test_weights_function_computes_what_the_model_computes(dense_model):
    from rewriter.ir.model import WeightsFunction

    rng = np.random.default_rng(0)
    feeds = {"image": rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)}
    spec = dense_model.inputs[0]
    fetches = [o.tensor for o in dense_model.outputs]
    fn = WeightsFunction(dense_model.graph_def, [(spec.tensor, spec.shape, spec.dtype)], fetches)
    got = fn(feeds[spec.name])[fetches[0]]
    want = dense_model.run(feeds)[dense_model.outputs[0].name]
    assert got.shape == want.shape == (1, 64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_converter_saved_model_holds_the_weights_as_variables(dense_model, tmp_path):
    import tensorflow as tf

    from rewriter.export.saved_model import export_saved_model

    export_saved_model(dense_model, tmp_path / "vars")  # the default: the job's SavedModel too
    export_saved_model(dense_model, tmp_path / "consts", variables=False)
    assert (tmp_path / "vars" / "variables" / "variables.index").is_file()
    loaded = tf.saved_model.load(str(tmp_path / "vars"))
    assert sorted(int(np.prod(v.shape)) for v in loaded.weights) == [2048, 8192]
    graph_bytes = {d: (tmp_path / d / "saved_model.pb").stat().st_size for d in ("vars", "consts")}
    weights = 4 * (2048 + 8192)  # bytes: in the graph as constants, beside it as variables
    assert graph_bytes["consts"] > weights > graph_bytes["vars"]
    x = np.random.default_rng(1).uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)
    fn = loaded.signatures["serving_default"]
    got = next(iter(fn(image=tf.constant(x)).values())).numpy()
    want = dense_model.run({"image": x})[dense_model.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_model_functions_share_one_set_of_weight_variables(dense_model):
    """Model.run's functions (one per fetch set) read the weights from variables made once per
    model: no function graph holds them, the results are those of the graph with constants."""
    model = dense_model.copy()
    rng = np.random.default_rng(2)
    feeds = {"image": rng.uniform(-1, 1, (1, 8, 8, 3)).astype(np.float32)}
    hidden = next(n.name for n in model.graph_def.node if n.op == "Relu") + ":0"
    got = model.run(feeds, fetches=[hidden, model.outputs[0].tensor])
    _, variables = model.weights()
    out = model.run(feeds)[model.outputs[0].name]
    assert model.weights()[1] is variables and len(variables) == 2
    weights = 4 * (2048 + 8192)
    for fn in (model.concrete_function(), model.concrete_function([hidden,
                                                                  model.outputs[0].tensor])):
        assert fn.graph.as_graph_def().ByteSize() < weights
    frozen = model.concrete_function(constants=True)
    assert frozen.graph.as_graph_def().ByteSize() > weights
    import tensorflow as tf

    x = frozen(tf.constant(feeds["image"]))
    want = (x[0] if isinstance(x, (list, tuple)) else x).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[model.outputs[0].tensor], want, rtol=1e-6, atol=1e-7)
    assert got[hidden].shape == (1, 32) and got[hidden].min() >= 0
    model.forget_functions()
    assert model._weights is None


def test_shape_inference_sees_weights_as_placeholders_of_their_shape(dense_model):
    """The target checks infer shapes from a graph without weight values: the same shapes as
    TensorFlow gives the graph with them."""
    import tensorflow as tf

    from rewriter.ir.model import WEIGHT_MIN_ELEMENTS, shape_only
    from rewriter.targets.predict import _infer_shapes

    light = shape_only(dense_model.graph_def)
    lifted = [n for n in light.node if n.op == "Placeholder"
              and n.name not in {s.node for s in dense_model.inputs}]
    assert sorted(int(np.prod([d.size for d in n.attr["shape"].shape.dim])) for n in lifted) \
        == [2048, 8192]
    assert all(np.prod([d.size for d in n.attr["shape"].shape.dim]) >= WEIGHT_MIN_ELEMENTS
               for n in lifted)
    assert light.ByteSize() < dense_model.graph_def.ByteSize() - 4 * (2048 + 8192)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(dense_model.graph_def, name="")
    want = {f"{op.name}:{i}": tuple(t.shape.as_list()) for op in graph.get_operations()
            for i, t in enumerate(op.outputs) if t.shape.rank is not None}
    got = _infer_shapes(dense_model)
    assert {k: got[k] for k in want} == want


def test_a_graph_with_tf1_loops_converts_from_its_saved_model(tmp_path):
    """A frozen Keras LSTM keeps its while frame (TF1 control flow): its SavedModel, weights as
    variables, still computes what the model computes, and the TFLite converter takes it (a
    tf.function importing the graph directly adds control edges across the frame, and the
    conversion fell back to the frozen-graph route, whose file has no signature)."""
    import keras
    import tensorflow as tf

    from rewriter.export.saved_model import export_saved_model
    from rewriter.export.tflite import _convert_here
    from rewriter.frontends import LoadOptions, load_model

    inp = keras.Input((6, 5), name="x")
    out = keras.layers.Dense(3)(keras.layers.LSTM(32)(inp))
    keras.Model(inp, out).save(tmp_path / "lstm.keras")
    model = load_model(str(tmp_path / "lstm.keras"), LoadOptions())
    assert any(n.op == "Enter" for n in model.graph_def.node)
    export_saved_model(model, tmp_path / "sm")
    loaded = tf.saved_model.load(str(tmp_path / "sm"))
    assert [int(np.prod(v.shape)) for v in loaded.weights] == [32 * 4 * 32]  # recurrent kernel
    x = np.random.default_rng(3).normal(size=(1, 6, 5)).astype(np.float32)
    got = next(iter(loaded.signatures["serving_default"](x=tf.constant(x)).values())).numpy()
    want = model.run({"x": x})[model.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    _, route = _convert_here(model, "none", None, False)
    assert route == "from_saved_model"
