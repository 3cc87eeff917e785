"""No model code runs without --unsafe: Keras configs are parsed, graphs are scanned.

Every bait here would write a marker file if its code ran; each refusal test asserts exit 2, one
``error:`` line naming the culprit and ``--unsafe``, no marker, and the input byte-identical.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from rewriter.frontends import safety
from rewriter.frontends.unsafe_ops import CONDITIONAL_OPS, REVIEWED_SAFE, UNSAFE_OPS


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _assert_refused(code: int, err: str, *needles: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in (*needles, "--unsafe"):
        assert needle in lines[0], lines[0]


def _marker_lambda(marker: Path) -> object:
    """A lambda that writes ``marker`` when called (stored as bytecode by Keras)."""
    return eval(f"lambda t: (open({str(marker)!r}, 'w').write('ran'), t * 2.0)[1]")  # noqa: S307


def _set_h5_config(path: Path, edit) -> None:
    import h5py

    with h5py.File(path, "r+") as f:
        cfg = f.attrs["model_config"]
        cfg = cfg.decode() if isinstance(cfg, bytes) else str(cfg)
        f.attrs["model_config"] = edit(cfg)


@pytest.fixture(scope="module")
def tfkeras_lambda_h5(tmp_path_factory) -> tuple[Path, Path]:
    """A tf_keras .h5 whose Lambda writes a marker, its class name spelled ``\\u004cambda``."""
    import tf_keras

    root = tmp_path_factory.mktemp("lam")
    marker = root / "MARKER"
    inp = tf_keras.Input((4,), name="x")
    out = tf_keras.layers.Lambda(_marker_lambda(marker))(inp)
    path = root / "lam.h5"
    tf_keras.Model(inp, out).save(path)
    marker.unlink(missing_ok=True)  # tracing at save time ran it once
    _set_h5_config(path, lambda c: c.replace('"class_name": "Lambda"',
                                             '"class_name" : "\\u004cambda"'))
    return path, marker


@pytest.mark.parametrize("command", ["inspect", "check", "verify", "run"])
def test_tfkeras_h5_lambda_in_any_json_spelling_runs_nothing(cli, tmp_path, tfkeras_lambda_h5,
                                                             command):
    path, marker = tfkeras_lambda_h5
    before = _digest(path)
    args = {"inspect": [path], "check": [path, "--target", "tflite"],
            "verify": [path, path], "run": [path, "--target", "tflite", "-o", tmp_path / "o"]}
    code, _, err = cli(command, *args[command])
    _assert_refused(code, err, "Lambda", "lam.h5")
    assert not marker.exists(), "the Lambda's code ran"
    assert _digest(path) == before


def test_unsafe_lets_the_lambda_run(cli, tfkeras_lambda_h5):
    """The bait is real: with --unsafe the same file runs its code (so the refusals above are
    what kept it from running)."""
    path, marker = tfkeras_lambda_h5
    code, _, _ = cli("verify", path, path, "--unsafe", "--samples", "1")
    assert code == 0
    assert marker.exists()
    marker.unlink()


def test_restore_into_a_model_with_a_lambda_needs_unsafe(cli, tmp_path, tfkeras_lambda_h5):
    path, marker = tfkeras_lambda_h5
    code, _, err = cli("restore", path, "--into", path, "-o", tmp_path / "o")
    _assert_refused(code, err, "Lambda")
    assert not marker.exists()


def test_keras3_lambda_with_escaped_name_is_refused_before_keras_sees_it(cli, tmp_path):
    import zipfile

    import keras

    marker = tmp_path / "MARKER"
    inp = keras.Input((4,), name="x")
    out = keras.layers.Lambda(_marker_lambda(marker))(inp)
    src = tmp_path / "src.keras"
    keras.Model(inp, out).save(src)
    marker.unlink(missing_ok=True)
    path = tmp_path / "lam.keras"
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(path, "w") as b:
        for info in a.infolist():
            data = a.read(info)
            if info.filename == "config.json":
                data = data.replace(b'"class_name": "Lambda"', b'"class_name":"\\u004cambda"')
            b.writestr(info, data)
    code, _, err = cli("inspect", path)
    _assert_refused(code, err, "Lambda")
    assert not marker.exists()


def test_lambda_nested_in_an_inner_model_and_a_wrapper_is_found(tmp_path):
    import tf_keras

    inner_in = tf_keras.Input((3, 4))
    inner = tf_keras.Model(inner_in, tf_keras.layers.TimeDistributed(
        tf_keras.layers.Lambda(lambda t: t + 1.0))(inner_in), name="inner")
    outer_in = tf_keras.Input((3, 4))
    model = tf_keras.Sequential([outer_in, inner, tf_keras.layers.Flatten()])
    path = tmp_path / "nested.h5"
    model.save(path)
    found = safety.keras_file_findings(str(path), "h5")
    assert [f.what for f in found] == ["Lambda"]


@pytest.fixture(scope="module")
def tfkeras_op_layers_h5(tmp_path_factory) -> Path:
    """tf_keras TFOpLambda / SlicingOpLambda layers calling pure TF math."""
    import tensorflow as tf
    import tf_keras

    inp = tf_keras.Input((4,), name="x")
    y = tf.reshape(tf.math.add(inp, 1.0), (-1, 2, 2))[:, 0]
    path = tmp_path_factory.mktemp("op") / "ops.h5"
    tf_keras.Model(inp, y).save(path)
    return path


def test_tfkeras_op_layers_calling_math_load(cli, tfkeras_op_layers_h5):
    code, out, err = cli("inspect", tfkeras_op_layers_h5)
    assert code == 0, err
    assert "AddV2" in out


def test_tfkeras_op_layer_naming_a_file_function_is_refused(cli, tmp_path, tfkeras_op_layers_h5):
    path = tmp_path / "write.h5"
    path.write_bytes(tfkeras_op_layers_h5.read_bytes())
    _set_h5_config(path, lambda c: c.replace('"function": "math.add"',
                                             '"function": "io.write_file"'))
    code, _, err = cli("inspect", path)
    _assert_refused(code, err, "TFOpLambda", "io.write_file")


@pytest.mark.parametrize("config, what", [
    ({"class_name": "TFSMLayer", "config": {"filepath": "/x"}}, "TFSMLayer"),
    ({"class_name": "StringLookup", "config": {"vocabulary": "/etc/passwd"}}, "StringLookup"),
    ({"class_name": "ResidualWrapper", "config": {"residual_fn": ["4wEA", None, None],
                                                  "residual_fn_type": "lambda"}},
     "residual_fn_type"),
    ({"module": "os", "class_name": "system", "config": "id"}, "system"),
    ({"class_name": "function", "config": {"activation": {
        "class_name": "__lambda__", "config": {"code": "4wEA"}}}}, "__lambda__"),
    ({"class_name": "ClassMethod", "config": {"cls_symbol": "io.gfile.GFile",
                                              "method_name": "write"}}, "ClassMethod"),
    ({"class_name": "InstanceProperty", "config": {"attr_name": "__class__"}},
     "InstanceProperty"),
])
def test_code_carrying_configs_are_found(config, what):
    found = safety.config_findings(json.loads(json.dumps({"layers": [config]})))
    assert [f.what for f in found] == [what]


def test_plain_configs_have_no_findings(samples):
    import zipfile

    with zipfile.ZipFile(samples["keras"]) as z:
        config = safety.parse_config(z.read("config.json"), "x")
    assert safety.config_findings(config) == []
    assert safety.config_findings({"class_name": "StringLookup",
                                   "config": {"vocabulary": ["a", "b"]}}) == []


def test_duplicate_config_keys_are_refused():
    from rewriter.errors import UserError

    with pytest.raises(UserError, match="repeats the key 'class_name'"):
        safety.parse_config('{"class_name": "Dense", "class_name": "Lambda"}', "m.h5")


def test_hdf5_link_to_another_file_is_refused(cli, tmp_path, tfkeras_op_layers_h5):
    import h5py

    path = tmp_path / "link.h5"
    path.write_bytes(tfkeras_op_layers_h5.read_bytes())
    with h5py.File(path, "r+") as f:
        f["model_weights/elsewhere"] = h5py.ExternalLink("/etc/passwd.h5", "/")
    code, _, err = cli("inspect", path)
    _assert_refused(code, err, "ExternalLink", "/etc/passwd.h5")


# ----------------------------------------------------------------------------- graphs
def _write_file_graph(marker: Path, in_function: bool) -> object:
    """A graph whose output depends on a WriteFile of ``marker`` (inside a called function,
    or inline)."""
    import tensorflow as tf

    def body(x):
        with tf.control_dependencies([tf.io.write_file(str(marker), "ran")]):
            return tf.identity(x * 2.0, name="y")

    fn = tf.function(body) if in_function else body

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def model(x):
        return tf.identity(fn(x), name="out")

    return model.get_concrete_function().graph.as_graph_def()


@pytest.mark.parametrize("in_function", [False, True])
def test_pb_with_write_file_on_the_output_path_is_refused(cli, tmp_path, in_function):
    marker = tmp_path / "MARKER"
    path = tmp_path / "w.pb"
    path.write_bytes(_write_file_graph(marker, in_function).SerializeToString())
    code, _, err = cli("verify", path, path, "--graph-outputs", "out")
    _assert_refused(code, err, "WriteFile", "reads or writes files")
    assert not marker.exists()
    code, _, err = cli("verify", path, path, "--graph-outputs", "out", "--unsafe",
                       "--samples", "1")
    assert code == 0, err
    assert marker.exists(), "the bait did not run with --unsafe"


def test_pb_with_py_func_is_refused(cli, tmp_path):
    import numpy as np
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def model(x):
        y = tf.numpy_function(lambda a: np.asarray(a * 2, np.float32), [x], tf.float32)
        return tf.identity(tf.reshape(y, [1, 4]), name="out")

    path = tmp_path / "py.pb"
    path.write_bytes(model.get_concrete_function().graph.as_graph_def().SerializeToString())
    code, _, err = cli("inspect", path, "--outputs", "out")
    _assert_refused(code, err, "PyFunc", "runs Python")


def test_unsafe_op_off_the_output_path_is_not_run_and_not_refused(cli, tmp_path):
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        tf.nn.relu(x, name="y")
        tf.io.read_file("/etc/hostname", name="unused")
    path = tmp_path / "side.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    code, out, err = cli("inspect", path, "--outputs", "y")
    assert code == 0, err
    code, _, err = cli("inspect", path, "--outputs", "y,unused")
    _assert_refused(code, err, "ReadFile")


def test_saved_model_writing_a_file_in_its_signature_runs_nothing(cli, tmp_path):
    import tensorflow as tf

    marker = tmp_path / "MARKER"
    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def serve(x):
        with tf.control_dependencies([tf.io.write_file(str(marker), "ran")]):
            return {"y": x * 2.0}

    module.serve = serve
    path = tmp_path / "sm"
    tf.saved_model.save(module, str(path), signatures={"serving_default": serve})
    before = _digest(path)
    code, _, err = cli("verify", path, path)
    _assert_refused(code, err, "WriteFile", "in function")
    assert not marker.exists()
    assert _digest(path) == before


def test_keras_saved_model_lambda_code_is_not_run_and_is_noted(cli, tmp_path):
    """tf.saved_model.load never unmarshals the Lambda's bytecode: the graph traced at save
    time runs (and was scanned), so the Lambda is a note, not a refusal."""
    import tf_keras

    marker = tmp_path / "MARKER"
    inp = tf_keras.Input((4,), name="x")
    out = tf_keras.layers.Lambda(_marker_lambda(marker))(inp)
    path = tmp_path / "sm"
    tf_keras.Model(inp, out).save(path, save_format="tf")
    marker.unlink(missing_ok=True)
    code, out, err = cli("verify", path, path, "--samples", "1")
    assert code == 0, err
    assert not marker.exists(), "the Lambda's Python ran"
    code, out, err = cli("inspect", path)
    assert re.search(r"keras_metadata.pb describes Lambda .*not run", out), out


def test_checkpoint_meta_reading_a_file_on_the_output_path_is_refused(cli, tmp_path):
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        w = tf.compat.v1.get_variable("w", (4,), initializer=tf.ones_initializer())
        n = tf.strings.length(tf.io.read_file(str(tmp_path / "secret")))
        tf.identity(x * w + tf.cast(n, tf.float32), name="out")
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(tmp_path / "model.ckpt"))
    code, _, err = cli("inspect", tmp_path / "model.ckpt", "--outputs", "out")
    _assert_refused(code, err, "ReadFile")


def test_restore_target_whose_initialiser_reads_a_file_is_refused(cli, samples, tmp_path):
    """Restoring into a .meta runs its variable initialisers: one reading a file is refused."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        n = tf.cast(tf.strings.length(tf.io.read_file(str(tmp_path / "secret"))), tf.float32)
        tf.compat.v1.get_variable("leak", initializer=tf.fill([4], n))
        tf.compat.v1.train.export_meta_graph(str(tmp_path / "target.meta"))
    code, _, err = cli("restore", samples["checkpoint"], "--into", tmp_path / "target.meta",
                       "-o", tmp_path / "out")
    _assert_refused(code, err, "ReadFile", "target.meta")


