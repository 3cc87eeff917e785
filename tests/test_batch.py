"""``rewrite batch``: the manifest is parsed by the main job's parser, jobs run as processes in
parallel, one failing job does not stop the others, finished unchanged jobs are skipped on a
rerun, and an interrupt leaves finished jobs intact."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rewriter.batch.run import (
    BATCH_JSON,
    content_hash,
    job_key,
    load_manifest,
    model_stem,
    previous_records,
    reusable,
)
from rewriter.errors import UserError
from rewriter.host.supervise import _STAGE, ENV_DIR

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
#: Fast jobs: the sample network in float TFLite (no calibration, no Vela) and in ONNX.
FAST = "samples = 2\n"
TWO_FAST_JOBS = f"""
[defaults]
{FAST}
[[job]]
model = "models/convbn_elu.keras"
target = "tflite"
quantize = "none"
[[job]]
model = "models/convbn_elu.pb"
target = "onnx"
"""


def _manifest(tmp: Path, text: str) -> Path:
    path = tmp / "jobs.toml"
    path.write_text(text)
    return path


def _copy_models(tmp: Path) -> Path:
    models = tmp / "models"
    models.mkdir()
    for name in ("convbn_elu.keras", "convbn_elu.pb", "calibration.npy"):
        shutil.copy(MODELS / name, models / name)
    (models / "broken.keras").write_bytes(b"PK\x03\x04 not a keras file")
    return models


# ----------------------------------------------------------------------------- the manifest
def test_manifest_options_become_the_main_jobs_arguments(tmp_path):
    _copy_models(tmp_path)
    m = load_manifest(_manifest(tmp_path, """
