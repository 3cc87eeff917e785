"""Mixed precision against an accuracy target (issue 30): per model and target, int8 only and
16x8 only (the plain TFLite converter, as its users run it) beside what ``rewrite --accuracy``
delivers (the job itself, its own CLI: rewrite, per-layer probe, the plan search over AI Edge
Quantizer plans and the converter's whole-model 16x8 file, its refine moves, ``--recover`` and the
approximation move): cosine and top-1 agreement against the float file on held-back inputs,
measured here on the target's runtime (TFLite Micro for tflm, LiteRT for Ethos-U) for every file
alike, Vela 5.2's estimate for ethos-u55-128 (time, SRAM, CPU ops), file size.

Models: keras.applications at ``--size`` (64), weights=None, BatchNormalization statistics set by
a training-mode pass (momentum 0) over the calibration images and gamma/beta drawn around 1/0
(``real_models.realistic_statistics``), so deep activations stay normalised. Data: seeded
structured images (``real_models.structured_images``): ``--calibration`` for calibration (seed
1), ``--heldback`` never seen by calibration (seed 2), given to the job as ``--data``.

    nice python benchmarks/mixed_precision.py      # writes benchmarks/results/mixed_precision.*
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import stamp  # noqa: E402

MODELS = ("MobileNetV2", "MobileNetV3Large", "ResNet50")
TARGETS = ("ethos-u55-128", "tflm")


def build(name: str, size: int, cal: np.ndarray) -> Any:
    import keras
    from real_models import realistic_statistics

    keras.utils.set_random_seed(0)  # weights=None draws the weights: the same net every run
    km = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    realistic_statistics(km, cal)
    return km


#: Where the plain converter's files came from (the baseline cache or this run), per call.
CONVERTED: list[dict[str, Any]] = []


def convert(km: Any, size: int, quantize: str, cal: np.ndarray) -> bytes:
    """The plain converter's file, from the baseline cache (benchmarks/baseline_cache.py) when
    the same model (architecture and weights), data, call and tool versions gave it before."""
    import inspect
    import json as _json

    from benchmarks import baseline_cache as bc

    parts = {"config": _json.dumps(km.get_config(), sort_keys=True, default=str),
             "weights": bc.array_hash(*km.get_weights()), "size": size, "quantize": quantize,
             "calibration": bc.array_hash(*cal), "call": inspect.getsource(_convert)}
    data, info = bc.cached_bytes("mixed-precision-converter", parts,
                                 bc.tool_versions(("tensorflow", "keras", "numpy")),
                                 lambda: _convert(km, size, quantize, cal))
    if info:
        CONVERTED.append(dict(info, model=km.name, quantize=quantize))
    return data


def _convert(km: Any, size: int, quantize: str, cal: np.ndarray) -> bytes:
    import keras
    import tensorflow as tf

    inp = keras.Input((size, size, 3), batch_size=1)
    conv = tf.lite.TFLiteConverter.from_keras_model(keras.Model(inp, km(inp, training=False)))
    if quantize != "none":
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.representative_dataset = lambda: ([x[None]] for x in cal)
        if quantize == "int8":
            conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            conv.inference_input_type = conv.inference_output_type = tf.int8
        else:
            conv.target_spec.supported_ops = [
                tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
            conv.inference_input_type = conv.inference_output_type = tf.int16
    return bytes(conv.convert())


def run(data: bytes, samples: list[np.ndarray], runtime: str, tmp: Path) -> list[dict]:
    from rewriter.verify.runners import LiteRTRunner
    from rewriter.verify.tflm import TflmRunner

    path = tmp / f"m{abs(hash(data)) % 10**9}.tflite"
    path.write_bytes(data)
    runner = (TflmRunner if runtime == "tflm" else LiteRTRunner)(path)
    name = runner.inputs[0].name
    feeds = [{name: x[None]} for x in samples]
    outs = runner.run_many(feeds) if runtime == "tflm" else [runner.run(f) for f in feeds]
    return [{"out": next(iter(o.values()))} for o in outs]


def vela_cost(data: bytes, tmp: Path) -> dict[str, Any]:
    from rewriter.targets.vela import run_vela

    path = tmp / "cost.tflite"
    path.write_bytes(data)
    v = run_vela(path, "ethos-u55-128")
    t = v.inference_time
    return {"vela_ms": round(t * 1e3, 3) if t is not None else None,
            "sram_kib": float(v.csv.get("sram_memory_used") or 0),
            "cpu_ops": v.cpu_ops, "npu_ops": v.npu_ops, "size_kib": round(len(data) / 1024, 1)}


def one(name: str, target: str, args: Any, tmp: Path, log: Any) -> dict[str, Any]:
    from real_models import structured_images

    from rewriter.tune.plan_search import accuracy

    size = args.size
    cal = structured_images(args.calibration, (size, size, 3), 1, (0.0, 255.0))
    held = structured_images(args.heldback, (size, size, 3), 2, (0.0, 255.0))
    km = build(name, size, cal / 127.5 - 1.0 if name != "MobileNetV3Large" else cal)
    if name != "MobileNetV3Large":  # V3 has its own Rescaling; V2/ResNet50 take [-1, 1] here
        cal, held = cal / 127.5 - 1.0, held / 127.5 - 1.0
    cal, held = list(cal.astype(np.float32)), list(held.astype(np.float32))
    runtime = "tflm" if target == "tflm" else "litert"
    first = len(CONVERTED)
    flt = convert(km, size, "none", cal)
    ref = run(flt, held, "litert", tmp)
    row: dict[str, Any] = {"model": name, "target": target, "runtime": runtime}
    files: dict[str, bytes] = {}
    for mode in ("int8", "16x8"):
        try:  # MobileNetV3Large: the converter has no 16x8 HARD_SWISH
            data = convert(km, size, mode, cal)
            files[mode] = data
            acc, top1 = accuracy(ref, run(data, held, runtime, tmp))
        except Exception as exc:  # recorded, the run goes on
            row[mode] = {"error": _why(exc)}
            log(f"{name} {target} converter {mode}: {row[mode]}")
            continue
        row[mode] = {"cosine": acc["out"], "top1": top1.get("out"), **vela_cost(data, tmp)}
        log(f"{name} {target} converter {mode}: {row[mode]}")
    # the ceiling of every plan: the weights alone in int8 (per channel), activations float
    from rewriter.tune.mixed import int8_weights_only

    acc, top1 = accuracy(ref, run(int8_weights_only(flt)[0], held, "litert", tmp))
    row["weights"] = {"cosine": acc["out"], "top1": top1.get("out")}
    log(f"{name} {target} int8 weights only: {row['weights']}")
    row["converter_cache"] = CONVERTED[first:]
    try:
        row["plan"] = _job(km, name, target, args, cal, held, ref, runtime, tmp, log)
    except Exception as exc:  # recorded, the run goes on
        row["plan"] = {"error": _why(exc)}
    log(f"{name} {target} plan: {row['plan']}")
    return row


def _job(km: Any, name: str, target: str, args: Any, cal: list[np.ndarray], held: list[np.ndarray],
         ref: Any, runtime: str, tmp: Path, log: Any) -> dict[str, Any]:
    """``rewrite MODEL --target T --accuracy A --calibration CAL --data HELD`` as a user runs it
    (a subprocess of the CLI); its artifact measured here as every other file is, beside what
    its report says it chose."""
    import subprocess

    from rewriter.tune.plan_search import accuracy

    work = tmp / f"job_{name}_{target}"
    work.mkdir(parents=True, exist_ok=True)
    km.save(work / "model.keras")
    np.save(work / "cal.npy", np.stack(cal))
    np.save(work / "held.npy", np.stack(held))
    out = work / "out"
    cmd = [sys.executable, "-m", "rewriter", "run", str(work / "model.keras"), "--target", target,
           "--accuracy", str(args.accuracy), "--calibration", str(work / "cal.npy"),
           "--data", str(work / "held.npy"), "--samples", str(len(held)), "-o", str(out), "-q"]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = round(time.time() - start, 1)
    log(f"{name} {target} job: exit {proc.returncode} in {seconds} s")
    report_path = out / "report.json"
    if not report_path.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"error": f"exit {proc.returncode}, no report: {tail[0][:200]}",
                "exit": proc.returncode, "seconds": seconds}
    report = json.loads(report_path.read_text())
    artifact = Path(report["export"]["path"])
    data = artifact.read_bytes()
    acc, top1 = accuracy(ref, run(data, held, runtime, tmp))
    row = {"cosine": acc["out"], "top1": top1.get("out"), "exit": proc.returncode,
           "seconds": seconds, "met": acc["out"] >= args.accuracy, **vela_cost(data, tmp),
           "chosen": chosen(report), "summary": report.get("summary")}
    return row


def chosen(report: dict[str, Any]) -> str:
    """What the job's artifact is, in a few words, from its report: the plan delivered (ops in
    16x8, the refine move kept), the fine-tuning kept, the approximation kept."""
    precision = report.get("precision") or {}
    plan = precision.get("plan") or {}
    if not precision:
        parts = [f"{report.get('quantize')} file (no plan searched)"]
    elif precision.get("delivered"):
        total = len(precision.get("layers") or [])
        parts = [plan.get("label") or f"{plan.get('promoted', 0)}/{total} ops 16x8"]
        move = plan.get("refined") or {}
        if move.get("kept") and move.get("move"):
            parts.append(str(move["move"]))
    else:
        parts = [f"{report.get('quantize')} file (no plan delivered)"]
    if (report.get("recover") or {}).get("kept"):
        parts.append("fine-tuned (--recover)")
    approx = report.get("approximation") or {}
    if approx.get("kept"):  # its file replaced the others: the whole model in 16x8, one rule
        parts = [f"the whole model in 16x8 with {approx.get('rule')} (approximate)"]
    return ", ".join(parts)


def _why(exc: BaseException) -> str:
    """``RuntimeError: <the message's last line>``, at most 200 characters of it."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip()] or [""]
    return f"{type(exc).__name__}: {lines[-1][:200]}"


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| model | target | precision | cosine | top-1 | Vela ms | SRAM KiB | size KiB | "
           "CPU ops |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("failed"):  # the model or its float file could not be made or measured
            out.append(f"| {r['model']} | {r['target']} | every file | failed: {r['failed']} "
                       "| | | | | |")
            continue
        for key, label in (("int8", "int8 only (converter)"), ("16x8", "16x8 only (converter)"),
                           ("plan", "rewrite --accuracy"),
                           ("weights", "ceiling: int8 weights, float activations")):
            c = r.get(key)
            if not c:
                continue
            if "error" in c:
                out.append(f"| {r['model']} | {r['target']} | {label} | failed: {c['error']} "
                           "| | | | | |")
                continue
            if key == "plan":
                label = (f"rewrite --accuracy (exit {c['exit']}): {c['chosen']}"
                         + ("" if c["met"] else " (not met)"))
            top1 = "" if c.get("top1") is None else f"{c['top1']:.3f}"
            cost = " | ".join("" if c.get(k) is None else str(c[k])
                              for k in ("vela_ms", "sram_kib", "size_kib", "cpu_ops"))
            out.append(f"| {r['model']} | {r['target']} | {label} | {c['cosine']:.4f} | {top1} "
                       f"| {cost} |")
    return "\n".join(out)


