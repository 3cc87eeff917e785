"""Seeded byte mutations of every model format, held to the contract.

Corpus: the sample network as ``.pb``, ``.keras``, tf_keras ``.h5``, SavedModel and TF1
checkpoint, plus baits whose code would write a marker file if it ran (a tf_keras ``.h5`` and a
Keras 3 ``.keras`` with a Lambda, a ``.pb`` and a SavedModel with ``WriteFile``). Hypothesis
picks a file (for directories: one file inside) and a list of mutations (bit flips, random
bytes, truncation, insertion, a repeated or zeroed block), each drawn from a seed, with
``derandomize=True``, so a run is reproducible. Each mutant goes through ``rewrite inspect``;
a mutant that still loads also through the main job into an OUT holding a previous run.

The contract: exit 0/1/2/3; a failure says one ``error:`` line (warnings aside) and no
traceback; a damaged file is bad input (exit 2), never "a bug in rewriter"; no marker file (no model code ran); the input byte-identical; OUT either the
previous run (on 2/3) or a complete new one (on 0/1), never a staging leftover. The commands run
in :mod:`tests.fuzz_worker` (TensorFlow imported once); when a mutant kills that process by a
signal, it is replayed through the real supervised ``rewrite`` command, which must turn the
crash into exit 3 with one line. Crashes and hangs are recorded in ``FUZZ_LOG`` (default
``fuzz-findings.jsonl`` in the test's tmp dir).

Default run: a few examples per format. The 200+ run::

    FUZZ_EXAMPLES=40 python -m pytest -m slow tests/test_fuzz.py
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
_CASES = itertools.count()
KINDS = ("flip", "bytes", "truncate", "insert", "repeat", "zero")
TIMEOUT = 300


# ----------------------------------------------------------------------------- mutations
def mutate(data: bytes, kind: str, seed: int) -> bytes:
    """One seeded mutation of ``data``."""
    rng = np.random.default_rng(seed)
    buf = bytearray(data)
    if not buf:
        return bytes(rng.integers(0, 256, 16, dtype=np.uint8))
    n = len(buf)
    pos = int(rng.integers(0, n))
    if kind == "flip":
        for p in rng.integers(0, n, int(rng.integers(1, 9))):
            buf[int(p)] ^= 1 << int(rng.integers(0, 8))
    elif kind == "bytes":
        size = int(rng.integers(1, 33))
        buf[pos:pos + size] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    elif kind == "truncate":
        del buf[pos:]
    elif kind == "insert":
        buf[pos:pos] = rng.integers(0, 256, int(rng.integers(1, 65)), dtype=np.uint8).tobytes()
    elif kind == "repeat":
        size = int(rng.integers(1, 257))
        buf[pos:pos] = buf[pos:pos + size]
    else:  # zero
        size = int(rng.integers(1, 257))
        buf[pos:pos + size] = bytes(len(buf[pos:pos + size]))
    return bytes(buf)


# ----------------------------------------------------------------------------- corpus
@pytest.fixture(scope="module")
def corpus(tmp_path_factory, samples) -> dict[str, tuple[Path, str]]:
    """name -> (model path, the file inside it to mutate: '' for a file model)."""
    root = tmp_path_factory.mktemp("corpus")
    marker = root / "MARKER"
    items: dict[str, tuple[Path, str]] = {
        "pb": (samples["graphdef"], ""),
        "keras": (samples["keras"], ""),
        "h5": (samples["h5_tfkeras"], ""),
        # inside the zip (its CRCs would reject any byte changed in the archive itself)
        "keras:config.json": (samples["keras"], "zip:config.json"),
        "keras:model.weights.h5": (samples["keras"], "zip:model.weights.h5"),
    }
    for name in ("saved_model.pb", "variables/variables.index",
                 "variables/variables.data-00000-of-00001"):
        items[f"saved_model:{name}"] = (samples["saved_model"], name)
    ckpt = samples["checkpoint"]
    for suffix in (".meta", ".index", ".data-00000-of-00001"):
        items[f"checkpoint:{suffix}"] = (ckpt, ckpt.name + suffix)
    items.update(_baits(root, marker))
    return items


def _baits(root: Path, marker: Path) -> dict[str, tuple[Path, str]]:
    import keras
    import tensorflow as tf
    import tf_keras

    code = f"lambda t: (open({str(marker)!r}, 'w').write('ran'), t * 2.0)[1]"
    x = tf_keras.Input((4,), name="x")
    tf_keras.Model(x, tf_keras.layers.Lambda(eval(code))(x)).save(root / "lam.h5")  # noqa: S307
    x3 = keras.Input((4,), name="x")
    keras.Model(x3, keras.layers.Lambda(eval(code))(x3)).save(root / "lam.keras")  # noqa: S307

    module = tf.Module()

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32, name="x")])
    def serve(t):
        with tf.control_dependencies([tf.io.write_file(str(marker), "ran")]):
            return {"y": tf.identity(t * 2.0)}

    module.serve = serve
    tf.saved_model.save(module, str(root / "write_sm"), signatures={"serving_default": serve})
    (root / "write.pb").write_bytes(
        serve.get_concrete_function().graph.as_graph_def().SerializeToString())
    marker.unlink(missing_ok=True)  # tracing at save time ran the Lambdas once
    return {"bait:lam.h5": (root / "lam.h5", ""), "bait:lam.keras": (root / "lam.keras", ""),
            "bait:write.pb": (root / "write.pb", ""),
            "bait:write_sm": (root / "write_sm", "saved_model.pb")}


def _marker(corpus: dict[str, tuple[Path, str]]) -> Path:
    return corpus["bait:lam.h5"][0].parent / "MARKER"


def make_mutant(corpus: dict[str, tuple[Path, str]], key: str,
                mutations: list[tuple[str, int]], where: Path) -> Path:
    """A copy of corpus item ``key`` with ``mutations`` applied, under ``where``."""
    src, inner = corpus[key]
    where.mkdir(parents=True)
    if inner.startswith("zip:"):
        return _mutant_zip(src, inner[4:], mutations, where / src.name)
    if src.is_dir():
        dst = where / src.name
        shutil.copytree(src, dst)
        target = dst / inner
    elif inner:  # a checkpoint: copy its prefix's files
        for f in src.parent.iterdir():
            if f.is_file():
                shutil.copy(f, where / f.name)
        dst, target = where / src.name, where / inner
    else:
        dst = target = where / src.name
        shutil.copy(src, dst)
    data = target.read_bytes()
    for kind, seed in mutations:
        data = mutate(data, kind, seed)
    target.write_bytes(data)
    return dst


def _mutant_zip(src: Path, member: str, mutations: list[tuple[str, int]], dst: Path) -> Path:
    import zipfile

    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for info in a.infolist():
            data = a.read(info)
            if info.filename == member:
                for kind, seed in mutations:
                    data = mutate(data, kind, seed)
            b.writestr(info, data)
    return dst


# ----------------------------------------------------------------------------- running
class Runner:
    """Sends commands to a :mod:`tests.fuzz_worker` process; restarts it when it dies."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
        return subprocess.Popen([sys.executable, "-m", "tests.fuzz_worker"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                bufsize=1)

    def run(self, args: list[str], cwd: Path) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"args": args, "cwd": str(cwd)}) + "\n")
        self.proc.stdin.flush()
        line = _readline(self.proc, TIMEOUT)
        if line is None:
            self.proc.kill()
            self.proc.wait()
            return {"hang": True}
        if not line:
            return {"signal": -self.proc.wait()}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def _readline(proc: subprocess.Popen, timeout: float) -> str | None:
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout):
        return None
    return proc.stdout.readline()


