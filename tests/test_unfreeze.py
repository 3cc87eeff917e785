"""`rewrite unfreeze`: a frozen .pb becomes a trainable SavedModel that computes the same outputs.

Seed 004 asks how to re-train a frozen protobuf: kernel and bias constants must become variables.
Here the unfrozen SavedModel must (1) reproduce the frozen graph (max abs error <= 1e-6), (2)
expose ``variables`` / ``trainable_variables`` / ``__call__`` and (3) train: one gradient step
reaches every trainable variable and changes the outputs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from .conftest import SAMPLES

v1 = tf.compat.v1


def _frozen_tf1_graph(folder, text=False):
    """Seed 004's situation: a TF1 conv net (conv, fused BN, dense) frozen with its variables."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)  # the same graph every run
        x = v1.placeholder(tf.float32, [None, 8, 8, 3], name="input")
        with v1.variable_scope("conv2d_1"):
            k = v1.get_variable("kernel", [3, 3, 3, 4])
            b = v1.get_variable("bias", [4], initializer=v1.random_normal_initializer())
            h = tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b)
        with v1.variable_scope("batch_normalization"):
            gamma = v1.get_variable("gamma", [4], initializer=v1.random_uniform_initializer(.5, 2))
            beta = v1.get_variable("beta", [4], initializer=v1.random_normal_initializer())
            mean = v1.get_variable("moving_mean", [4], initializer=v1.random_normal_initializer(),
                                   trainable=False)
            var = v1.get_variable("moving_variance", [4], trainable=False,
                                  initializer=v1.random_uniform_initializer(.5, 2))
            h, _, _ = v1.nn.fused_batch_norm(h, gamma, beta, mean, var, is_training=False)
        h = tf.reshape(tf.nn.relu(h), [-1, 8 * 8 * 4])
        with v1.variable_scope("dense_1"):
            # Small weights keep logits O(1), where 1e-6 absolute is ~8 float32 ulps (at |y|~10
            # one ulp is ~1e-6 and the bound would test rounding, not the rewrite).
            w = v1.get_variable("kernel", [8 * 8 * 4, 5],
                                initializer=v1.random_normal_initializer(stddev=0.02))
            c = v1.get_variable("bias", [5], initializer=v1.random_normal_initializer())
            h = tf.nn.bias_add(tf.matmul(h, w), c)
        tf.identity(h, name="logits")
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            frozen = v1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), ["logits"])
    name = "frozen.pbtxt" if text else "frozen.pb"
    tf.io.write_graph(frozen, str(folder), name, as_text=text)
    return folder / name, frozen


def _run_frozen(graph_def, x):
    graph = tf.Graph()
    with graph.as_default():
        v1.import_graph_def(graph_def, name="")
        with v1.Session(graph=graph) as sess:
            return sess.run("logits:0", {"input:0": x})


@pytest.fixture(scope="module")
def unfrozen(tmp_path_factory):
    from rewriter.cli import main

    folder = tmp_path_factory.mktemp("unfreeze")
    pb, graph_def = _frozen_tf1_graph(folder)
    code = main(["unfreeze", str(pb), "-o", str(folder / "sm"), "-q"])
    assert code == 0
    return folder / "sm", graph_def


X = np.random.default_rng(0).standard_normal((3, 8, 8, 3)).astype(np.float32)


def test_serving_default_reproduces_the_frozen_graph(unfrozen):
    sm, graph_def = unfrozen
    serving = tf.saved_model.load(str(sm)).signatures["serving_default"]
    got = serving(input=tf.constant(X))["logits"].numpy()
    want = _run_frozen(graph_def, X)
    assert got.shape == (3, 5)
    assert np.max(np.abs(got - want)) <= 1e-6


def test_kernels_biases_and_bn_become_variables_statistics_not_trainable(unfrozen):
    obj = tf.saved_model.load(str(unfrozen[0]))
    names = sorted(v.name.split(":")[0] for v in obj.variables)
    assert names == sorted(["conv2d_1/kernel", "conv2d_1/bias", "batch_normalization/gamma",
                            "batch_normalization/beta", "batch_normalization/moving_mean",
                            "batch_normalization/moving_variance", "dense_1/kernel",
                            "dense_1/bias"])
    frozen_stats = {"batch_normalization/moving_mean", "batch_normalization/moving_variance"}
    assert {v.name.split(":")[0] for v in obj.trainable_variables} == set(names) - frozen_stats
    assert list(obj.regularization_losses) == []


def test_one_gradient_step_reaches_every_variable_and_changes_outputs(unfrozen):
    obj = tf.saved_model.load(str(unfrozen[0]))
    before = obj(tf.constant(X)).numpy()
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(obj(tf.constant(X)) - 1.0))
    grads = tape.gradient(loss, obj.trainable_variables)
    assert all(g is not None and float(tf.reduce_max(tf.abs(g))) > 0 for g in grads)
    for g, v in zip(grads, obj.trainable_variables, strict=True):
        v.assign_sub(1e-3 * g)  # plain SGD
    after = obj(tf.constant(X)).numpy()
    assert np.max(np.abs(after - before)) > 1e-3
    new_loss = float(tf.reduce_mean(tf.square(after - 1.0)))
    assert new_loss < float(loss)


def test_json_report_lists_the_lifted_weights_and_the_error(cli, tmp_path):
    pb, _ = _frozen_tf1_graph(tmp_path)
    code, out, _ = cli("unfreeze", pb, "-o", tmp_path / "sm", "--json")
    res = json.loads(out)
    assert code == 0 and res["ok"] is True
    assert res["variables"] == 8 and res["trainable"] == 6
    assert res["parameters"] == 3 * 3 * 3 * 4 + 4 + 4 * 4 + 256 * 5 + 5
    assert res["max_abs_error"] <= 1e-6
    reasons = {w["name"]: w["reason"] for w in res["weights"]}
    assert reasons["conv2d_1/kernel"] == "feeds Conv2D"
    assert reasons["batch_normalization/moving_mean"] == "feeds FusedBatchNormV3"