[defaults]
calibration = "models/calibration.npy"
[[job]]
model = "models/convbn_elu.keras"
target = ["edgetpu", "onnx"]
input_shape = ["image:1,32,32,3"]
exact_only = true
float_io = false
pixel-range = "0,1"
opset = 17
"""))
    assert [j.name for j in m.jobs] == ["convbn_elu-edgetpu", "convbn_elu-onnx"]
    edgetpu = m.jobs[0]
    assert edgetpu.argv == ["models/convbn_elu.keras", "--target", "edgetpu",
                            "--calibration", "models/calibration.npy",
                            "--input-shape", "image:1,32,32,3", "--exact-only",
                            "--pixel-range", "0,1", "--opset", "17"]
    assert sorted(p.name for p in edgetpu.inputs) == ["calibration.npy", "convbn_elu.keras"]
    assert m.base == tmp_path.resolve()


@pytest.mark.parametrize("entry, message", [
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpu"\ncalibraton = "x"',
     "`calibraton` is not an option of `rewrite run`"),
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpu"\nout = "x"',
     "`out` cannot be set per job"),
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpu"\nexact_only = "yes"',
     "`exact_only` is true or false"),
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpu"\ncalibration = ["a", "b"]',
     "`calibration` takes one value, not a list"),
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpux"', "edgetpux"),
    ('model = "models/missing.keras"\ntarget = "edgetpu"', "missing.keras does not exist"),
    ('model = "models/convbn_elu.keras"\ntarget = "onnx"\nopset = 99',
     "99 is outside the supported opsets"),
    ('model = "models/convbn_elu.keras"\ntarget = "edgetpu"\nquantize = "int4"',
     "invalid choice: 'int4'"),
    ('target = "edgetpu"', "give the model as model"),
])
def test_manifest_refuses_a_bad_job_naming_it(tmp_path, entry, message):
    _copy_models(tmp_path)
    with pytest.raises(UserError, match="job 1") as err:
        load_manifest(_manifest(tmp_path, f"[[job]]\n{entry}\n"))
    assert message in str(err.value)


def test_manifest_refuses_two_jobs_writing_one_directory(tmp_path):
    _copy_models(tmp_path)
    text = '[[job]]\nmodel = "models/convbn_elu.keras"\ntarget = "onnx"\n' * 2
    with pytest.raises(UserError, match="two jobs write convbn_elu-onnx/ .*give one of them a `name`"):
        load_manifest(_manifest(tmp_path, text))
    text += 'name = "second"\n'
    assert [j.name for j in load_manifest(_manifest(tmp_path, text)).jobs] == [
        "convbn_elu-onnx", "second"]


def test_manifest_that_is_not_toml_or_has_no_jobs_is_refused(tmp_path):
    with pytest.raises(UserError, match="not valid TOML"):
        load_manifest(_manifest(tmp_path, "[[job]\n"))
    with pytest.raises(UserError, match="no \\[\\[job\\]\\] entries"):
        load_manifest(_manifest(tmp_path, "[defaults]\nsamples = 2\n"))
    with pytest.raises(UserError, match="unknown table"):
        load_manifest(_manifest(tmp_path, "[jobs]\nmodel = 'x'\n"))


def test_model_stem_names_every_format():
    assert model_stem("a/b/net.keras") == "net"
    assert model_stem("net.h5") == "net"
    assert model_stem("frozen.pb") == "frozen"
    assert model_stem("exported/saved_model_dir/") == "saved_model_dir"
    assert model_stem("ckpt/model.ckpt") == "model"


def test_key_follows_the_content_of_inputs_and_the_arguments(tmp_path):
    models = _copy_models(tmp_path)
    text = ('[[job]]\nmodel = "models/convbn_elu.keras"\ntarget = "edgetpu"\n'
            'calibration = "models/calibration.npy"\n')
    key = load_manifest(_manifest(tmp_path, text)).jobs[0].key
    assert load_manifest(_manifest(tmp_path, text)).jobs[0].key == key  # stable
    os.utime(models / "calibration.npy", (1, 1))  # a touch is not a change
    assert load_manifest(_manifest(tmp_path, text)).jobs[0].key == key
    data = bytearray((models / "calibration.npy").read_bytes())
    data[-1] ^= 1
    (models / "calibration.npy").write_bytes(bytes(data))
    changed = load_manifest(_manifest(tmp_path, text)).jobs[0]
    assert changed.key != key
    assert job_key(changed) == changed.key
    other_args = load_manifest(_manifest(tmp_path, text + "exact_only = true\n")).jobs[0]
    assert other_args.key not in (key, changed.key)


def test_content_hash_of_a_directory_and_a_checkpoint_prefix(tmp_path):
    d = tmp_path / "sm"
    (d / "variables").mkdir(parents=True)
    (d / "saved_model.pb").write_bytes(b"a")
    (d / "variables" / "v.index").write_bytes(b"b")
    before = content_hash(d)
    (d / "variables" / "v.index").write_bytes(b"c")
    assert content_hash(d) != before
    (tmp_path / "model.ckpt.index").write_bytes(b"i")
    (tmp_path / "model.ckpt.meta").write_bytes(b"m")
    prefix = content_hash(tmp_path / "model.ckpt")
    (tmp_path / "model.ckpt.meta").write_bytes(b"n")
    assert content_hash(tmp_path / "model.ckpt") != prefix


# ----------------------------------------------------------------------------- real runs
@pytest.fixture(scope="module")
def batch_run(tmp_path_factory):
    """Three jobs with --workers 2: two fast good ones and one whose model is broken; then the
    same batch again."""
    from rewriter.cli import main

    tmp = tmp_path_factory.mktemp("batch")
    _copy_models(tmp)
    manifest = _manifest(tmp, TWO_FAST_JOBS + '[[job]]\nmodel = "models/broken.keras"\n'
                         'target = "onnx"\n')
    out = tmp / "out"
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        code = main(["batch", str(manifest), "-o", str(out), "--workers", "2", "-q"])
        runs.append((code, time.perf_counter() - start,
                     json.loads((out / BATCH_JSON).read_text()), (out / "batch.md").read_text()))
    return out, runs


def test_batch_runs_every_job_and_one_failing_job_stops_no_other(batch_run):
    out, runs = batch_run
    code, _, doc, md = runs[0]
    assert code == 1  # one job failed
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert list(jobs) == ["convbn_elu-tflite", "convbn_elu-onnx", "broken-onnx"]
    for name in ("convbn_elu-tflite", "convbn_elu-onnx"):
        j = jobs[name]
        assert j["ok"] is True and j["exit_code"] == 0 and not j["skipped"]
        assert j["outdir"] == str(out.resolve() / name)
        report = json.loads((out / name / "report.json").read_text())
        assert report["ok"] is True and report["target"] == j["target"]
        assert (out / name / f"model.{'onnx' if 'onnx' in name else 'tflite'}").is_file()
        assert 3 < j["seconds"] < 600
        # the supervisor and the job (which converts in-process): TensorFlow once at least
        assert 300 < j["peak_rss_mb"] <= j["peak_rss_hwm_mb"] + 1
    broken = jobs["broken-onnx"]
    assert broken["ok"] is False and broken["exit_code"] == 2
    assert "broken.keras" in broken["error"]
    assert not (out / "broken-onnx").exists()
    assert "error:" in Path(broken["log"]).read_text()
    assert "3 jobs: 2 ok, 1 not ok, 0 skipped" in md and "| [broken-onnx]" in md
    assert not list(out.glob(".*staging*"))


def test_second_run_skips_finished_unchanged_jobs(batch_run):
    out, runs = batch_run
    (_, first, doc1, _), (code, second, doc2, md) = runs
    assert code == 1
    jobs = {j["name"]: j for j in doc2["jobs"]}
    assert jobs["convbn_elu-tflite"]["skipped"] and jobs["convbn_elu-onnx"]["skipped"]
    assert jobs["convbn_elu-tflite"]["seconds"] == doc1["jobs"][0]["seconds"]
    assert not jobs["broken-onnx"]["skipped"]  # it has no report: it runs again
    assert second < first
    assert "3 jobs: 2 ok, 1 not ok, 2 skipped" in md


def test_a_changed_or_missing_report_is_not_reused(batch_run, tmp_path):
    out, _ = batch_run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    records = previous_records(copy)
    rec = records["convbn_elu-onnx"]

    class Job:
        name, key = rec.name, rec.key

    assert reusable(Job, rec, copy)
    Job.key = "other"
    assert not reusable(Job, rec, copy)
    Job.key = rec.key
    (copy / rec.name / "report.json").write_text("{}")
    assert not reusable(Job, rec, copy)
    shutil.rmtree(copy / rec.name)
    assert not reusable(Job, rec, copy)


class _FakePool:
    """Runs no TensorFlow: each job 'writes' a report; records which jobs ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def run(self, specs, on_done):
        import hashlib

        for spec in specs:
            self.ran.append(spec["name"])
            out = Path(spec["outdir"])
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            data = json.dumps({"ok": True, "summary": spec["name"]}).encode()
            (out / "report.json").write_bytes(data)
            on_done(spec, {"exit_code": 0, "ok": True, "seconds": 1.5, "peak_rss_mb": 10.0,
                           "summary": spec["name"],
                           "report_sha256": hashlib.sha256(data).hexdigest()})


