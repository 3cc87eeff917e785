"""`rewrite restore`: the seeds' modified graphs get their trained weights back, bit for bit.

The original graph is seed 000's small conv net (``model_vars/w1..w3``, ``b1..b3`` plus a
non-trainable counter), trained weights saved as a TF1 checkpoint. Each modified graph is saved
as a ``.meta`` only; restoring must copy every shared variable exactly and leave the new ones at
their own initial values.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import tensorflow as tf

v1 = tf.compat.v1

SHAPES = {"w1": [3, 3, 1, 4], "b1": [4], "w2": [3, 3, 4, 8], "b2": [8],
          "w3": [3, 3, 8, 8], "b3": [8]}
NEW_INIT = 0.25  # constant initial value of every variable a modified graph adds


def _conv(x, w, b, act=tf.nn.relu):
    return act(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))


def _build(layers=("1", "2", "3"), counter=True, extra_stat=False, new_conv=False,
           shapes=None, scope="model_vars", act=tf.nn.relu):
    """Seed 000's network in the current graph; returns the output tensor."""
    shapes = {**SHAPES, **(shapes or {})}
    x = v1.placeholder(tf.float32, [None, 8, 8, 1], name="x")
    h = x
    with v1.variable_scope(scope):
        for i in layers:
            w = v1.get_variable(f"w{i}", shapes[f"w{i}"], initializer=v1.random_normal_initializer())
            b = v1.get_variable(f"b{i}", shapes[f"b{i}"], initializer=v1.random_normal_initializer())
            h = _conv(h, w, b, act)
        if counter:
            v1.get_variable("counter", [], tf.int64, v1.zeros_initializer(), trainable=False)
        if extra_stat:
            v1.get_variable("extra_stat", [8], initializer=v1.constant_initializer(NEW_INIT),
                            trainable=False)
        if new_conv:
            w = v1.get_variable("w_new", [1, 1, 8, 8], initializer=v1.constant_initializer(NEW_INIT))
            b = v1.get_variable("b_new", [8], initializer=v1.constant_initializer(NEW_INIT))
            h = _conv(h, w, b)
    return tf.identity(h, name="y")


def _save_meta(path, build):
    graph = tf.Graph()
    with graph.as_default():
        build()
        v1.train.export_meta_graph(filename=str(path), graph=graph)
    return str(path)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """Seed 000's original model, 'trained' (random weights, counter=7), saved as a checkpoint."""
    folder = tmp_path_factory.mktemp("original")
    graph = tf.Graph()
    with graph.as_default():
        _build()
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            counter = [v for v in v1.global_variables() if v.op.name.endswith("counter")][0]
            counter.load(7, sess)
            prefix = v1.train.Saver().save(sess, str(folder / "model-original"))
    return prefix


def _values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def _restore(cli, source, target, out, *extra):
    code, stdout, stderr = cli("restore", source, "--into", target, "-o", out, "--json", *extra)
    return code, (json.loads(stdout) if stdout.strip() else None), stderr


def _assert_restored_exactly(src, out, names):
    for name in names:
        assert np.array_equal(src[name], out[name]), name
        assert src[name].dtype == out[name].dtype


def test_removed_trainable_variables_restore_the_rest(cli, original, tmp_path):
    """Seed 000 case 1: the third conv is gone; w1,w2,b1,b2 restore and w3,b3 are unused."""
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(layers=("1", "2")))
    code, res, _ = _restore(cli, original, meta, tmp_path / "out", "--allow-mismatch",
                            "model_vars/?3")
    assert code == 0
    assert sorted(p["target"] for p in res["restored"]) == [
        "model_vars/b1", "model_vars/b2", "model_vars/counter", "model_vars/w1", "model_vars/w2"]
    assert sorted(v["name"] for v in res["unused"]) == ["model_vars/b3", "model_vars/w3"]
    assert res["new"] == [] and res["mismatched"] == []
    out = _values(str(tmp_path / "out" / "model.ckpt"))
    _assert_restored_exactly(_values(original), out, [p["target"] for p in res["restored"]])
    assert "model_vars/w3" not in out


