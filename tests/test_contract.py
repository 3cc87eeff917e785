"""The contract under bad input and faults: exit 0/1/2/3, one ``error:`` line, no traceback, no
signal exit, inputs byte-identical, OUT complete or previous (never a mix), modes by the umask.

Each test reproduces a case that broke before (issue 14): a string input, a zero-size
dimension, a huge --input-shape (SIGSEGV in inspect), an Inf or extreme weight (SIGSEGV in the
int8 quantizer, a lone saved_model/ left in OUT), a read-only or full output directory, -o below
a file, a bad --map group, two writers on one OUT, restore over its own input.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")) if path.is_dir() else [path]:
        if p.is_file():
            h.update(str(p.relative_to(path) if path.is_dir() else p.name).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _one_error(err: str, *needles: str) -> str:
    from rewriter.ui import is_progress_line  # steps that finished print a line off a terminal

    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not is_progress_line(ln)]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _rewrite(*args: object, env: dict[str, str] | None = None, **kw: object
             ) -> subprocess.CompletedProcess:
    """The real console entry (supervised), as a user runs it."""
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "rewriter", *map(str, args)], env=full_env,
                          capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    import keras

    inp = keras.Input((6, 6, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)
    out = keras.layers.Dense(2, name="head")(keras.layers.GlobalAveragePooling2D()(x))
    path = tmp_path_factory.mktemp("small") / "small.keras"
    keras.Model(inp, out).save(path)
    return path


def _with_weight(src: Path, dst: Path, value: float) -> Path:
    import keras

    model = keras.saving.load_model(src)
    kernel, bias = model.get_layer("conv").get_weights()
    kernel.flat[0] = value
    model.get_layer("conv").set_weights([kernel, bias])
    model.save(dst)
    return dst


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("value, needle", [(np.inf, "non-finite"), (3e38, "beyond 1e+30")])
def test_inf_or_extreme_weight_is_exit_2_naming_the_tensor(cli, small, tmp_path, value, needle):
    path = _with_weight(small, tmp_path / "bad.keras", value)
    before = _digest(path)
    code, _, err = cli("run", path, "--target", "edgetpu", "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, needle, "convolution", "--quantize none")
    assert not (tmp_path / "out").exists()
    assert _digest(path) == before


def test_inf_in_calibration_data_is_exit_2(cli, small, tmp_path):
    cal = np.random.default_rng(0).uniform(-1, 1, (4, 6, 6, 3)).astype(np.float32)
    cal[1, 0, 0, 0] = np.inf
    np.save(tmp_path / "cal.npy", cal)
    code, _, err = cli("run", small, "--target", "edgetpu", "--calibration", tmp_path / "cal.npy",
                       "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "cal.npy")
    assert not (tmp_path / "out").exists()


def test_corrupt_checkpoint_data_is_exit_2_not_a_bug(samples, tmp_path):
    """A checkpoint whose data file fails TensorFlow's checksum (DataLossError) is a corrupt
    input: exit 2 saying so (the slow fuzz found `rewrite inspect` calling it an internal
    error)."""
    import shutil

    src = samples["checkpoint"]
    for f in src.parent.glob(src.name + ".*"):
        shutil.copy(f, tmp_path / f.name)
    data = next(tmp_path.glob(src.name + ".data-*"))
    buf = bytearray(data.read_bytes())
    for i in range(0, len(buf), max(1, len(buf) // 16)):
        buf[i] ^= 0x5A
    data.write_bytes(bytes(buf))
    r = _rewrite("inspect", tmp_path / src.name)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "internal error" not in r.stderr
    assert "Traceback" not in r.stderr


def test_huge_input_shape_is_exit_2_even_in_inspect(tmp_path):
    """It used to kill `rewrite inspect` with SIGSEGV (Grappler freezing at that shape)."""
    import keras

    inp = keras.Input((None, None, 3), name="image")
    model = keras.Model(inp, keras.layers.Conv2D(4, 3, padding="same")(inp))
    model.save(tmp_path / "dyn.keras")
    proc = _rewrite("inspect", tmp_path / "dyn.keras", "--input-shape",
                    "image:1,100000,100000,3")
    assert proc.returncode == 2, proc.stderr
    _one_error(proc.stderr, "image", "GiB", "--input-shape")


def test_intermediate_too_large_for_memory_is_exit_2(cli, tmp_path):
    """A small input can still make a tensor that cannot fit: estimated before freezing."""
    import keras

    inp = keras.Input((None, None, 3), name="image")
    model = keras.Model(inp, keras.layers.Conv2D(4096, 1)(inp))
    model.save(tmp_path / "wide.keras")
    code, _, err = cli("inspect", tmp_path / "wide.keras", "--input-shape",
                       "image:1,8192,8192,3")
    assert code == 2
    _one_error(err, "alone needs", "GiB of memory are available")


def _saved_model(path: Path, spec, fn) -> Path:
    import tensorflow as tf

    module = tf.Module()
    module.f = tf.function(fn, input_signature=[spec])
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.f})
    return path


def test_string_input_is_exit_2_with_what_to_do(cli, tmp_path):
    import tensorflow as tf

    sm = _saved_model(tmp_path / "str", tf.TensorSpec([1], tf.string, name="s"),
                      lambda s: {"y": tf.strings.to_number(s)})
    code, _, err = cli("run", sm, "--target", "tflite", "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "'s' is a string tensor", "numeric input")
    code, out, _ = cli("inspect", sm)  # inspecting it is fine
    assert code == 0 and "StringToNumber" in out


def test_zero_size_dimension_is_exit_2(cli, tmp_path):
    import tensorflow as tf

    sm = _saved_model(tmp_path / "zero", tf.TensorSpec([1, 0, 3], tf.float32, name="x"),
                      lambda x: {"y": tf.reduce_sum(x, axis=1) + 1.0})
    code, _, err = cli("run", sm, "--target", "tflite", "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "zero-size dimension", "--input-shape")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("opset", ["2", "99", "x"])
def test_opset_outside_the_supported_range_is_a_usage_error(cli, samples, tmp_path, opset):
    code, _, err = cli("run", samples["keras"], "--target", "onnx", "--opset", opset,
                       "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "--opset")
    assert not (tmp_path / "out").exists()


def test_supported_opset_range_matches_the_converters():
    import tf2onnx.constants

    from rewriter.export.onnx import OPSET_MAX, OPSET_MIN

    assert OPSET_MAX == max(tf2onnx.constants.OPSET_TO_IR_VERSION)
    assert OPSET_MIN == 7  # ONNX Runtime's oldest implemented opset


# ----------------------------------------------------------------------------- output paths
def test_o_below_a_file_is_exit_2(cli, samples, tmp_path):
    (tmp_path / "afile").write_text("x")
    code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o",
                       tmp_path / "afile" / "out")
    assert code == 2
    _one_error(err, "below the file")


@pytest.mark.parametrize("where", ["equal", "inside", "containing"])
def test_o_equal_inside_or_containing_an_input_is_refused(cli, samples, tmp_path, where):
    sm = tmp_path / "models" / "sm"
    shutil.copytree(samples["saved_model"], sm)
    before = _digest(tmp_path / "models")
    out = {"equal": sm, "inside": sm / "out", "containing": tmp_path / "models"}[where]
    code, _, err = cli("run", sm, "--target", "tflite", "-o", out)
    assert code == 2
    _one_error(err, "inputs are never outputs")
    assert _digest(tmp_path / "models") == before


def test_existing_directory_with_foreign_files_is_not_replaced(cli, samples, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o", out)
    assert code == 2
    _one_error(err, "notes.txt")
    assert (out / "notes.txt").read_text() == "keep me"


def test_unwritable_output_directory_is_exit_2(cli, samples, tmp_path, monkeypatch):
    """A read-only (or full) file system: simulated, since tests may run as root."""
    from rewriter.host import fs as fsutil

    def refuse(*_args, **_kw):
        raise PermissionError(errno.EROFS, "Read-only file system", str(tmp_path))

    monkeypatch.setattr(fsutil, "make_temp_dir", refuse)
    code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "Read-only file system", "-o")


def test_full_disk_mid_run_is_exit_2_and_out_keeps_the_previous_run(cli, samples, tmp_path):
    """Writes fail with 'File too large' (RLIMIT_FSIZE, like a full disk) after the run
    started: one error line, exit 2, OUT still the previous complete run."""
    import resource

    out = tmp_path / "out"
    assert cli("run", samples["keras"], "--target", "tflite", "-o", out)[0] == 0
    before = _digest(out)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, limits[1]))
    try:
        code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o", out)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    assert code == 2
    _one_error(err, "File too large")
    assert _digest(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


# ----------------------------------------------------------------------------- output sets
def test_second_writer_on_the_same_out_is_refused(cli, samples, tmp_path):
    from rewriter.host.fs import staged_output

    with staged_output(tmp_path / "out", command="test"):
        code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o", tmp_path / "out")
    assert code == 2
    _one_error(err, "being written by another rewrite")


def test_failed_run_leaves_the_previous_out_whole(cli, samples, tmp_path, monkeypatch):
    out = tmp_path / "out"
    code, _, _ = cli("run", samples["keras"], "--target", "tflite", "-o", out)
    assert code == 0
    before = _digest(out)
    import rewriter.report.build

    def boom(*_a, **_kw):
        raise RuntimeError("simulated bug after the model files were written")

    monkeypatch.setattr(rewriter.report.build, "write_reports", boom)
    code, _, err = cli("run", samples["keras"], "--target", "tflite", "-o", out)
    assert code == 3
    line = _one_error(err, "internal error", "RuntimeError", "simulated bug")
    log = Path(line.rsplit("traceback kept at ", 1)[1].rstrip(")"))
    assert "Traceback" in log.read_text() and "in boom" in log.read_text()
    assert _digest(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_run_killed_before_the_swap_leaves_the_previous_out(tmp_path):
    """kill -9 in the middle of writing: OUT is the previous set; the next run cleans up."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("previous")
    script = f"""
import os, signal
from rewriter.host.fs import staged_output
with staged_output({str(out)!r}, owned=["*"]) as stage:
    (stage.path / "model.tflite").write_text("new")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], env=dict(os.environ,
                          PYTHONPATH=str(ROOT)), timeout=120)
    assert proc.returncode == -9
    assert sorted(p.name for p in out.iterdir()) == ["report.json"]
    assert (out / "report.json").read_text() == "previous"
    from rewriter.host.fs import staged_output

    with staged_output(out, owned=["*"]) as stage:
        (stage.path / "report.json").write_text("next")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # stale staging removed
    assert (out / "report.json").read_text() == "next"


def test_outputs_honour_the_umask(cli, samples, tmp_path):
    old = os.umask(0o027)
    try:
        code, _, _ = cli("run", samples["keras"], "--target", "tflite", "-o", tmp_path / "out")
    finally:
        os.umask(old)
    assert code == 0
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in [tmp_path / "out", *(tmp_path / "out").rglob("*")]}
    wrong = {p: oct(m) for p, m in modes.items()
             if m != (0o750 if (tmp_path / p).is_dir() else 0o640)}
    assert "out/model.tflite" in modes and "out/saved_model" in modes
    assert wrong == {}


# ----------------------------------------------------------------------------- restore
def test_restore_into_a_saved_model_over_itself_is_refused(cli, samples, tmp_path):
    sm = tmp_path / "sm"
    shutil.copytree(samples["saved_model"], sm)
    before = _digest(sm)
    code, _, err = cli("restore", sm, "--into", sm, "-o", sm)
    assert code == 2
    _one_error(err, "inputs are never outputs")
    assert _digest(sm) == before


def test_tf1_restore_writes_inside_out_and_nothing_beside(cli, samples, tmp_path):
    src = tmp_path / "ck"
    shutil.copytree(samples["checkpoint"].parent, src)
    (tmp_path / "checkpoint").write_text("the user's own state file")
    code, _, err = cli("restore", src / "model.ckpt", "--into", src / "model.ckpt.meta",
                       "-o", tmp_path / "out")
    assert code == 0, err
    assert (tmp_path / "checkpoint").read_text() == "the user's own state file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint", "ck", "out"]
    assert {"checkpoint", "model.ckpt.index", "model.ckpt.meta"} <= {
        p.name for p in (tmp_path / "out").iterdir()}


def test_restoring_nothing_is_exit_1_unless_expected(cli, samples, tmp_path):
    src = samples["checkpoint"]
    meta = str(src) + ".meta"
    code, _, err = cli("restore", src, "--into", meta, "-o", tmp_path / "out", "--map",
                       "re:^(.*)$=elsewhere/\\1")
    assert code == 1 and "nothing written" in err
    assert not (tmp_path / "out").exists()
    code, _, _ = cli("restore", src, "--into", meta, "-o", tmp_path / "out", "--map",
                     "re:^(.*)$=elsewhere/\\1", "--allow-empty")
    assert code == 0 and (tmp_path / "out" / "model.ckpt.index").exists()


@pytest.mark.parametrize("rule, needle", [("re:^(model)=\\3", "invalid group reference"),
                                          ("re:^(model)=\\q", "bad escape"),
                                          ("re:^.*$=", "empty name")])
def test_bad_map_replacement_is_exit_2(cli, samples, tmp_path, rule, needle):
    src = samples["checkpoint"]
    code, _, err = cli("restore", src, "--into", str(src) + ".meta", "-o", tmp_path / "out",
                       "--map", rule)
    assert code == 2
    _one_error(err, needle)


# ----------------------------------------------------------------------------- crashes
def test_converter_crash_is_exit_3_naming_the_stage(cli, small, tmp_path, monkeypatch):
    """If a value the validation misses crashes the converter, the crash stays in the worker
    process: an internal error naming the stage, the log kept, this process alive, OUT not
    created. (Here the weight check is switched off so an Inf weight reaches the quantizer.)"""
    import rewriter.export.tflite
    import rewriter.export.validate

    path = _with_weight(small, tmp_path / "inf.keras", np.inf)
    for module in (rewriter.export.tflite, rewriter.export.validate):
        monkeypatch.setattr(module, "check_weights", lambda model, **_: None)
    code, _, err = cli("run", path, "--target", "edgetpu", "-o", tmp_path / "out")
    assert code == 3
    line = _one_error(err, "internal error", "TFLite conversion (int8)", "SIGSEGV",
                      "log kept at")
    assert "Fatal Python error" in Path(line.rsplit("log kept at ", 1)[1]).read_text()
    assert not (tmp_path / "out").exists()
    code, _, _ = cli("run", small, "--target", "edgetpu", "-o", tmp_path / "next")
    assert code in (0, 1)  # a new worker serves the next conversion


def test_native_crash_anywhere_is_exit_3_with_the_stage(samples, tmp_path):
    """A signal in the work process (here SIGSEGV sent once TensorFlow is imported) becomes one
    line naming the stage and a kept log, from the supervising `rewrite` process."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os, signal, sys, threading, time\n"
        "def _later():\n"
        "    while 'tensorflow' not in sys.modules:\n"
        "        time.sleep(0.05)\n"
        "    time.sleep(1)\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "if os.environ.get('REWRITER_SUPERVISOR_DIR'):\n"
        "    threading.Thread(target=_later, daemon=True).start()\n")
    env = {"PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-m", "rewriter", "run", str(samples["keras"]),
                           "--target", "tflite", "-o", str(tmp_path / "out")],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 3, proc.stderr
    line = _one_error(proc.stderr, "internal error", "SIGSEGV", "while", "log kept at")
    assert "Fatal Python error" in Path(line.rsplit("log kept at ", 1)[1]).read_text()
    assert not (tmp_path / "out").exists()