def test_a_job_finished_under_another_manifest_is_skipped(tmp_path, monkeypatch):
    """A zoo grown one model at a time: each run's manifest holds only some jobs, and batch.json
    lists only those; a job finished by an earlier run (its record in logs/<job>.json) is still
    skipped. A change of the rewriter code (same version string) reruns it."""
    from rewriter.batch import run as batch
    from rewriter.batch.run import record_path, run_batch

    _copy_models(tmp_path)
    job_a = '[[job]]\nmodel = "models/convbn_elu.keras"\ntarget = "tflite"\n'
    job_b = '[[job]]\nmodel = "models/convbn_elu.pb"\ntarget = "onnx"\n'
    out = tmp_path / "out"

    def run(text: str) -> list[str]:
        pool = _FakePool()
        run_batch(load_manifest(_manifest(tmp_path, text)), out.resolve(), pool)
        return pool.ran

    assert run(job_a) == ["convbn_elu-tflite"]
    assert run(job_b) == ["convbn_elu-onnx"]
    doc = json.loads((out / BATCH_JSON).read_text())
    assert [j["name"] for j in doc["jobs"]] == ["convbn_elu-onnx"]  # this manifest's jobs only
    assert record_path(out, "convbn_elu-tflite").is_file()
    assert run(job_a + job_b) == []  # both finished earlier, under other manifests
    doc = json.loads((out / BATCH_JSON).read_text())
    assert [(j["name"], j["skipped"], j["seconds"]) for j in doc["jobs"]] == [
        ("convbn_elu-tflite", True, 1.5), ("convbn_elu-onnx", True, 1.5)]
    # the same files and options, other code: every job runs again
    monkeypatch.setattr(batch, "code_fingerprint", lambda: "edited code")
    assert run(job_a + job_b) == ["convbn_elu-tflite", "convbn_elu-onnx"]