def test_removed_non_trainable_variable_is_reported_unused(cli, original, tmp_path):
    """Seed 000 case 2: the counter is gone from the graph; every weight restores exactly."""
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(counter=False))
    code, res, _ = _restore(cli, original, meta, tmp_path / "model", "--allow-mismatch",
                            "model_vars/counter")
    assert code == 0
    assert [v["name"] for v in res["unused"]] == ["model_vars/counter"]
    assert len(res["restored"]) == 6
    _assert_restored_exactly(_values(original), _values(str(tmp_path / "model" / "model.ckpt")),
                             [f"model_vars/{n}" for n in SHAPES])


def test_optimizer_state_of_a_training_checkpoint_is_not_unused(cli, tmp_path):
    """A checkpoint saved by a TF1 training loop (Adam, global step) restores into the inference
    graph with exit 0: its slots and counters are training state, counted apart, never restored."""
    graph = tf.Graph()
    with graph.as_default():
        y = _build(counter=False)
        step = v1.train.get_or_create_global_step()
        train = v1.train.AdamOptimizer(1e-3).minimize(v1.reduce_mean(y ** 2), global_step=step)
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            sess.run(train, {"x:0": np.ones([1, 8, 8, 1], np.float32)})
            prefix = v1.train.Saver().save(sess, str(tmp_path / "train" / "model.ckpt"))
    meta = _save_meta(tmp_path / "infer.meta", lambda: _build(counter=False))
    code, res, stderr = _restore(cli, prefix, meta, tmp_path / "out")
    assert code == 0, stderr
    assert res["unused"] == [] and res["mismatched"] == []
    state = sorted(v["name"] for v in res["training_state"])
    assert state == sorted(["beta1_power", "beta2_power", "global_step"]
                           + [f"model_vars/{n}/Adam{s}" for n in SHAPES for s in ("", "_1")])
    _assert_restored_exactly(_values(prefix), _values(str(tmp_path / "out" / "model.ckpt")),
                             [f"model_vars/{n}" for n in SHAPES])
    # a variable that merely ends in an optimizer's name is still a variable of the model
    assert not any(n.endswith("/w1") for n in state)


def test_added_non_trainable_variable_keeps_its_initial_value(cli, original, tmp_path):
    """Seed 000 case 3: leaky_relu instead of relu plus a new non-trainable variable."""
    meta = _save_meta(tmp_path / "mod.meta",
                      lambda: _build(extra_stat=True, act=tf.nn.leaky_relu))
    code, res, _ = _restore(cli, original, meta, tmp_path / "model")
    assert code == 0
    assert [v["name"] for v in res["new"]] == ["model_vars/extra_stat"]
    out = _values(str(tmp_path / "model" / "model.ckpt"))
    _assert_restored_exactly(_values(original), out,
                             [f"model_vars/{n}" for n in SHAPES] + ["model_vars/counter"])
    assert np.array_equal(out["model_vars/extra_stat"], np.full(8, NEW_INIT, np.float32))


def test_added_trainable_variables_restore_where_saver_restore_fails(cli, original, tmp_path):
    """Seed 000 case 4: w_new/b_new are not in the checkpoint; a plain Saver.restore raises
    NotFoundError, `rewrite restore` restores the rest and initialises the new ones."""
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(new_conv=True))
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as sess:
        saver = v1.train.import_meta_graph(meta)
        with pytest.raises(tf.errors.NotFoundError):
            saver.restore(sess, original)
    code, res, _ = _restore(cli, original, meta, tmp_path / "model")
    assert code == 0
    assert [v["name"] for v in res["new"]] == ["model_vars/b_new", "model_vars/w_new"]
    assert res["verified"] == 7
    out = _values(str(tmp_path / "model" / "model.ckpt"))
    _assert_restored_exactly(_values(original), out,
                             [f"model_vars/{n}" for n in SHAPES] + ["model_vars/counter"])
    assert np.array_equal(out["model_vars/w_new"], np.full((1, 1, 8, 8), NEW_INIT, np.float32))
    assert np.array_equal(out["model_vars/b_new"], np.full(8, NEW_INIT, np.float32))


