"""Faults in the middle (issue 27): memory bombs refused before a read, no silent casts of user
data, and (below) process trees that die together. Each test asserts the state afterwards, not
only the exit code."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def _rewrite(*args: object, limit_as: int | None = None, timeout: float = 600
             ) -> subprocess.CompletedProcess:
    """The real console entry (supervised), optionally under an address-space limit."""
    def preexec() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "rewriter", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=preexec)


def _error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ----------------------------------------------------------------------------- sizes before reads
@pytest.fixture(scope="module")
def tf_keras_h5(tmp_path_factory) -> Path:
    import tf_keras

    inp = tf_keras.Input((4,), name="x")
    model = tf_keras.Model(inp, tf_keras.layers.Dense(2, name="dense")(inp))
    path = tmp_path_factory.mktemp("h5") / "small.h5"
    model.save(path)
    return path


def _bomb(src: Path, dst: Path) -> Path:
    """``src`` with its Dense kernel replaced by a dataset declaring 2^15 x 2^16 float32 (8 GiB)
    that was never written: HDF5 allocates no chunk, so the file stays a few KB."""
    import h5py

    dst.write_bytes(src.read_bytes())
    with h5py.File(dst, "r+") as f:
        name = "model_weights/dense/dense/kernel:0"
        del f[name]
        f.create_dataset(name, shape=(2**15, 2**16), dtype="f4", chunks=(256, 256))
    return dst


def test_declared_8_gib_h5_is_refused_under_a_1_gb_address_space(tf_keras_h5, tmp_path):
    bomb = _bomb(tf_keras_h5, tmp_path / "bomb.h5")
    assert bomb.stat().st_size < 64 * 1024
    before = bomb.read_bytes()
    out = tmp_path / "out"
    for args in (("inspect", bomb), ("run", bomb, "--target", "tflite", "-o", out)):
        proc = _rewrite(*args, limit_as=GIB)
        assert proc.returncode == 2, proc.stderr
        line = _error_line(proc.stderr)
        assert "HDF5 dataset 'model_weights/dense/dense/kernel:0' declares 8 GiB" in line, line
    assert bomb.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["bomb.h5"]  # no OUT, no lock, no staging


@pytest.fixture()
def tiny_budget(monkeypatch):
    """A budget of 1 KiB: every real file is over it, so each loader's check is seen."""
    import rewriter.frontends.sizes as sizes

    monkeypatch.setattr(sizes, "budget", lambda: 1024)


def test_keras_zip_members_are_measured_before_they_are_read(cli, tmp_path, tiny_budget):
    import keras

    inp = keras.Input((64,), name="x")
    path = tmp_path / "m.keras"
    keras.Model(inp, keras.layers.Dense(64, name="d")(inp)).save(path)
    code, _, err = cli("inspect", path)
    assert code == 2
    assert "the archive member 'model.weights.h5' declares" in _error_line(err)


def test_checkpoint_variables_are_measured_from_the_index(cli, tmp_path, tiny_budget):
    import tensorflow as tf

    ckpt = tf.train.Checkpoint(big=tf.Variable(np.zeros((64, 64), np.float32)))
    prefix = ckpt.write(str(tmp_path / "ckpt"))
    code, _, err = cli("inspect", prefix)
    assert code == 2
    assert "the variable 'big/.ATTRIBUTES/VARIABLE_VALUE' declares 16 KiB" in _error_line(err)