def test_checkpoint_ops_are_allowed_only_on_the_savers_own_path():
    """SaveV2 used by the saver target only is fine; the same op feeding an output is not."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1,), name="x")
        prefix = tf.compat.v1.placeholder(tf.string, (), name="prefix")
        save = tf.raw_ops.SaveV2(prefix=prefix, tensor_names=["x"], shape_and_slices=[""],
                                 tensors=[x], name="save")
        with tf.control_dependencies([save]):
            tf.identity(prefix, name="save_done")
        tf.identity(x, name="out")
    gd = g.as_graph_def()
    assert safety.graph_findings(gd, fetches=["out:0"], saver_targets=["save_done:0"]) == []
    found = safety.graph_findings(gd, fetches=["save_done:0"], saver_targets=[])
    assert [f.what for f in found] == ["SaveV2"]
    assert [f.what for f in safety.graph_findings(gd)] == ["SaveV2"]


def test_print_to_a_file_is_refused_but_print_to_stderr_is_not():
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.constant(1.0)
        tf.print(x, name="ok")
        tf.print(x, output_stream="file:///tmp/leak", name="leak")
    found = safety.graph_findings(g.as_graph_def())
    assert [(f.what, "file:///tmp/leak" in f.why) for f in found] == [("PrintV2", True)]


def test_every_file_like_op_in_this_tensorflow_is_classified():
    """Repeat the derivation of unsafe_ops against the installed TF: an op with a string input
    or attribute named like a path/URL/address, or a name that says it does I/O, is either
    refused or reviewed safe."""
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    ops = op_def_pb2.OpList()
    ops.ParseFromString(c_api.TF_GetBuffer(c_api.TF_GetAllOpList()))
    words = re.compile(r"file|path|prefix|dir|pattern|url|logdir|dump_root|stream|source|shard|"
                       r"address|protocol|target|region|library", re.I)
    names = re.compile(r"File|Reader|Save|Restore|Summary|Writer|PyFunc|Record|Checkpoint|Dump|"
                       r"Debug|Rpc|Sql|LMDB|Snapshot|Cache|Print|Library|Remote|DataService|"
                       r"Load")
    flagged = set()
    for op in ops.op:
        strings = [a.name for a in op.input_arg if a.type == 7]
        strings += [a.name for a in op.attr if a.type in ("string", "list(string)")]
        if names.search(op.name) or any(words.search(s) for s in strings):
            flagged.add(op.name)
    assert sorted(flagged - UNSAFE_OPS - REVIEWED_SAFE - set(CONDITIONAL_OPS)) == []
    assert sorted(REVIEWED_SAFE - flagged) == []  # the reviewed list is exactly what was flagged