def test_restored_output_loads_with_its_meta_and_runs_like_the_original(cli, original, tmp_path):
    """OUT/model.ckpt + its .meta restore with the plain TF1 API and compute the original's
    outputs; nothing is written beside OUT."""
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(counter=False))
    before = sorted(os.listdir(tmp_path))
    out_prefix = str(tmp_path / "model" / "model.ckpt")
    assert _restore(cli, original, meta, tmp_path / "model", "--allow-mismatch",
                    "model_vars/counter")[0] == 0
    assert sorted(os.listdir(tmp_path)) == sorted([*before, "model"])
    assert os.path.exists(out_prefix + ".meta")
    feed = np.random.default_rng(0).standard_normal((2, 8, 8, 1)).astype(np.float32)
    results = []
    for meta_path, prefix in ((original + ".meta", original), (out_prefix + ".meta", out_prefix)):
        graph = tf.Graph()
        with graph.as_default(), v1.Session(graph=graph) as sess:
            v1.train.import_meta_graph(meta_path).restore(sess, prefix)
            results.append(sess.run("y:0", {"x:0": feed}))
    assert np.array_equal(results[0], results[1])
    assert tf.train.latest_checkpoint(str(tmp_path / "model")) == out_prefix


def test_output_directory_gets_a_model_ckpt_prefix(cli, original, tmp_path):
    meta = _save_meta(tmp_path / "mod.meta", _build)
    code, res, _ = _restore(cli, original, meta, tmp_path / "outdir", "--strict")
    assert code == 0 and res["output"] == str(tmp_path / "outdir" / "model.ckpt")
    assert tf.train.latest_checkpoint(str(tmp_path / "outdir")) == res["output"]


def test_new_branch_sharing_a_trunk_restores_the_trunk(cli, tmp_path):
    """Seed 001: Input->A->B checkpoint restored into Input->A->{B, C}; C is new."""
    def model(with_c):
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        with v1.variable_scope("A"):
            h = tf.nn.relu(x @ v1.get_variable("w", [4, 6]) + v1.get_variable("b", [6]))
        with v1.variable_scope("B"):
            tf.identity(h @ v1.get_variable("w", [6, 2]), name="out1")
        if with_c:
            with v1.variable_scope("C"):
                w = v1.get_variable("w", [6, 3], initializer=v1.constant_initializer(NEW_INIT))
                tf.identity(h @ w, name="out2")

    graph = tf.Graph()
    with graph.as_default():
        model(False)
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            ckpt = v1.train.Saver().save(sess, str(tmp_path / "ab"))
    meta = _save_meta(tmp_path / "abc.meta", lambda: model(True))
    code, res, _ = _restore(cli, ckpt, meta, tmp_path / "abc_restored")
    assert code == 0
    assert sorted(p["target"] for p in res["restored"]) == ["A/b", "A/w", "B/w"]
    assert [v["name"] for v in res["new"]] == ["C/w"]
    out = _values(str(tmp_path / "abc_restored" / "model.ckpt"))
    _assert_restored_exactly(_values(ckpt), out, ["A/b", "A/w", "B/w"])
    assert np.array_equal(out["C/w"], np.full((6, 3), NEW_INIT, np.float32))