def test_saved_model_variables_are_measured_before_loading(cli, tmp_path, tiny_budget):
    import tensorflow as tf

    module = tf.Module()
    module.w = tf.Variable(np.ones((32, 32), np.float32))
    module.f = tf.function(lambda x: tf.matmul(x, module.w),
                           input_signature=[tf.TensorSpec([1, 32], tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.f)
    code, _, err = cli("inspect", tmp_path / "sm")
    assert code == 2
    line = _error_line(err)
    assert "the variable 'w/.ATTRIBUTES/VARIABLE_VALUE' declares 4 KiB" in line, line


# ----------------------------------------------------------------------------- data types
def _convert(values, src, dst):
    from rewriter.verify.dtypes import convert

    return convert(np.asarray(values, src), np.dtype(dst), "d.npy", "x")


def test_exact_conversions_are_made_and_said():
    out, how = _convert([0, 2**24, -(2**24)], np.int64, np.float32)
    assert out.dtype == np.float32 and out.tolist() == [0, 2**24, -(2**24)]
    assert how.exact and how.file_dtype == "int64" and not how.warning
    out, how = _convert([True, False], np.bool_, np.float32)
    assert out.tolist() == [1.0, 0.0] and how.exact
    out, how = _convert([0.5, 2.0**100], np.float64, np.float32)
    assert how.exact and out.tolist() == [0.5, 2.0**100]


def test_int64_beyond_2_24_is_converted_with_the_error_it_made():
    big = 4 * 10**18 + 1
    out, how = _convert([big, 3], np.int64, np.float32)
    assert not how.exact and "beyond +-2^24" in how.warning
    err = abs(int(out[0]) - big)  # float32(4e18+1) is 3999999937226997760: 62773002241 off
    assert err == 62773002241 and f"{float(err):.6g}" in how.warning


def test_float64_within_float32_range_is_rounded_with_a_note():
    out, how = _convert([0.1, -3.3], np.float64, np.float32)
    assert np.array_equal(out, np.asarray([0.1, -3.3], np.float32))
    assert not how.exact and not how.warning and "relative error at most 5.96e-08" in how.note


@pytest.mark.parametrize("values, src, dst, needle", [
    ([1e39], np.float64, np.float32, "beyond float32's range"),
    ([1 + 2j], np.complex64, np.float32, "complex64 is not a real number type"),
    ([0.5], np.float32, np.int32, "non-integral values"),
    ([2**40], np.int64, np.int32, "outside int32's range"),
    ([2], np.int64, np.bool_, "other than 0 and 1"),
])
def test_conversions_that_change_values_are_refused(values, src, dst, needle):
    from rewriter.errors import UserError

    with pytest.raises(UserError, match=needle):
        _convert(values, src, dst)


@pytest.fixture(scope="module")
def dense_keras(tmp_path_factory) -> Path:
    import keras

    inp = keras.Input((4,), name="x")
    path = tmp_path_factory.mktemp("dense") / "dense.keras"
    keras.Model(inp, keras.layers.Dense(2, name="d")(inp)).save(path)
    return path


def test_int64_data_beyond_2_24_is_a_warning_in_the_summary_and_report(cli, dense_keras,
                                                                        tmp_path):
    import json

    data = tmp_path / "big.npy"
    np.save(data, np.asarray([[4 * 10**18, 1, 2, 3]] * 2, np.int64))
    out = tmp_path / "out"
    code, stdout, err = cli(dense_keras, "--target", "tflite", "--data", data, "-o", out)
    assert code in (0, 1), err
    warning = "int64 data into a float32 input: values beyond +-2^24"
    assert warning in stdout + err
    report = json.loads((out / "report.json").read_text())
    section = report["data"]["verification"]
    assert section["inputs"]["x"]["file_dtype"] == "int64"
    assert section["inputs"]["x"]["dtype"] == "float32"
    assert any(warning in w for w in section["warnings"]) and \
        any(warning in w for w in report["warnings"])


def test_float64_data_beyond_float32_is_refused_and_nothing_written(cli, dense_keras, tmp_path):
    data = tmp_path / "huge.npy"
    np.save(data, np.asarray([[1e39, 0, 0, 0]], np.float64))
    out = tmp_path / "out"
    code, _, err = cli(dense_keras, "--target", "tflite", "--data", data, "-o", out)
    assert code == 2
    assert "float64 data into a float32 input: holds values beyond float32's range" in \
        _error_line(err)
    assert sorted(os.listdir(tmp_path)) == ["huge.npy"]


# ----------------------------------------------------------------------------- documented refusals
def test_every_batch_manifest_refusal_is_in_the_readme_and_the_help(cli):
    from rewriter.commands.batch import REFUSALS

    readme = (ROOT / "README.md").read_text()
    code, stdout, _ = cli("batch", "--help")
    assert code == 0
    flat = " ".join(stdout.split())
    for refusal in REFUSALS:
        assert f"* {refusal}\n" in readme, refusal
        assert " ".join(refusal.split()) in flat, refusal
    assert "give one of them a `name`" in flat


def test_two_jobs_writing_one_directory_are_refused_naming_name(cli, dense_keras, tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[job]]\nmodel = "{dense_keras}"\ntarget = "tflite"\n'
                        f'[[job]]\nmodel = "{dense_keras}"\ntarget = "tflite"\n')
    code, _, err = cli("batch", manifest, "-o", tmp_path / "out")
    assert code == 2
    assert "two jobs write dense-tflite/" in _error_line(err) and "`name`" in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- process trees
def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for init to reap it does not run)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.add(c)
            todo.append(c)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _wait_for(what: str, predicate, proc: subprocess.Popen, timeout: float = 300):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        assert proc.poll() is None, f"the job ended ({proc.returncode}) before {what}"
        time.sleep(0.05)
    raise AssertionError(f"no {what} within {timeout} s")


def _previous_run(out: Path) -> dict[str, bytes]:
    """OUT as a finished earlier run left it (its marker and a report)."""
    out.mkdir()
    (out / ".rewriter.json").write_text('{"written_by": "rewriter", "command": "run"}\n')
    (out / "report.json").write_text('{"previous": true}\n')
    return {p.name: p.read_bytes() for p in out.iterdir()}


def _start(*args: object, env: dict[str, str] | None = None) -> subprocess.Popen:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "rewriter", *map(str, args)], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def conv_keras(tmp_path_factory) -> Path:
    import keras

    inp = keras.Input((6, 6, 3), name="image")
    x = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inp)
    out = keras.layers.Dense(2, name="head")(keras.layers.GlobalAveragePooling2D()(x))
    path = tmp_path_factory.mktemp("conv") / "conv.keras"
    keras.Model(inp, out).save(path)
    return path