def test_the_code_fingerprint_covers_the_op_tables(tmp_path, monkeypatch):
    """An edited op table changes what a job does, so it changes the key."""
    from rewriter.batch.run import code_fingerprint
    from rewriter.host import resources

    tables = tmp_path / "op_tables"
    shutil.copytree(resources.op_tables_dir(), tables)
    monkeypatch.setattr(resources, "op_tables_dir", lambda: tables)
    code_fingerprint.cache_clear()
    try:
        before = code_fingerprint()
        assert before == code_fingerprint.__wrapped__()  # deterministic
        edgetpu = tables / "edgetpu.toml"
        edgetpu.write_text(edgetpu.read_text() + "\n# edited\n")
        assert code_fingerprint.__wrapped__() != before
    finally:
        code_fingerprint.cache_clear()


def test_batch_refuses_a_directory_it_did_not_write(tmp_path, cli):
    _copy_models(tmp_path)
    manifest = _manifest(tmp_path, '[[job]]\nmodel = "models/convbn_elu.keras"\n'
                         'target = "onnx"\n')
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    code, _, err = cli("batch", manifest, "-o", tmp_path / "mine")
    assert code == 2 and "no `rewrite batch` wrote" in err
    code, _, err = cli("batch", manifest, "-o", tmp_path / "models")
    assert code == 2 and "inputs are never outputs" in err
    code, _, err = cli("batch", manifest, "-o", tmp_path / "o", "--workers", "0")
    assert code == 2 and "--workers must be at least 1" in err