@pytest.mark.parametrize("rule", ["input/=init/", r"re:^input/(.*)$=init/\1"])
def test_renamed_scope_restores_through_a_map_rule(cli, tmp_path, rule):
    """Seed 003: checkpoint names say input/, the graph says init/ (MungeBuilder by hand)."""
    def model(scope):
        x = v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        with v1.variable_scope(scope), v1.variable_scope("init_conv"):
            w = v1.get_variable("DW", [3, 3, 3, 16])
        tf.nn.conv2d(x, w, 1, "SAME", name="y")

    graph = tf.Graph()
    with graph.as_default():
        model("input")
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            ckpt = v1.train.Saver().save(sess, str(tmp_path / "model.ckpt-122543"))
    meta = _save_meta(tmp_path / "renamed.meta", lambda: model("init"))
    code, res, _ = _restore(cli, ckpt, meta, tmp_path / "no_map", "--strict")
    assert code == 1 and res["new"][0]["name"] == "init/init_conv/DW"
    code, res, _ = _restore(cli, ckpt, meta, tmp_path / "mapped", "--map", rule, "--strict")
    assert code == 0
    assert res["restored"] == [{"source": "input/init_conv/DW", "target": "init/init_conv/DW",
                                "dtype": "float32", "shape": [3, 3, 3, 16]}]
    assert np.array_equal(_values(ckpt)["input/init_conv/DW"],
                          _values(str(tmp_path / "mapped" / "model.ckpt"))["init/init_conv/DW"])


def test_shape_mismatch_is_not_acceptable_unless_allowed(cli, original, tmp_path):
    """w3 with another shape keeps its initial value: exit 1 naming it (OUT written, the rest
    restored exactly); with --allow-mismatch for both, exit 0 and the same files."""
    meta = _save_meta(tmp_path / "mod.meta",
                      lambda: _build(shapes={"w3": [3, 3, 8, 4], "b3": [4]}))
    code, res, err = _restore(cli, original, meta, tmp_path / "model")
    assert code == 1 and res["ok"] is False
    assert "model_vars/w3: target float32[3, 3, 8, 4] but source model_vars/w3 is " \
           "float32[3, 3, 8, 8]" in err
    assert sorted(m["target"]["name"] for m in res["mismatched"]) == [
        "model_vars/b3", "model_vars/w3"]
    assert res["mismatched"][1]["target"]["shape"] == [3, 3, 8, 4]
    out = _values(str(tmp_path / "model" / "model.ckpt"))
    _assert_restored_exactly(_values(original), out, ["model_vars/w1", "model_vars/w2"])
    assert out["model_vars/w3"].shape == (3, 3, 8, 4)  # the target's own value
    code, res, _ = _restore(cli, original, meta, tmp_path / "allowed", "--allow-mismatch",
                            "model_vars/w3", "--allow-mismatch", "model_vars/b3")
    assert code == 0 and res["ok"] is True and res["unaccepted"] == []
    code, _, err = _restore(cli, original, meta, tmp_path / "one", "--allow-mismatch",
                            "model_vars/w3")
    assert code == 1 and "model_vars/b3" in err and "model_vars/w3:" not in err


def test_quiet_never_hides_a_mismatch(cli, original, tmp_path):
    """-q: the mismatch is still named on stderr with the counts, and the exit code is 1."""
    meta = _save_meta(tmp_path / "mod.meta",
                      lambda: _build(shapes={"w3": [3, 3, 8, 4], "b3": [4]}))
    code, stdout, stderr = cli("-q", "restore", original, "--into", meta, "-o", tmp_path / "m")
    assert code == 1
    assert "5 restored, 0 new, 0 unused, 2 mismatched; not acceptable: mismatched " \
           "model_vars/b3: target float32[4]" in stderr
    assert "model_vars/w3: target float32[3, 3, 8, 4]" in stderr
    assert os.path.isfile(tmp_path / "m" / "model.ckpt.index")
    code, _, stderr = cli("-q", "restore", original, "--into", meta, "-o", tmp_path / "a",
                          "--allow-mismatch", "all")
    assert code == 0 and "not acceptable" not in stderr


def test_strict_names_the_mismatched_variable_and_writes_nothing(cli, original, tmp_path):
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(shapes={"w3": [3, 3, 8, 4],
                                                                    "b3": [4]}))
    code, stdout, stderr = cli("restore", original, "--into", meta, "-o", tmp_path / "m",
                               "--strict")
    assert code == 1
    assert "model_vars/w3: target float32[3, 3, 8, 4] but source model_vars/w3 is " \
           "float32[3, 3, 8, 8]" in stderr
    assert not os.path.exists(tmp_path / "m")


