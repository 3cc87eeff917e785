"""The model zoo through ``rewrite batch``, beside the plain TFLite converter and onnx2tf.

    PYTHONPATH=. python benchmarks/zoo.py [--full] [--size 64] [--workers 1] [--models a,b]
        [--targets edgetpu,ethos-u55-128,tflm,onnx] [--workdir /tmp/rewriter_zoo]
        [--onnx2tf /work/venv-onnx2tf/bin/onnx2tf]
    python benchmarks/zoo.py --setup-onnx2tf [--python python3.12]

By default a reduced zoo (``REDUCED``: MobileNetV3Small, MobileNetV2, EfficientNetB0, ResNet50)
at 64x64, what a shared 2-core machine runs in under an hour; ``--full`` runs the whole list
(``ORDER``: 13 keras.applications architectures, the trained model in models/third_party and
three model families) at 96x96, what published ``benchmarks/RESULTS.md`` (about 75 minutes on 2
shared cores; ``--size`` overrides either: ``--size 224``, ImageNet's, takes hours there).

One command: builds the zoo (``benchmarks/zoo_build.py``, in a process of its own), writes a
manifest and runs ``rewrite batch`` on it (so every job is the main job, as a deployment pipeline
runs it), then, per model and in processes of their own, the baselines exactly as their users run
them, from the user's own model file (``benchmarks/zoo_tools.py``): the plain TFLite converter
(full int8, int8 I/O), tf2onnx through its documented API (``tf2onnx.convert.from_keras``), and
onnx2tf's command line on tf2onnx's file with its documented full-int8 flags (``-oiqt`` with our
calibration data by ``-cind``, ``-iqd int8 -oqd int8``), ``-rtpo`` for the ops the Edge TPU lacks
(onnx2tf documents no Edge-TPU-specific flag) and ``-kat`` to keep the input shape. onnx2tf runs
its default backend first (``flatbuffer_direct``); when that fails, its documented fallback
``-tb tf_converter``; both attempts are recorded. Every file is judged by the same judges: ops
placed on the accelerator (op table, Edge TPU cut and "might not be mapped" ops, Vela for
Ethos-U), Vela's estimated inference time, int8 cosine to the original float model on the same
verification data, wall time, and peak memory of the process tree (sampled every 0.1 s, children
included). Wall time and memory are published as ratios to the plain converter measured in the
same run (the machine is shared and noisy), and only where that baseline finished: a crash or a
failure is shown as such, with no ratio. Everything is resumable: ``rewrite batch`` skips finished
jobs, and each baseline's result is kept in the work directory.

onnx2tf 2.6 needs Python >= 3.12 and pins numpy, onnx and protobuf versions that rewriter's own
environment excludes, so it lives in a virtual environment of its own, made by
``python benchmarks/zoo.py --setup-onnx2tf`` (the command is ``ONNX2TF_SETUP``; ``--onnx2tf``
points at another install). Its version, its Python's and its TensorFlow's go into the results.
A seeded sample-image file of ours is put where onnx2tf looks for one (its working directory), so
nothing is downloaded.

Results: ``benchmarks/RESULTS.md``, ``benchmarks/results/zoo.json``, ``benchmarks/results/zoo.svg``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


#: The zoo, cheapest first (results appear in this order).
ORDER = ("fer_emotion", "kws", "transformer", "detector", "MobileNetV3Small", "MobileNet",
         "MobileNetV2", "RegNetX002", "EfficientNetB0", "MobileNetV3Large", "EfficientNetV2B0",
         "NASNetMobile", "DenseNet121", "ConvNeXtTiny", "ResNet50", "InceptionV3", "Xception")

#: The reduced zoo run by default (at 64x64).
REDUCED = ("MobileNetV3Small", "MobileNetV2", "EfficientNetB0", "ResNet50")
TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")
#: ONNX ops the Edge TPU lacks that onnx2tf can replace (its -rtpo list, minus the ones the
#: TFLite int8 path needs no help with).
RTPO = ("HardSwish", "Erf", "GeLU", "LeakyReLU", "PReLU", "Neg", "Abs", "Power")
SAMPLE_FILE = "calibration_image_sample_data_20x128x128x3_float32.npy"
#: onnx2tf's current release, and its own environment (override with $ONNX2TF_VENV).
ONNX2TF_VERSION = "2.6.9"
ONNX2TF_VENV = Path(os.environ.get("ONNX2TF_VENV", "/work/venv-onnx2tf"))
#: The documented install (onnx2tf's README: Python >= 3.12, the ``tensorflow`` extra for its
#: ``tf_converter`` backend); ``{python}`` is a Python 3.12 interpreter.
ONNX2TF_SETUP = ("{python} -m venv {venv} && {venv}/bin/pip install "
                 f"'onnx2tf[tensorflow]=={ONNX2TF_VERSION}'")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def measured(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = 3600) -> dict[str, Any]:
    """Run ``cmd``; its exit code, wall seconds, peak memory of its tree, last stdout line."""
    from rewriter.host.procmem import TreeMeter

    meter = TreeMeter()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    meter.watch(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    peak = meter.done(proc.pid)
    meter.close()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    res: dict[str, Any] = {"exit": proc.returncode, "seconds": round(time.perf_counter() - start, 2),
                           "peak_rss_mb": peak.rss_mb, "peak_rss_hwm_mb": peak.hwm_mb,
                           "peak_mem_mb": peak.mem_mb}
    try:
        res["result"] = json.loads(lines[-1]) if lines else None
    except ValueError:
        res["result"] = None
    if proc.returncode != 0 or res["result"] is None:
        res["stderr"] = err[-1500:]
        # the error lines of the whole stderr (its last 1500 characters may hold only the
        # traceback of a re-raise): the first three distinct ones
        found = [ln.strip()[:300] for ln in err.splitlines()
                 if re.search(r"\w+(Error|Exception): ", ln)]
        res["errors"] = list(dict.fromkeys(found))[:3]
    return res


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


def _cached(path: Path, fn: Any) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    res = fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(res, indent=1, default=str))
    return res


# ----------------------------------------------------------------------------- the steps
def build(workdir: Path, size: int, models: list[str]) -> dict[str, dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = subprocess.call(_py(str(ROOT / "benchmarks" / "zoo_build.py"), str(workdir / "models"),
                               "--size", str(size), "--models", ",".join(models)), env=env)
    if code != 0:
        raise SystemExit(f"building the zoo failed (exit {code})")
    return {m: json.loads((workdir / "models" / m / "case.json").read_text()) for m in models}


def manifest(workdir: Path, cases: dict[str, dict[str, Any]], targets: list[str]) -> Path:
    lines = ["# written by benchmarks/zoo.py", ""]
    for name, info in cases.items():
        for t in targets:
            lines += ["[[job]]", f'name = "{name}-{t}"', f'model = "models/{name}/{info["model"]}"',
                      f'target = "{t}"', f'calibration = "models/{name}/{info["calibration"]}"',
                      f'data = "models/{name}/{info["data"]}"', ""]
    path = workdir / "zoo.toml"
    path.write_text("\n".join(lines))
    return path


def run_batch(workdir: Path, manifest_path: Path, workers: int) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = _py("-m", "rewriter.cli", "batch", str(manifest_path), "-o", str(workdir / "batch"),
              "--workers", str(workers))
    log("$ rewrite " + " ".join(cmd[3:]))
    code = subprocess.call(cmd, env=env)
    log(f"rewrite batch exit {code}")
    return json.loads((workdir / "batch" / "batch.json").read_text())


def baselines(workdir: Path, name: str, targets: list[str], onnx2tf: str | None
              ) -> dict[str, Any]:
    """The plain converter, plain tf2onnx and onnx2tf for one case, each judged (cached)."""
    case = workdir / "models" / name
    out = workdir / "baselines" / name
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), ZOO_QUIET="1")
    tools = str(ROOT / "benchmarks" / "zoo_tools.py")
    tfl_targets = [t for t in targets if t != "onnx"]
    res: dict[str, Any] = {}
    from benchmarks import baseline_cache as bc
    from benchmarks.speed import ONNX_TOOLS, PLAIN_TOOLS, _inputs

    def conversion(kind: str, cmd: list[str], file: Path, tools: tuple[str, ...]) -> Any:
        """A conversion, from the baseline cache when it ran before on the same inputs (its
        result: zoo_tools exits 0, with the converter's exception if it raised one)."""
        return lambda: bc.cached(
            kind, _inputs(case), cmd[1:], bc.tool_versions(tools),
            lambda r: [file] if (r.get("result") or {}).get("ok") else [],
            {"case": case, "out": out}, lambda: measured(cmd, env=env),
            lambda r: r.get("exit") == 0 and r.get("result") is not None)

    if tfl_targets:
        res["plain_tflite"] = _cached(out / "plain_tflite.json", conversion(
            "plain-tflite", _py(tools, "plain-tflite", str(case), str(out / "plain_int8.tflite")),
            out / "plain_int8.tflite", PLAIN_TOOLS))
        if (out / "plain_int8.tflite").exists():
            res["plain_tflite"]["judge"] = _cached(out / "plain_tflite_judge.json", lambda: (
                measured(_py(tools, "judge", str(case), str(out / "plain_int8.tflite"),
                             ",".join(tfl_targets)), env=env)["result"]))
    res["plain_onnx"] = _cached(out / "plain_onnx.json", conversion(
        "plain-onnx", _py(tools, "plain-onnx", str(case), str(out / "plain.onnx")),
        out / "plain.onnx", ONNX_TOOLS))
    if "onnx" in targets and (out / "plain.onnx").exists():
        res["plain_onnx"]["judge"] = _cached(out / "plain_onnx_judge.json", lambda: measured(
            _py(tools, "judge", str(case), str(out / "plain.onnx"), "onnx"), env=env)["result"])
    if onnx2tf and tfl_targets and (out / "plain.onnx").exists():
        res["onnx2tf"] = _cached(out / "onnx2tf.json", lambda: bc.cached(
            "onnx2tf", [*_inputs(case), out / "plain.onnx"], onnx2tf_way(onnx2tf),
            {"onnx2tf": versions(onnx2tf).get("onnx2tf", "absent")},
            lambda r: [Path(r["file"])] if r.get("file") else [], {"case": case, "out": out},
            lambda: _onnx2tf(onnx2tf, case, out, res["plain_onnx"], env), onnx2tf_finished))
        quant = res["onnx2tf"].get("file")
        if quant and Path(quant).exists() and Path(quant).stat().st_size:
            res["onnx2tf"]["judge"] = _cached(out / "onnx2tf_judge.json", lambda: measured(
                _py(tools, "judge", str(case), str(quant), ",".join(tfl_targets)),
                env=env)["result"])
    return res


def onnx2tf_command(onnx2tf: str, onnx_path: Path, outdir: Path, input_name: str,
                    calibration: Path, lo: float, hi: float, backend: str | None) -> list[str]:
    """onnx2tf's command line: full int8 with int8 I/O (``-oiqt -iqd int8 -oqd int8``) calibrated
    on our data. ``-cind`` takes data normalised to [0, 1] with the mean and std that map it back:
    ``(n - mean) / std == x`` for ``n = (x - lo) / (hi - lo)``, ``mean = -lo / (hi - lo)``,
    ``std = 1 / (hi - lo)``. ``-kat`` keeps the input's shape (else an NHWC input is taken for
    NCHW), ``-rtpo`` replaces the ops the Edge TPU lacks."""
    span = (hi - lo) or 1.0
    cmd = [onnx2tf, "-i", str(onnx_path), "-o", str(outdir), "-kat", input_name,
           "-rtpo", *RTPO, "-oiqt", "-cind", input_name, str(calibration),
           f"[{-lo / span!r}]", f"[{1.0 / span!r}]", "-iqd", "int8", "-oqd", "int8"]
    return cmd + (["-tb", backend] if backend else [])


def _onnx2tf(onnx2tf: str, case: Path, out: Path, plain_onnx: dict[str, Any],
             env: dict[str, str]) -> dict[str, Any]:
    """tf2onnx's file (``plain.onnx``) -> onnx2tf's command line, full int8 with int8 I/O: its
    default backend, then ``-tb tf_converter`` if that fails. The result holds every attempt;
    ``file`` is the full-int8 TFLite of the attempt that wrote one."""
    import numpy as np
    import onnx

    proto = onnx.load(str(out / "plain.onnx"), load_external_data=False)
    name = proto.graph.input[0].name
    cal = np.load(case / json.loads((case / "case.json").read_text())["calibration"])
    lo, hi = float(cal.min()), float(cal.max())
    env2 = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # as an activated venv: onnx2tf runs onnxsim from PATH
    env2["PATH"] = f"{Path(onnx2tf).parent}{os.pathsep}{env2.get('PATH', '')}"
    attempts = []
    res: dict[str, Any] = {}
    for backend in (None, "tf_converter"):
        work = out / ("onnx2tf" if backend is None else f"onnx2tf_{backend}")
        work.mkdir(exist_ok=True)
        subprocess.run(_py(str(ROOT / "benchmarks" / "zoo_tools.py"), "sample-data",
                           str(work / SAMPLE_FILE)), env=env, check=True, capture_output=True)
        span = (hi - lo) or 1.0
        np.save(work / "calibration.npy", ((cal - lo) / span).astype(np.float32))
        cmd = onnx2tf_command(onnx2tf, out / "plain.onnx", work, name,
                              work / "calibration.npy", lo, hi, backend)
        res = measured(cmd, cwd=work, env=env2)
        res["command"] = " ".join(["onnx2tf", *cmd[1:]])
        res["backend"] = backend or "default (flatbuffer_direct)"
        quant = work / "plain_full_integer_quant.tflite"
        res["file"] = str(quant) if res["exit"] == 0 and quant.exists() else None
        attempts.append(res)
        if res["file"]:
            break
    res = dict(attempts[-1], attempts=[{k: a.get(k) for k in
                                        ("backend", "command", "exit", "seconds", "peak_rss_mb",
                                         "stderr", "errors")} for a in attempts])
    # a pipeline's cost: tf2onnx then onnx2tf (one after the other), the attempt that worked
    res["pipeline_seconds"] = round(res["seconds"] + plain_onnx.get("seconds", 0), 2)
    res["pipeline_peak_rss_mb"] = max(res["peak_rss_mb"], plain_onnx.get("peak_rss_mb", 0))
    return res


def onnx2tf_finished(res: dict[str, Any]) -> bool:
    """onnx2tf wrote its file, or every attempt exited with its own error (a positive exit
    code: not a signal, not a timeout): the baseline cache may keep it."""
    return bool(res.get("file")) or all(
        isinstance(a.get("exit"), int) and a["exit"] > 0 for a in res.get("attempts", []))


def onnx2tf_way(onnx2tf: str) -> list[str]:
    """What decides onnx2tf's output besides its inputs and version: the executable and the
    code that builds its command lines and picks the backend (the baseline cache's key)."""
    import inspect

    return [onnx2tf, inspect.getsource(onnx2tf_command), inspect.getsource(_onnx2tf),
            repr(RTPO), SAMPLE_FILE]


def setup_onnx2tf(venv: Path, python: str | None) -> int:
    """Make onnx2tf's environment by ``ONNX2TF_SETUP`` (needs a Python >= 3.12)."""
    import shutil

    python = python or shutil.which("python3.12") or shutil.which("python3.13")
    if not python:
        raise SystemExit("error: onnx2tf needs Python >= 3.12: pass --python /path/to/python3.12")
    cmd = ONNX2TF_SETUP.format(python=python, venv=venv)
    log("$ " + cmd)
    return subprocess.call(cmd, shell=True)


# ----------------------------------------------------------------------------- the machine
def machine() -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = 0.0
    try:
        mem = int(next(ln.split()[1] for ln in open("/proc/meminfo")
                       if ln.startswith("MemTotal"))) / 1e6
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem, 1),
            "os": platform.platform(), "python": platform.python_version(),
            "load_average_at_start": os.getloadavg()}