def _about(args: Any) -> str:
    return (f"{args.size}x{args.size}, weights=None with BN statistics from a training-mode "
            f"pass; {args.calibration} calibration images, {args.heldback} held-back images "
            "(cosine and top-1 against the float file on the target's runtime: TFLite Micro for "
            "tflm, LiteRT for Ethos-U); Vela 5.2 ethos-u55-128 estimate for every file. 'int8 "
            "only' and '16x8 only' are the plain TFLite converter on the Keras model (its "
            "representative dataset the calibration images); 'rewrite --accuracy' is the job as "
            f"a user runs it: `rewrite model.keras --target T --accuracy {args.accuracy} "
            "--calibration cal.npy --data held.npy --samples N` (the held-back images as --data, "
            "so its verdict rests on them), its artifact measured here like the other files; "
            "the words after it say what the job delivered (its report: the plan's ops in 16x8 "
            "and the refine move kept, or the int8 file when no plan was delivered; "
            "--recover or the approximation move when kept). The ceiling: the float file with "
            "only its conv/dense weights rounded to nearest int8 per channel (LiteRT), which "
            "bounds every int8 and 16x8 file with weights rounded to nearest (GPTQ rounding, a "
            "move of the job's search, can pass it). Weights drawn with "
            "keras.utils.set_random_seed(0).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--calibration", type=int, default=64)
    p.add_argument("--heldback", type=int, default=32)
    p.add_argument("--accuracy", type=float, default=0.99)
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "mixed_precision"))
    p.add_argument("--summarize", metavar="JSON", help="write the .md of a run's .json (a run "
                   "stopped early: the rows it finished), stamped with --root's commit and "
                   "--command")
    p.add_argument("--root", default=str(ROOT), help="the checkout the run measured")
    p.add_argument("--command", help="the command of the run being summarised")
    args = p.parse_args(argv)
    if args.summarize:
        rows = json.loads(Path(args.summarize).read_text())
        md_path = Path(args.summarize).with_suffix(".md")
        md_path.write_text(f"# Mixed precision: int8, 16x8 and the chosen plan at cosine >= "
                           f"{args.accuracy}\n\nRows the run finished before it was stopped "
                           f"(see the command). {_about(args)}\n\n{table(rows)}\n")
        stamp.stamp_files([md_path, Path(args.summarize)], "mixed_precision.py", argv,
                          command=args.command, root=Path(args.root))
        print(md_path.read_text())
        return 0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    start = time.time()

    def log(s: str) -> None:
        print(f"[{time.time() - start:7.1f}s] {s}", flush=True)

    with tempfile.TemporaryDirectory(prefix="mixed_bench_") as tmp:
        for name in args.models.split(","):
            for target in args.targets.split(","):
                try:
                    rows.append(one(name, target, args, Path(tmp), log))
                except Exception as exc:  # a row saying why; the run goes on to the next
                    rows.append({"model": name, "target": target, "failed": _why(exc)})
                    log(f"{name} {target} failed: {rows[-1]['failed']}")
                Path(f"{out}.json").write_text(json.dumps(rows, indent=1))
    md = (f"# Mixed precision: int8, 16x8 and the chosen plan at cosine >= {args.accuracy}\n\n"
          f"{_about(args)} {time.time() - start:.0f} s.\n\n{table(rows)}\n")
    from benchmarks import baseline_cache as bc

    cached = bc.note([c for r in rows for c in r.get("converter_cache", [])])
    md += f"\n{cached}\n" if cached else ""
    Path(f"{out}.md").write_text(md)
    stamp.stamp_files([Path(f"{out}.md"), Path(f"{out}.json")], "mixed_precision.py", argv)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