def test_human_report_lists_each_kind(cli, original, tmp_path):
    meta = _save_meta(tmp_path / "mod.meta", lambda: _build(layers=("1", "2"), new_conv=False,
                                                            extra_stat=True))
    code, stdout, _ = cli("restore", original, "--into", meta, "-o", tmp_path / "m")
    assert code == 1  # w3 and b3 are unused
    assert "  restored   model_vars/w1" in stdout
    assert "  new        model_vars/extra_stat" in stdout
    assert "  unused     model_vars/w3" in stdout
    assert "5 restored, 1 new, 2 unused, 0 mismatched" in stdout


# ----------------------------------------------------------------------------- bad input
def test_corrupt_checkpoint_is_exit_2_naming_the_path(cli, original, tmp_path):
    bad = tmp_path / "bad"
    (tmp_path / "bad.index").write_bytes(b"not a checkpoint index" * 10)
    (tmp_path / "bad.data-00000-of-00001").write_bytes(b"\0" * 64)
    meta = _save_meta(tmp_path / "mod.meta", _build)
    code, stdout, stderr = cli("restore", bad, "--into", meta, "-o", tmp_path / "m")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(bad) in lines[0]


def test_truncated_checkpoint_data_is_exit_2(cli, original, tmp_path):
    import shutil

    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copyfile(original + suffix, str(tmp_path / "cut") + suffix)
    with open(str(tmp_path / "cut") + ".data-00000-of-00001", "r+b") as f:
        f.truncate(16)
    meta = _save_meta(tmp_path / "mod.meta", _build)
    code, _, stderr = cli("restore", tmp_path / "cut", "--into", meta, "-o", tmp_path / "m")
    assert code == 2 and "error: " in stderr and "Traceback" not in stderr
    assert str(tmp_path / "cut") in stderr


def test_missing_source_unparsable_meta_and_file_output_are_exit_2(cli, original, tmp_path):
    meta = _save_meta(tmp_path / "mod.meta", _build)
    code, _, err = cli("restore", tmp_path / "nope", "--into", meta, "-o", tmp_path / "m")
    assert code == 2 and str(tmp_path / "nope") in err
    broken = tmp_path / "broken.meta"
    broken.write_bytes(b"\x08\x96\x01garbage" * 5)
    code, _, err = cli("restore", original, "--into", broken, "-o", tmp_path / "m")
    assert code == 2 and "cannot parse meta graph" in err and str(broken) in err
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me")
    code, _, err = cli("restore", original, "--into", meta, "-o", existing)
    assert code == 2 and "existing file" in err
    assert existing.read_text() == "keep me"


# ----------------------------------------------------------------------------- Keras, SavedModel
def _keras_model(extra_layer: bool, seed: int):
    import keras

    keras.utils.set_random_seed(seed)
    inp = keras.Input((6,), name="x")
    h = keras.layers.Dense(5, activation="relu", name="d1")(inp)
    h = keras.layers.BatchNormalization(name="bn")(h)
    if extra_layer:
        h = keras.layers.Dense(5, activation="relu", name="extra",
                               kernel_initializer=keras.initializers.Constant(NEW_INIT))(h)
    out = keras.layers.Dense(3, name="d2")(h)
    return keras.Model(inp, out)


@pytest.fixture(scope="module")
def keras_trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keras")
    model = _keras_model(False, seed=1)
    bn = model.get_layer("bn")
    bn.moving_mean.assign(np.arange(5, dtype=np.float32))  # non-trainable state restores too
    model.save(folder / "trained.keras")
    model.save_weights(folder / "trained.weights.h5")
    return folder, {v.path: v.numpy() for v in model.weights}


