"""Bad input gets exit 2 and one line `error: ...`, no traceback, and inputs stay untouched."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest


def _digest(path: Path) -> str:
    if path.is_dir():
        h = hashlib.sha256()
        for p in sorted(path.rglob("*")):
            if p.is_file():
                h.update(p.name.encode())
                h.update(p.read_bytes())
        return h.hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_FILES = {
    "garbage.keras": (b"\x00\x01garbage bytes, not a zip" * 8, "not a zip archive"),
    "text.h5": (b"this is a text file, not HDF5\n", "not an HDF5 file"),
    "empty.pb": (b"", "GraphDef"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_corrupt_model_files_are_refused_and_untouched(tmp_path, cli, name):
    data, needle = BAD_FILES[name]
    path = _write(tmp_path / name, data)
    before = _digest(path)
    code, _, err = cli("inspect", path)
    _assert_one_line_error(code, err, needle)
    assert _digest(path) == before


def test_truncated_pb_is_refused(tmp_path, cli, samples):
    data = samples["graphdef"].read_bytes()
    path = _write(tmp_path / "truncated.pb", data[: len(data) // 2])
    before = _digest(path)
    code, _, err = cli("inspect", path)
    _assert_one_line_error(code, err, "GraphDef")
    assert _digest(path) == before


def test_truncated_keras_zip_is_refused(tmp_path, cli, samples):
    data = samples["keras"].read_bytes()
    path = _write(tmp_path / "cut.keras", data[: len(data) // 3])
    code, _, err = cli("inspect", path)
    _assert_one_line_error(code, err, "cut.keras")


def test_empty_directory_is_not_a_saved_model(tmp_path, cli):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("inspect", tmp_path / "empty")
    _assert_one_line_error(code, err, "not a SavedModel")


def test_missing_path(tmp_path, cli):
    code, _, err = cli("inspect", tmp_path / "nope.keras")
    _assert_one_line_error(code, err, "no such file")


def test_lambda_layer_needs_unsafe(tmp_path, cli):
    import keras

    inp = keras.Input((4,), name="x")
    out = keras.layers.Lambda(lambda t: t * 2.0)(inp)
    keras.Model(inp, out).save(tmp_path / "lam.keras")
    before = _digest(tmp_path / "lam.keras")
    code, _, err = cli("inspect", tmp_path / "lam.keras")
    _assert_one_line_error(code, err, "Lambda", "--unsafe")
    assert _digest(tmp_path / "lam.keras") == before
    code, out, _ = cli("inspect", tmp_path / "lam.keras", "--unsafe")
    assert code == 0 and "Mul" in out


def test_lambda_layer_in_h5_needs_unsafe(tmp_path, cli):
    import keras

    inp = keras.Input((4,), name="x")
    out = keras.layers.Lambda(lambda t: t * 2.0)(inp)
    keras.Model(inp, out).save(tmp_path / "lam.h5")
    code, _, err = cli("inspect", tmp_path / "lam.h5")
    _assert_one_line_error(code, err, "Lambda", "--unsafe")


def test_unknown_input_shape_name(cli, samples):
    code, _, err = cli("inspect", samples["keras"], "--input-shape", "nope:1,2")
    _assert_one_line_error(code, err, "nope", "image")


def test_malformed_input_shape(cli, samples):
    code, _, err = cli("inspect", samples["keras"], "--input-shape", "image:1,x")
    _assert_one_line_error(code, err, "integers")


def test_ambiguous_graph_outputs_need_flag(tmp_path, cli):
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (1, 4), name="x")
        tf.nn.relu(x, name="a")
        tf.nn.sigmoid(x, name="b")
    path = tmp_path / "two.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    code, _, err = cli("inspect", path)
    _assert_one_line_error(code, err, "--outputs")
    code, out, _ = cli("inspect", path, "--outputs", "a")
    assert code == 0 and "Relu" in out


def test_checkpoint_without_meta(tmp_path, cli, samples):
    src = samples["checkpoint"].parent
    dst = tmp_path / "ck"
    shutil.copytree(src, dst)
    (dst / "model.ckpt.meta").unlink()
    code, _, err = cli("run", dst / "model.ckpt", "--target", "tflite", "-o", tmp_path / "o")
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err


def test_usage_errors_are_one_line(cli):
    code, _, err = cli("inspect")
    _assert_one_line_error(code, err, "model")


def _with_activation(src: Path, dst: Path, activation: dict) -> Path:
    """``src`` (a .keras zip) with its layer 'act' given another activation in config.json."""
    import json
    import zipfile

    with zipfile.ZipFile(src) as z:
        files = {n: z.read(n) for n in z.namelist()}
    config = json.loads(files["config.json"])
    for layer in config["config"]["layers"]:
        if layer["config"]["name"] == "act":
            layer["config"]["activation"] = activation
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return dst


@pytest.mark.parametrize("function,needle", [
    ("tile", "tile() missing 1 required positional argument"),   # an activation missing its args
    ("concatenate", "symbolic `tf.Tensor` as a Python `bool`")])  # one that is not elementwise
def test_a_layer_keras_cannot_call_is_bad_input_naming_it(tmp_path, cli, function, needle):
    """The model loads, then one of its layers fails when Keras calls it: the user's model is
    broken (exit 2 naming the layer and Keras's message), not a bug in rewriter (exit 3)."""
    import keras

    inp = keras.Input((8,))
    out = keras.layers.Dense(3)(keras.layers.Activation("relu", name="act")(
        keras.layers.Dense(4)(inp)))
    keras.Model(inp, out).save(tmp_path / "base.keras")
    bad = _with_activation(tmp_path / "base.keras", tmp_path / "bad.keras", {
        "module": "keras.ops", "class_name": "function", "config": function,
        "registered_name": None})
    before = _digest(bad)
    code, _, err = cli("check", bad, "--target", "edgetpu")
    _assert_one_line_error(code, err, "Keras cannot call the model", "Activation", needle)
    assert _digest(bad) == before