@pytest.fixture(scope="module")
def runner():
    r = Runner()
    yield r
    r.close()


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.parent.glob(path.name + "*")) if not path.exists() else (
            sorted(path.rglob("*")) if path.is_dir() else [path]):
        if p.is_file():
            h.update(p.name.encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _supervised(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rewriter", *args], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=TIMEOUT)


def check_contract(runner: Runner, args: list[str], cwd: Path, findings: Path) -> dict[str, Any]:
    """Run ``rewrite ARGS`` and assert the contract; returns the result."""
    result = runner.run(args, cwd)
    if "hang" in result:
        _record(findings, args, "hang", f"no answer in {TIMEOUT} s")
        pytest.fail(f"rewrite {' '.join(args)} hung")
    if "signal" in result:  # the in-process run died: the real command must contain it
        proc = _supervised(args, cwd)
        _record(findings, args, "crash", f"in-process signal {result['signal']}; supervised "
                f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        result = {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
        assert proc.returncode == 3, proc.stderr
    code, err = result["code"], result["stderr"]
    assert code in (0, 1, 2, 3), (code, err)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    others = [ln for ln in lines if not ln.startswith(("error: ", "warning: "))]
    assert others == [], err
    assert len(errors) == (1 if code in (2, 3) else 0), err
    if code == 3:  # a crash contained by the supervisor is recorded; an exception is a bug
        _record(findings, args, "internal", errors[0])
        assert "died with" in errors[0], f"an input error reported as a bug: {errors[0]}"
    return result


def _record(findings: Path, args: list[str], kind: str, detail: str) -> None:
    with open(findings, "a") as f:
        f.write(json.dumps({"kind": kind, "args": args, "detail": detail}) + "\n")


def fuzz_one(corpus: dict[str, tuple[Path, str]], runner: Runner, work: Path, key: str,
             mutations: list[tuple[str, int]], previous: Path, findings: Path) -> None:
    """One mutant through inspect (and, if it loads, the main job) under the contract."""
    case = work / f"case{next(_CASES)}"
    model = make_mutant(corpus, key, mutations, case / "in")
    before = _digest(model)
    marker = _marker(corpus)
    result = check_contract(runner, ["inspect", str(model), "-q"], case, findings)
    codes = {"inspect": result["code"], "error": result["stderr"].strip()[-200:]}
    if result["code"] == 0:
        out = case / "out"
        shutil.copytree(previous, out)
        prev = _digest(out)
        result = check_contract(runner, ["run", str(model), "--target", "edgetpu", "--samples",
                                         "2", "-o", str(out), "-q"], case, findings)
        if result["code"] in (2, 3):
            assert _digest(out) == prev, "a failed run changed OUT"
        else:
            names = {p.name for p in out.iterdir()}
            assert {".rewriter.json", "report.json", "model.tflite", "saved_model"} <= names
        assert sorted(p.name for p in case.iterdir()) == ["in", "out"], "staging left behind"
        codes.update(run=result["code"], run_error=result["stderr"].strip()[-200:])
    _record(findings, [key, json.dumps(mutations)], "case", json.dumps(codes))
    assert not marker.exists(), f"model code ran for {key} {mutations}"
    assert _digest(model) == before, "the input was modified"
    shutil.rmtree(case, ignore_errors=True)


@pytest.fixture(scope="module")
def previous(tmp_path_factory, samples) -> Path:
    """A complete earlier run of the main job, copied into each case's OUT."""
    from rewriter.cli import main

    out = tmp_path_factory.mktemp("previous") / "out"
    assert main(["run", str(samples["keras"]), "--target", "tflite", "--samples", "2",
                 "-o", str(out), "-q"]) == 0
    return out


def _mutations() -> st.SearchStrategy:
    return st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32 - 1)),
                    min_size=1, max_size=3)


def _fuzz(corpus, runner, previous, tmp_path, key: str, examples: int) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    findings = Path(os.environ.get("FUZZ_LOG", tmp_path / "fuzz-findings.jsonl"))

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutations=_mutations())
    def one(mutations: list[tuple[str, int]]) -> None:
        fuzz_one(corpus, runner, work, key, mutations, previous, findings)

    one()


KEYS = ["pb", "keras", "keras:config.json", "keras:model.weights.h5", "h5",
        "saved_model:saved_model.pb", "saved_model:variables/variables.index",
        "saved_model:variables/variables.data-00000-of-00001", "checkpoint:.meta",
        "checkpoint:.index", "checkpoint:.data-00000-of-00001", "bait:lam.h5", "bait:lam.keras",
        "bait:write.pb", "bait:write_sm"]


@pytest.mark.parametrize("key", ["pb", "keras:model.weights.h5", "h5",
                                 "saved_model:saved_model.pb", "checkpoint:.meta",
                                 "bait:lam.h5"])
def test_mutants_hold_the_contract(corpus, runner, previous, tmp_path, key):
    """The default run: two seeded mutants of six corpus files."""
    _fuzz(corpus, runner, previous, tmp_path, key, 2)


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
def test_many_mutants_hold_the_contract(corpus, runner, previous, tmp_path, key):
    """FUZZ_EXAMPLES (default 20) mutants of each of the 15 corpus files."""
    _fuzz(corpus, runner, previous, tmp_path, key, int(os.environ.get("FUZZ_EXAMPLES", "20")))