def test_weights_option_lifts_only_the_named_consts(cli, tmp_path):
    pb, graph_def = _frozen_tf1_graph(tmp_path, text=True)
    code, out, _ = cli("unfreeze", pb, "-o", tmp_path / "sm", "--weights", "*/kernel", "--json")
    res = json.loads(out)
    assert code == 0
    assert sorted(w["name"] for w in res["weights"]) == ["conv2d_1/kernel", "dense_1/kernel"]
    obj = tf.saved_model.load(str(tmp_path / "sm"))
    assert len(obj.variables) == 2
    assert np.max(np.abs(obj(tf.constant(X)).numpy() - _run_frozen(graph_def, X))) <= 1e-6


def test_outputs_option_unfreezes_only_what_that_output_needs(cli, tmp_path):
    pb, graph_def = _frozen_tf1_graph(tmp_path)
    code, out, _ = cli("unfreeze", pb, "-o", tmp_path / "sm", "--outputs", "conv2d_1/BiasAdd",
                       "--json")
    res = json.loads(out)
    assert code == 0 and res["max_abs_error"] <= 1e-6
    assert sorted(w["name"] for w in res["weights"]) == ["conv2d_1/bias", "conv2d_1/kernel"]
    obj = tf.saved_model.load(str(tmp_path / "sm"))
    assert obj(tf.constant(X)).shape == (3, 8, 8, 4)


def test_keras3_frozen_sample_with_unfused_batchnorm(cli, tmp_path):
    """Keras 3 freezes BN as Rsqrt/Mul/Sub: its moving statistics are still told apart."""
    code, out, _ = cli("unfreeze", SAMPLES["graphdef"], "-o", tmp_path / "sm", "--json")
    res = json.loads(out)
    assert code == 0 and res["max_abs_error"] <= 1e-6
    stats = [w for w in res["weights"] if not w["trainable"]]
    assert stats and len(stats) % 2 == 0  # a mean and a variance per batch norm
    assert all(len(w["shape"]) == 1 for w in stats)


def test_bad_inputs_are_exit_2_with_one_line(cli, tmp_path):
    pb, _ = _frozen_tf1_graph(tmp_path)
    code, _, err = cli("unfreeze", tmp_path / "missing.pb", "-o", tmp_path / "sm")
    assert code == 2 and "missing.pb" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "corrupt.pb").write_bytes(b"\xff\xfe garbage \x00" * 20)
    code, _, err = cli("unfreeze", tmp_path / "corrupt.pb", "-o", tmp_path / "sm")
    assert code == 2 and "corrupt.pb" in err
    (tmp_path / "file").write_text("x")
    code, _, err = cli("unfreeze", pb, "-o", tmp_path / "file")
    assert code == 2 and "existing file" in err
    code, _, err = cli("unfreeze", pb, "-o", tmp_path / "sm", "--weights", "nope/*")
    assert code == 2 and "nope/*" in err


def test_to_keras_writes_a_trainable_keras_model_with_the_same_outputs(cli, tmp_path):
    import keras

    import rewriter.surgery.keras_layer  # noqa: F401 - registers FrozenGraphLayer

    pb, graph_def = _frozen_tf1_graph(tmp_path)
    code, out, _ = cli("unfreeze", pb, "-o", tmp_path / "sm", "--to-keras", "--json")
    res = json.loads(out)
    assert code == 0 and res["keras_max_abs_error"] <= 1e-6
    model = keras.saving.load_model(res["keras"])
    assert len(model.trainable_weights) == 6 and len(model.non_trainable_weights) == 2
    before = np.asarray(model(X))
    assert np.max(np.abs(before - _run_frozen(graph_def, X))) <= 1e-6
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="mse")
    model.fit(X, np.ones((3, 5), np.float32), epochs=1, verbose=0)
    assert np.max(np.abs(np.asarray(model(X)) - before)) > 1e-4


@pytest.mark.slow
def test_mobilenetv3small_unfreezes_exactly_and_trains(cli, tmp_path):
    """A real architecture (weights=None): frozen by the Keras front end, then unfrozen."""
    import keras

    from rewriter.frontends import load_model

    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV3Small(input_shape=(96, 96, 3), weights=None,
                                              classes=10, include_preprocessing=False)
    net.save(tmp_path / "mnv3.keras")
    frozen = load_model(tmp_path / "mnv3.keras")
    tf.io.write_graph(frozen.graph_def, str(tmp_path), "mnv3.pb", as_text=False)
    code, out, _ = cli("unfreeze", tmp_path / "mnv3.pb", "-o", tmp_path / "sm", "--json")
    res = json.loads(out)
    assert code == 0 and res["max_abs_error"] <= 1e-5
    assert res["parameters"] == net.count_params()
    obj = tf.saved_model.load(str(tmp_path / "sm"))
    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (1, 96, 96, 3)).astype(np.float32))
    before = obj(x).numpy()
    with tf.GradientTape() as tape:
        loss = -tf.math.log(obj(x)[0, 3])
    grads = tape.gradient(loss, obj.trainable_variables)
    assert all(g is not None for g in grads)
    for g, v in zip(grads, obj.trainable_variables, strict=True):
        v.assign_sub(1e-2 * g)
    assert np.max(np.abs(obj(x).numpy() - before)) > 1e-4