def _wait_for(proc: subprocess.Popen, what: str, condition: Callable[[], bool],
              timeout: float = 600.0) -> None:
    """Poll ``condition`` until it holds; the test fails naming ``what`` if the batch ``proc``
    ends first or ``timeout`` seconds pass (the batch is stopped)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
            pytest.fail(f"no {what} (batch exit {proc.returncode}): {err[-2000:]}")
        time.sleep(0.05)


def _job_stage(outdir: Path) -> str:
    """The stage of the job writing ``outdir``: what its supervised work process wrote to the
    stage file in its supervisor's directory (:func:`rewriter.host.supervise.set_stage`), found in
    Linux's ``/proc`` by the command line naming ``outdir`` (resolved, as the batch passes it);
    "" before there is one."""
    key, arg = (ENV_DIR + "=").encode(), os.fsencode(outdir.resolve())
    for pid in os.listdir("/proc"):
        try:
            if not pid.isdigit() or arg not in Path(
                    f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                continue
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            for var in env:
                if var.startswith(key):
                    return (Path(os.fsdecode(var[len(key):])) / _STAGE).read_text().strip()
        except OSError:  # ended meanwhile, or no stage written yet
            continue
    return ""


def test_interrupt_keeps_finished_jobs_and_records_them(tmp_path):
    """Ctrl-C after the first of two jobs: exit 2, the first job's directory and record stay,
    the second leaves nothing behind and is listed as not run."""
    _copy_models(tmp_path)
    manifest = _manifest(tmp_path, TWO_FAST_JOBS)
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "rewriter.cli", "batch", str(manifest), "-o",
                             str(out), "--workers", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    # the first job recorded, the second one's work process past its start (checking its
    # arguments or importing TensorFlow, where an interrupt is its own to handle), however slow
    # a loaded machine makes either
    _wait_for(proc, "record of the first job", lambda: bool(previous_records(out)))
    _wait_for(proc, "second job past its start",
              lambda: _job_stage(out / "convbn_elu-onnx") not in ("", "starting"))
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    assert "error: interrupted" in err
    doc = json.loads((out / BATCH_JSON).read_text())
    assert doc["interrupted"] is True
    assert [j["name"] for j in doc["jobs"] if j["ok"]] == ["convbn_elu-tflite"]
    assert (out / "convbn_elu-tflite" / "report.json").is_file()
    assert not (out / "convbn_elu-onnx").exists()
    assert not list(out.glob(".*staging*"))
    unfinished = doc["pending"] + [j["name"] for j in doc["jobs"] if j["interrupted"]]
    assert unfinished == ["convbn_elu-onnx"]


# ----------------------------------------------------------------------------- Ray
#: Ray on the loopback address only, without token authentication (a test instance).
_RAY_LOOPBACK = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
_RAY_HEAD = """
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR",
         _node_ip_address="127.0.0.1")
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test closes it
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_head():
    """A local Ray instance for these tests alone, on the loopback address without token
    authentication: a driver that started it prints its address and stops it when its stdin
    closes."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:  # not imported: Ray reads the env at import
        pytest.skip("Ray is not installed (pip install 'rewriter[ray]')")
    saved = {k: os.environ.get(k) for k in _RAY_LOOPBACK}
    os.environ.update(_RAY_LOOPBACK)  # the head and this process's driver alike
    proc = subprocess.Popen([sys.executable, "-c", _RAY_HEAD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = proc.stdout.readline().strip()
    assert address.startswith("127.0.0.1:"), f"the Ray instance did not start: {address!r}"
    yield address
    proc.stdin.close()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.mark.slow
def test_batch_runs_on_a_ray_cluster(ray_head, tmp_path):
    """The same jobs as Ray tasks: the same directories, reports and records; a rerun skips."""
    from rewriter.cli import main

    _copy_models(tmp_path)
    manifest = _manifest(tmp_path, TWO_FAST_JOBS)
    out = tmp_path / "out"
    assert main(["batch", str(manifest), "-o", str(out), "--ray", ray_head, "-q",
                 "--job-memory", "1"]) == 0
    doc = json.loads((out / BATCH_JSON).read_text())
    assert [(j["name"], j["ok"], j["exit_code"]) for j in doc["jobs"]] == [
        ("convbn_elu-tflite", True, 0), ("convbn_elu-onnx", True, 0)]
    for j in doc["jobs"]:
        assert json.loads((out / j["name"] / "report.json").read_text())["ok"] is True
        assert j["peak_rss_mb"] > 300
    assert main(["batch", str(manifest), "-o", str(out), "--ray", ray_head, "-q"]) == 0
    assert all(j["skipped"] for j in json.loads((out / BATCH_JSON).read_text())["jobs"])


_SIX = """
[defaults]
calibration = "models/calibration.npy"
[[job]]
model = "models/convbn_elu.keras"
target = ["edgetpu", "ethos-u55-128", "tflm", "onnx"]
[[job]]
model = "models/convbn_elu.pb"
target = ["tflite", "gpu"]
"""


@pytest.mark.slow
def test_six_jobs_with_two_workers_then_skipped_then_on_ray(ray_head, tmp_path):
    """Issue 12's acceptance: 6 jobs with --workers 2 write 6 reports and batch.json; a second
    run skips all of them in a fraction of the time; the same manifest runs on Ray."""
    from rewriter.cli import main

    _copy_models(tmp_path)
    manifest = _manifest(tmp_path, _SIX)
    out = tmp_path / "out"
    start = time.perf_counter()
    code = main(["batch", str(manifest), "-o", str(out), "--workers", "2", "-q"])
    first = time.perf_counter() - start
    doc = json.loads((out / BATCH_JSON).read_text())
    assert code == 0, doc
    assert len(doc["jobs"]) == 6 and all(j["ok"] for j in doc["jobs"])
    assert all((out / j["name"] / "report.json").is_file() for j in doc["jobs"])
    start = time.perf_counter()
    assert main(["batch", str(manifest), "-o", str(out), "--workers", "2", "-q"]) == 0
    second = time.perf_counter() - start
    assert all(j["skipped"] for j in json.loads((out / BATCH_JSON).read_text())["jobs"])
    assert second < 0.1 * first
    ray_out = tmp_path / "ray"
    assert main(["batch", str(manifest), "-o", str(ray_out), "--ray", ray_head, "-q",
                 "--job-memory", "1"]) == 0
    ray_doc = json.loads((ray_out / BATCH_JSON).read_text())
    assert [j["name"] for j in ray_doc["jobs"]] == [j["name"] for j in doc["jobs"]]
    assert all(j["ok"] for j in ray_doc["jobs"])
