"""The model zoo through ``rewrite batch``, beside the plain TFLite converter and onnx2tf.

    PYTHONPATH=. python benchmarks/zoo.py [--full] [--size 64] [--workers 1] [--models a,b]
        [--targets edgetpu,ethos-u55-128,tflm,onnx] [--workdir /tmp/rewriter_zoo]
        [--onnx2tf /tmp/onnx2tf-venv/bin/onnx2tf]

By default a reduced zoo (``REDUCED``: MobileNetV3Small, MobileNetV2, EfficientNetB0, ResNet50)
at 64x64, what a shared 2-core machine runs in under an hour; ``--full`` runs the whole list
(``ORDER``: 13 keras.applications architectures, the trained model in models/third_party and
three model families) at 96x96, what published ``benchmarks/RESULTS.md`` (about 75 minutes on 2
shared cores; ``--size`` overrides either: ``--size 224``, ImageNet's, takes hours there).

One command: builds the zoo (``benchmarks/zoo_build.py``, in a process of its own), writes a
manifest and runs ``rewrite batch`` on it (so every job is the main job, as a deployment pipeline
runs it), then, per model and in processes of their own, the baselines: the plain TFLite
converter (full int8, int8 I/O) and plain tf2onnx (``benchmarks/zoo_tools.py``), and onnx2tf on
that ONNX file with its Edge TPU replacement flags (``-rtpo`` for the ops the Edge TPU lacks,
full int8 with int8 I/O calibrated on the same data, input shape kept). Every file is judged by
the same judges: ops placed on the accelerator (op table, Edge TPU cut, Vela for Ethos-U),
Vela's estimated inference time, int8 cosine to the original float model on the same
verification data, wall time, and peak memory of the process tree (sampled every 0.1 s, children
included). Figures are published as ratios against the plain converter measured in the same run
(the machine is shared and noisy). Everything is resumable: ``rewrite batch`` skips finished
jobs, and each baseline's result is kept in the work directory.

onnx2tf pins TensorFlow 2.19, so it lives in a virtual environment of its own:
``python -m venv /tmp/onnx2tf-venv && /tmp/onnx2tf-venv/bin/pip install onnx2tf==1.29.24``.
It would download sample images for its own output check on RGB models; a seeded file of ours is
put where it looks first (its working directory), so nothing is downloaded.

Results: ``benchmarks/RESULTS.md``, ``benchmarks/results/zoo.json``, ``benchmarks/results/zoo.svg``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
#: onnx2tf's -oiqt quantisation of its SavedModel, on our calibration data (argv: saved model
#: directory, calibration .npy, output .tflite); run by onnx2tf's own Python.
QUANTISE = """
import sys, numpy as np, tensorflow as tf
conv = tf.lite.TFLiteConverter.from_saved_model(sys.argv[1])
cal = np.load(sys.argv[2]).astype(np.float32)
conv.optimizations = [tf.lite.Optimize.DEFAULT]
conv.representative_dataset = lambda: ([x[None]] for x in cal)
conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.SELECT_TF_OPS]
conv.inference_input_type = tf.int8
conv.inference_output_type = tf.int8
data = conv.convert()
open(sys.argv[3], "wb").write(data)
print("{}")
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def measured(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
             timeout: float = 3600) -> dict[str, Any]:
    """Run ``cmd``; its exit code, wall seconds, peak memory of its tree, last stdout line."""
    from rewriter.procmem import TreeMeter

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
    if tfl_targets:
        res["plain_tflite"] = _cached(out / "plain_tflite.json", lambda: measured(
            _py(tools, "plain-tflite", str(case), str(out / "plain_int8.tflite")), env=env))
        if (out / "plain_int8.tflite").exists():
            res["plain_tflite"]["judge"] = _cached(out / "plain_tflite_judge.json", lambda: (
                measured(_py(tools, "judge", str(case), str(out / "plain_int8.tflite"),
                             ",".join(tfl_targets)), env=env)["result"]))
    res["plain_onnx"] = _cached(out / "plain_onnx.json", lambda: measured(
        _py(tools, "plain-onnx", str(case), str(out / "plain.onnx")), env=env))
    if "onnx" in targets and (out / "plain.onnx").exists():
        res["plain_onnx"]["judge"] = _cached(out / "plain_onnx_judge.json", lambda: measured(
            _py(tools, "judge", str(case), str(out / "plain.onnx"), "onnx"), env=env)["result"])
    if onnx2tf and tfl_targets and (out / "plain.onnx").exists():
        res["onnx2tf"] = _cached(out / "onnx2tf.json", lambda: _onnx2tf(
            onnx2tf, case, out, res["plain_onnx"], env))
        quant = out / "onnx2tf" / "plain_full_integer_quant.tflite"
        if quant.exists() and quant.stat().st_size:
            res["onnx2tf"]["judge"] = _cached(out / "onnx2tf_judge.json", lambda: measured(
                _py(tools, "judge", str(case), str(quant), ",".join(tfl_targets)),
                env=env)["result"])
    return res