#: Loaded in the supervised child only (``sitecustomize``): records every process it starts
#: (argv, one per line, in $SPAWNED) and, with $NO_WEIGHT_CHECK, switches the weight check off
#: so an Inf weight reaches the int8 quantizer (which dies by SIGSEGV on it).
_CHILD_HOOK = """
import os, subprocess
if os.environ.get("REWRITER_SUPERVISOR_DIR"):
    _init = subprocess.Popen.__init__
    def _recording(self, args, *a, **kw):
        with open(os.environ["SPAWNED"], "a") as f:
            f.write(repr(args) + "\\n")
        _init(self, args, *a, **kw)
    subprocess.Popen.__init__ = _recording
    if os.environ.get("NO_WEIGHT_CHECK"):
        import rewriter.export.tflite, rewriter.export.validate
        for _m in (rewriter.export.tflite, rewriter.export.validate):
            _m.check_weights = lambda model, **_: None
"""


def _hooked(tmp_path: Path, **env: str) -> tuple[dict[str, str], Path]:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_CHILD_HOOK)
    spawned = tmp_path / "spawned.txt"
    spawned.write_text("")
    return {"PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)]), "SPAWNED": str(spawned),
            **env}, spawned


def test_supervised_job_converts_in_process(small, tmp_path):
    """The supervised job converts in its own process: no converter worker (a second
    TensorFlow process, ~1 GB more at the peak) is started, and the artifact is written."""
    env, spawned = _hooked(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "rewriter", "run", str(small), "--target",
                           "edgetpu", "-o", str(tmp_path / "out"), "--json"],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode in (0, 1), proc.stderr
    assert "rewriter.host.isolate" not in spawned.read_text()
    import json

    report = json.loads(proc.stdout)  # nothing the converter printed reached stdout
    assert report["target"] == "edgetpu"
    assert (tmp_path / "out" / "model.tflite").stat().st_size > 1000