def test_kill_9_of_rewrite_mid_run_leaves_no_process_and_the_previous_out(conv_keras, tmp_path):
    """kill -9 of the supervising `rewrite` while its job works: 5 s later no process of the
    job runs, and OUT holds the previous run (the job did not finish and swap its own in)."""
    import signal
    import time

    out = tmp_path / "out"
    before = _previous_run(out)
    proc = _start("run", conv_keras, "--target", "tflite", "-o", out)
    _wait_for("staging directory", lambda: list(tmp_path.glob(".out.staging-*")), proc)
    tree = _descendants(proc.pid)
    assert any("rewriter.cli" in _cmdline(p) for p in tree), [_cmdline(p) for p in tree]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    time.sleep(5)
    assert [(p, _cmdline(p)) for p in tree if _alive(p)] == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    # what SIGKILL cannot clean (the staging directory) the next writer removes under the lock
    from rewriter.host.fs import staged_output

    with staged_output(out, command="run") as stage:
        stage.discard()
    assert sorted(os.listdir(tmp_path)) == ["out"]


#: Loaded by every Python process of the job (sitecustomize): Vela announces itself in $VELA_STARTED
#: and then takes 10 minutes, so a test can signal the job while Vela runs.
_SLOW_VELA = """
import os, time
if b"ethosu.vela" in open("/proc/self/cmdline", "rb").read():
    with open(os.environ["VELA_STARTED"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
"""


def test_sigterm_during_vela_stops_vela_and_cleans_lock_and_staging(conv_keras, tmp_path):
    """SIGTERM to `rewrite` while Vela runs: exit 2 'interrupted', and 10 s later Vela and the
    job are gone, no .OUT.lock or .OUT.staging-* is left beside OUT, OUT is the previous run."""
    import signal
    import time

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_SLOW_VELA)
    started = tmp_path / "vela.pid"
    out = tmp_path / "out"
    before = _previous_run(out)
    proc = _start("run", conv_keras, "--target", "ethos-u55-128", "-o", out,
                  env={"PYTHONPATH": os.pathsep.join([str(hook), str(ROOT)]),
                       "VELA_STARTED": str(started)})
    _wait_for("Vela", started.is_file, proc, timeout=600)
    vela = int(_wait_for("Vela's pid", started.read_text, proc))
    tree = _descendants(proc.pid)
    assert vela in tree
    os.kill(proc.pid, signal.SIGTERM)
    time.sleep(10)
    assert proc.poll() == 2, proc.stderr.read() if proc.poll() is not None else "still running"
    assert "error: interrupted" in proc.stderr.read()
    assert [(p, _cmdline(p)) for p in tree if _alive(p)] == []
    assert sorted(os.listdir(tmp_path)) == ["hook", "out", "vela.pid"]
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_job_whose_parent_is_gone_swaps_nothing(tmp_path, monkeypatch):
    """Right before the swap the job checks that the process that started it still lives."""
    from rewriter.errors import UserError
    from rewriter.host import child
    from rewriter.host.fs import staged_output

    out = tmp_path / "out"
    before = _previous_run(out)
    monkeypatch.setattr(child, "_started_by", "1")  # started by a pid that is not our parent
    with pytest.raises(UserError, match="started this job is gone"), \
            staged_output(out, command="run") as stage:
        (stage.path / "report.json").write_text("new")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(os.listdir(tmp_path)) == ["out"]


def test_a_child_dies_with_its_parent_even_by_sigkill(tmp_path):
    """rewriter.host.child.start: a process started by a process killed with SIGKILL dies too
    (PR_SET_PDEATHSIG), its death by signal is said by name."""
    import signal
    import time

    from rewriter.host import child

    script = ("import sys, time\nfrom rewriter.host import child\n"
              "p = child.start([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
              "print(p.pid, flush=True)\ntime.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    grandchild = int(parent.stdout.readline())
    assert _alive(grandchild)
    parent.kill()
    parent.wait()
    time.sleep(1)
    assert not _alive(grandchild)
    assert child.describe(-signal.SIGKILL) == "died with SIGKILL"
    assert child.run([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1).timed_out


def test_restore_from_a_keras_zip_measures_it_before_reading(cli, tmp_path, tiny_budget):
    """restore's fallback that reads a .keras zip's weights directly checks the sizes too."""
    import keras

    inp = keras.Input((64,), name="x")
    path = tmp_path / "src.keras"
    keras.Model(inp, keras.layers.Dense(64, name="d")(inp)).save(path)
    code, _, err = cli("restore", path, "--into", path, "-o", tmp_path / "out")
    assert code == 2
    assert "the archive member 'model.weights.h5' declares" in _error_line(err)
    assert sorted(os.listdir(tmp_path)) == ["src.keras"]