@pytest.mark.parametrize("source", ["trained.keras", "trained.weights.h5"])
def test_keras_model_with_an_extra_layer_gets_the_trained_weights(cli, keras_trained, tmp_path,
                                                                  source):
    import keras

    folder, trained = keras_trained
    _keras_model(True, seed=2).save(tmp_path / "modified.keras")
    code, res, _ = _restore(cli, folder / source, tmp_path / "modified.keras",
                            tmp_path / "restored.keras")
    assert code == 0
    assert sorted(v["name"] for v in res["new"]) == ["extra/bias", "extra/kernel"]
    assert len(res["restored"]) == len(trained) and res["unused"] == []
    restored = keras.saving.load_model(tmp_path / "restored.keras" / "model.keras")
    weights = {v.path: v.numpy() for v in restored.weights}
    for name, value in trained.items():
        assert np.array_equal(weights[name], value), name
    assert np.array_equal(weights["extra/kernel"], np.full((5, 5), NEW_INIT, np.float32))


def test_saved_model_target_gets_checkpoint_values_under_its_variable_names(cli, tmp_path):
    """A TF2 SavedModel (tf.Module) target; source a TF2 object-based checkpoint."""
    class Net(tf.Module):
        def __init__(self, extra):
            super().__init__()
            self.w = tf.Variable(tf.random.normal([4, 3]), name="dense/kernel")
            self.b = tf.Variable(tf.zeros([3]), name="dense/bias")
            self.extra = tf.Variable(tf.fill([3], NEW_INIT), name="extra") if extra else None

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            y = x @ self.w + self.b
            return y * self.extra if self.extra is not None else y

    trained, modified = Net(False), Net(True)
    ckpt = tf.train.Checkpoint(model=trained).write(str(tmp_path / "tf2" / "ckpt"))
    tf.saved_model.save(modified, str(tmp_path / "sm"))
    tf.saved_model.save(trained, str(tmp_path / "trained_sm"))
    # object-based names differ (model/w vs w): map them
    code, res, _ = _restore(cli, ckpt, tmp_path / "sm", tmp_path / "out_sm",
                            "--map", "re:^model/w$=dense/kernel", "--map", "model/b=dense/bias")
    assert code == 0, res
    assert [v["name"] for v in res["new"]] == ["extra"]
    loaded = tf.saved_model.load(str(tmp_path / "out_sm"))
    assert np.array_equal(loaded.w.numpy(), trained.w.numpy())
    x = np.ones((2, 4), np.float32)
    assert np.array_equal(loaded(x).numpy(), (trained(x) * NEW_INIT).numpy())
    # a SavedModel source names its variables by their own names: no map needed
    code, res, _ = _restore(cli, tmp_path / "trained_sm", tmp_path / "sm", tmp_path / "out2",
                            "--strict")
    assert code == 1 and [v["name"] for v in res["new"]] == ["extra"]
    assert sorted(p["target"] for p in res["restored"]) == ["dense/bias", "dense/kernel"]


def test_target_with_its_own_checkpoint_keeps_its_saved_values_for_new_variables(
        cli, original, tmp_path):
    """TARGET given as a prefix with .meta + its own (e.g. fine-tuned) checkpoint."""
    graph = tf.Graph()
    with graph.as_default():
        _build(new_conv=True)
        with v1.Session(graph=graph) as sess:
            sess.run(v1.global_variables_initializer())
            w_new = [v for v in v1.global_variables() if v.op.name == "model_vars/w_new"][0]
            w_new.load(np.full((1, 1, 8, 8), 3.0, np.float32), sess)
            target = v1.train.Saver().save(sess, str(tmp_path / "target" / "model"))
    code, res, _ = _restore(cli, original, target, tmp_path / "out")
    assert code == 0 and [v["name"] for v in res["new"]] == ["model_vars/b_new",
                                                             "model_vars/w_new"]
    out = _values(str(tmp_path / "out" / "model.ckpt"))
    assert np.array_equal(out["model_vars/w_new"], np.full((1, 1, 8, 8), 3.0, np.float32))
    _assert_restored_exactly(_values(original), out, [f"model_vars/{n}" for n in SHAPES])