def _onnx2tf(onnx2tf: str, case: Path, out: Path, plain_onnx: dict[str, Any],
             env: dict[str, str]) -> dict[str, Any]:
    """Keras -> tf2onnx (the plain ONNX export above) -> onnx2tf, full int8 with int8 I/O."""
    import numpy as np
    import onnx

    work = out / "onnx2tf"
    work.mkdir(exist_ok=True)
    subprocess.run(_py(str(ROOT / "benchmarks" / "zoo_tools.py"), "sample-data",
                       str(work / SAMPLE_FILE)), env=env, check=True, capture_output=True)
    proto = onnx.load(str(out / "plain.onnx"), load_external_data=False)
    name = proto.graph.input[0].name
    cal = np.load(case / json.loads((case / "case.json").read_text())["calibration"])
    np.save(work / "calibration.npy", cal.astype(np.float32))
    # onnx2tf converts to a float SavedModel; its own -oiqt full-int8 step crashes with our
    # calibration data given by -cind (onnx2tf 1.29.24: an AttributeError in its accuracy
    # correction), and without -cind it calibrates on ImageNet-normalised sample images, not
    # the model's input range. So its SavedModel is quantised the way -oiqt does it
    # (TFLiteConverter, TFLITE_BUILTINS_INT8 + SELECT_TF_OPS, int8 I/O) on our calibration
    # data, in onnx2tf's Python, as a second measured step.
    # -kat with onnx2tf's own name for the input too (':' becomes '__'), else it takes the NHWC
    # input for NCHW and transposes it (seen: [1, 64, 64, 3] became [1, 64, 3, 64])
    cmd = [onnx2tf, "-i", str(out / "plain.onnx"), "-o", str(work), "-n", "-kat", name,
           name.replace(":", "__"), "-rtpo", *RTPO]
    env2 = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = measured(cmd, cwd=work, env=env2)
    res["command"] = " ".join(["onnx2tf", *cmd[1:]])
    if res["exit"] == 0:
        quant = measured([str(Path(onnx2tf).parent / "python"), "-c", QUANTISE, str(work),
                          str(work / "calibration.npy"),
                          str(work / "plain_full_integer_quant.tflite")], cwd=work, env=env2)
        res["quantise"] = quant
        res["seconds"] = round(res["seconds"] + quant["seconds"], 2)
        res["peak_rss_mb"] = max(res["peak_rss_mb"], quant["peak_rss_mb"])
    # a pipeline's cost: tf2onnx then onnx2tf (one after the other)
    res["pipeline_seconds"] = round(res["seconds"] + plain_onnx.get("seconds", 0), 2)
    res["pipeline_peak_rss_mb"] = max(res["peak_rss_mb"], plain_onnx.get("peak_rss_mb", 0))
    return res


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
    for pkg in ("tensorflow", "keras", "tf2onnx", "onnxruntime", "ethos-u-vela"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            pass
    if onnx2tf:
        py = str(Path(onnx2tf).parent / "python")
        probe = subprocess.run([py, "-c", "from importlib.metadata import version as v; "
                                "print(v('onnx2tf'), v('tensorflow'))"],
                               capture_output=True, text=True)
        if probe.returncode == 0:
            o2t, tf = probe.stdout.split()
            out["onnx2tf"] = f"{o2t} (with tensorflow {tf})"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true",
                    help="the whole zoo (ORDER) at 96x96 instead of REDUCED at 64x64")
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--models", default=None, help="comma-separated (default: see --full)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/rewriter_zoo"))
    ap.add_argument("--onnx2tf", default="/tmp/onnx2tf-venv/bin/onnx2tf",
                    help="onnx2tf's command (its own venv: it pins tensorflow 2.19, onnx 1.19 and "
                         "protobuf 4, which rewriter's own pins exclude); '' to leave it out")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite RESULTS.md and the chart from results/zoo.json")
    args = ap.parse_args(argv)
    from benchmarks.zoo_report import render_all

    if args.render:
        render_all(json.loads((args.results / "results" / "zoo.json").read_text()), args.results)
        return 0
    args.size = args.size or (96 if args.full else 64)
    args.models = args.models or ",".join(ORDER if args.full else REDUCED)
    onnx2tf = args.onnx2tf if args.onnx2tf and Path(args.onnx2tf).exists() else None
    if args.onnx2tf and not onnx2tf:
        raise SystemExit(f"{args.onnx2tf} not found: create its venv (see the docstring) or "
                         "pass --onnx2tf ''")
    models, targets = args.models.split(","), args.targets.split(",")
    start = time.perf_counter()
    meta = {"command": "PYTHONPATH=. python benchmarks/zoo.py " + " ".join(
                sys.argv[1:] if argv is None else argv),
            "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "size": args.size,
            "full": args.full,
            "workers": args.workers, "targets": targets, "machine": machine(),
            "versions": versions(onnx2tf), "onnx2tf_flags": ["-kat", "-rtpo", *RTPO]}
    meta["resumed"] = (args.workdir / "batch").exists() or (args.workdir / "baselines").exists()
    args.workdir.mkdir(parents=True, exist_ok=True)
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