def test_converter_crash_in_the_supervised_job_is_exit_3_naming_the_stage(small, tmp_path):
    """Converting in-process, a converter crash kills the supervised child: the parent reports
    it as the same one line, exit 3 naming the conversion stage, the log kept (with the stack
    dump), OUT not created."""
    path = _with_weight(small, tmp_path / "inf.keras", np.inf)
    env, spawned = _hooked(tmp_path, NO_WEIGHT_CHECK="1")
    proc = subprocess.run([sys.executable, "-m", "rewriter", "run", str(path), "--target",
                           "edgetpu", "-o", str(tmp_path / "out")],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 3, proc.stderr
    line = _one_error(proc.stderr, "internal error", "SIGSEGV",
                      "while TFLite conversion (int8)", "log kept at")
    kept = Path(line.rsplit("log kept at ", 1)[1]).read_text()
    assert "Fatal Python error" in kept
    assert "=== rewriter-request-" in kept  # what the converter wrote before it died
    assert "rewriter.host.isolate" not in spawned.read_text()
    assert not (tmp_path / "out").exists()


_QUANTIZE_ONE = """
import sys
import numpy as np
import keras
import tensorflow as tf

inp = keras.Input((8, 8, 3))
x = keras.layers.ReLU()(keras.layers.Conv2D(4, 3, padding="same")(inp))
model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.GlobalAveragePooling2D()(x)))
value, where = float(sys.argv[1]), sys.argv[2]
if where == "weight":
    kernel, bias = model.layers[1].get_weights()
    kernel.flat[0] = value
    model.layers[1].set_weights([kernel, bias])
data = np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 3)).astype(np.float32)
if where == "data":
    data.flat[0] = value
conv = tf.lite.TFLiteConverter.from_keras_model(model)
conv.optimizations = [tf.lite.Optimize.DEFAULT]
conv.representative_dataset = lambda: ([d[None]] for d in data)
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
conv.inference_input_type = conv.inference_output_type = tf.int8
conv.convert()
"""


@pytest.mark.slow
@pytest.mark.parametrize("value, where, dies", [
    ("1e37", "weight", False), ("1e38", "weight", True), ("inf", "weight", True),
    ("3.4e38", "data", False), ("inf", "data", True)])
def test_the_int8_quantizer_crashes_where_validate_says(value, where, dies):
    """The measurement behind rewriter.export.validate: the plain TF converter (full int8 with
    int8 I/O, conv/ReLU/pool/dense, in a child process) dies by a signal on these values and
    converts the others. If a TF
    upgrade changes this, MAX_ABS and its docstring should follow."""
    proc = subprocess.run([sys.executable, "-c", _QUANTIZE_ONE, value, where],
                          capture_output=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert (proc.returncode < 0) == dies, (proc.returncode, proc.stderr[-500:])
    assert dies or proc.returncode == 0


def test_interrupt_while_the_command_modules_import_is_one_line_exit_2(monkeypatch, capsys):
    import rewriter.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["check", "model.keras"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: interrupted while ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_interrupt_before_the_supervised_child_exists_reaches_it(monkeypatch):
    """A Ctrl-C that comes while the supervisor starts its child is passed on to the child
    (not a traceback in the supervisor, not lost)."""
    import signal
    import time

    from rewriter.host import supervise

    real = subprocess.Popen
    child = ("import time\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
             "    raise SystemExit(2)\n")

    def popen(argv, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # lands before the child exists
        return real([sys.executable, "-c", child], **kwargs)

    monkeypatch.setattr(subprocess, "Popen", popen)
    # Python's own Ctrl-C handler, as in a shell (a pytest-xdist worker starts with SIGINT ignored).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        start = time.monotonic()
        assert supervise.supervise(["check", "model.keras"]) == 2
        assert time.monotonic() - start < 30
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