def versions(onnx2tf: str | None) -> dict[str, str]:
    from importlib.metadata import version

    out = {}
    for pkg in ("tensorflow", "keras", "tf_keras", "tf2onnx", "onnx", "onnxruntime",
                "ethos-u-vela"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            pass
    if onnx2tf:
        py = str(Path(onnx2tf).parent / "python")
        probe = subprocess.run([py, "-c", "import sys; from importlib.metadata import version as v"
                                "; print(v('onnx2tf'), sys.version.split()[0], v('tensorflow'), "
                                "v('onnx'), v('onnxruntime'))"], capture_output=True, text=True)
        if probe.returncode == 0:
            o2t, pyv, tf, onnx_v, ort = probe.stdout.split()
            out["onnx2tf"] = (f"{o2t} (its own venv: Python {pyv}, tensorflow {tf}, onnx {onnx_v}"
                              f", onnxruntime {ort})")
    return out


def commit() -> str:
    """HEAD's commit of the code that runs, ``+dirty`` when its files differ from it."""
    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True,
                              text=True).stdout.strip()
    head = git("rev-parse", "--short=7", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "rewriter", "benchmarks",
                "op_tables")
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true",
                    help="the whole zoo (ORDER) at 96x96 instead of REDUCED at 64x64")
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--models", default=None, help="comma-separated (default: see --full)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rewriter_zoo"))
    ap.add_argument("--onnx2tf", default=str(ONNX2TF_VENV / "bin" / "onnx2tf"),
                    help="onnx2tf's command (its own venv: --setup-onnx2tf); '' to leave it out")
    ap.add_argument("--setup-onnx2tf", action="store_true",
                    help=f"make onnx2tf's venv ({ONNX2TF_VENV}, or $ONNX2TF_VENV) and stop")
    ap.add_argument("--python", default=None, help="the Python >= 3.12 for --setup-onnx2tf")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite RESULTS.md and the chart from results/zoo.json")
    args = ap.parse_args(argv)
    from benchmarks.zoo_report import render_all

    if args.setup_onnx2tf:
        return setup_onnx2tf(ONNX2TF_VENV, args.python)
    if args.render:
        render_all(json.loads((args.results / "results" / "zoo.json").read_text()), args.results)
        return 0
    args.size = args.size or (96 if args.full else 64)
    args.models = args.models or ",".join(ORDER if args.full else REDUCED)
    onnx2tf = args.onnx2tf if args.onnx2tf and Path(args.onnx2tf).exists() else None
    if args.onnx2tf and not onnx2tf:
        raise SystemExit(f"error: {args.onnx2tf} not found: make its venv with "
                         "`python benchmarks/zoo.py --setup-onnx2tf` or pass --onnx2tf ''")
    models, targets = args.models.split(","), args.targets.split(",")
    start = time.perf_counter()
    meta = {"command": "PYTHONPATH=. python benchmarks/zoo.py " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit(),
            "size": args.size,
            "full": args.full,
            "workers": args.workers, "targets": targets, "machine": machine(),
            "versions": versions(onnx2tf),
            "onnx2tf_flags": ["-kat", "-rtpo", *RTPO, "-oiqt", "-cind", "-iqd", "int8", "-oqd",
                              "int8"]}
    from benchmarks import baseline_cache as bc

    # Jobs and judges are our code's: a work directory last used with other code loses them.
    meta["workdir_code_changed"] = bc.fresh_for_code(args.workdir,
                                                     ["batch", "zoo.toml", "baselines/*/*judge*"])
    meta["resumed"] = (args.workdir / "batch").exists() or (args.workdir / "baselines").exists()
    meta["baseline_cache"] = str(bc.cache_dir() or "off")
    log(f"building {len(models)} models at {args.size}x{args.size}")
    cases = build(args.workdir, args.size, models)
    results: dict[str, Any] = {}
    batch: dict[str, Any] = {}
    for i, name in enumerate(models, 1):
        # the manifest grows by one model at a time: `rewrite batch` skips the jobs it finished,
        # so results appear model by model and an interrupted run resumes where it stopped
        log(f"[{i}/{len(models)}] {name}: rewrite batch")
        batch = run_batch(args.workdir, manifest(args.workdir, {m: cases[m] for m in models[:i]},
                                                 targets), args.workers)
        log(f"[{i}/{len(models)}] {name}: baselines")
        jobs = {j["target"]: _job(j) for j in batch["jobs"] if j["name"] == f"{name}-{j['target']}"}
        results[name] = {"info": cases[name], "jobs": jobs,
                         **baselines(args.workdir, name, targets, onnx2tf)}
        meta["total_s"] = round(time.perf_counter() - start, 1)
        meta["machine"]["load_average_at_end"] = os.getloadavg()
        meta["complete"] = i == len(models)
        doc = {"meta": meta, "results": results}
        (args.results / "results").mkdir(parents=True, exist_ok=True)
        (args.results / "results" / "zoo.json").write_text(json.dumps(doc, indent=1, default=str))
        render_all(doc, args.results)
    from benchmarks import stamp

    # the stamp (commit, date, machine, versions, command) that benchmarks/figures.py reads
    stamp.stamp_files([args.results / "RESULTS.md", args.results / "results" / "zoo.json"],
                      "zoo.py", command=meta["command"])
    log(f"wrote {args.results / 'RESULTS.md'} in {meta['total_s']} s")
    return 0


def _job(record: dict[str, Any]) -> dict[str, Any]:
    """A batch record with the figures of its report."""
    out = dict(record)
    report = Path(record["outdir"]) / "report.json"
    if report.exists():
        from benchmarks.real_models import summarise

        out["report"] = summarise(json.loads(report.read_text()))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
