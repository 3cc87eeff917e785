"""Mixed precision against an accuracy target (issue 30): per model and target, int8 only, 16x8
only (the TFLite converter, as ``--quantize int8`` / ``16x8``) and the plan the search chooses
(``rewriter.tune.plan_search``: the worst int8 layers promoted to 16x8 by the AI Edge Quantizer
until every output reaches ``--accuracy`` on held-back data): cosine and top-1 agreement against
the float file on held-back inputs, measured on the target's runtime (TFLite Micro for tflm,
LiteRT for Ethos-U), Vela 5.2's estimate for ethos-u55-128 (time, SRAM, CPU ops), file size.

Models: keras.applications at ``--size`` (64), weights=None, BatchNormalization statistics set by
a training-mode pass (momentum 0) over the calibration images and gamma/beta drawn around 1/0
(``real_models.realistic_statistics``), so deep activations stay normalised. Data: seeded
structured images (``real_models.structured_images``): ``--calibration`` for calibration (seed
1), ``--heldback`` never seen by calibration or the search's per-layer probe (seed 2).

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

    from rewriter.tune.mixed import MixedQuantizer
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
    sig_in = run_input_name(flt, tmp)
    from rewriter.tune.headroom import widen_int16
    from rewriter.tune.rounding import Rounder

    # int16 headroom and GPTQ weight rounding on the calibration images (the search's move, as
    # the job's)
    rounder = Rounder(flt, [{sig_in: x[None]} for x in cal])
    if "16x8" in files:
        rounded = rounder(widen_int16(files["16x8"]))
        acc, top1 = accuracy(ref, run(rounded, held, runtime, tmp))
        row["16x8_rounded"] = {"cosine": acc["out"], "top1": top1.get("out"),
                               **vela_cost(rounded, tmp)}
        log(f"{name} {target} converter 16x8, weights rounded: {row['16x8_rounded']}")
    mq = MixedQuantizer(flt, [{sig_in: x[None]} for x in cal])
    try:
        _search(row, mq, name, target, args, ref, held, runtime, cal, sig_in, flt, tmp, log,
                files.get("16x8"), rounder)
    except Exception as exc:  # recorded, the run goes on (e.g. a runtime that refuses a plan)
        row["plan"] = {"error": _why(exc)}
    finally:
        mq.close()
    log(f"{name} {target} plan: {row['plan']}")
    return row


def _search(row: dict[str, Any], mq: Any, name: str, target: str, args: Any, ref: Any,
            held: Any, runtime: str, cal: Any, sig_in: str, flt: bytes, tmp: Path,
            log: Any, whole16: bytes | None, rounder: Any = None) -> None:
    from rewriter.job.precision import WHOLE_16X8
    from rewriter.tune.mixed import float_ops, ops_of
    from rewriter.tune.plan_search import accuracy, search
    from rewriter.tune.rounding import moves

    allowed = _allowed(target)
    # the converter's whole-model 16x8 file is a candidate where the target runs every op in 16x8
    # (as the job does: rewriter.job.precision)
    whole = ({WHOLE_16X8: whole16} if whole16 is not None
             and all(allowed(op.op) or op.op in ("QUANTIZE", "DEQUANTIZE") for op in mq.ops)
             else {})
    if allowed:
        res = search(mq, lambda d: accuracy(ref, run(d, held, runtime, tmp)),
                     lambda d: vela_cost(d, tmp) if target.startswith("ethos") else
                     {"size_kib": round(len(d) / 1024, 1)},
                     args.accuracy, [{sig_in: x[None]} for x in cal[:args.probe]], allowed,
                     log=lambda s: log(f"{name} {target} search: {s}"), whole=whole,
                     refine=None if rounder is None else moves(rounder))
        plan = (res.best.data if res.best.data is not None else
                mq.build({s: "16x8" for s in res.best.promoted}))
        row["plan"] = {"cosine": res.best.accuracy.get("out", 0.0),
                       "top1": res.best.top1.get("out"),
                       "met": res.met, "ops_16x8": len(res.best.promoted),
                       "whole": bool(res.best.label),
                       "ops": len(ops_of(flt)), "float_ops": float_ops(plan),
                       "promoted": [s.split(";")[0][-60:] for s in res.best.promoted],
                       "rounded": res.best.refined,
                       **vela_cost(plan, tmp)}
        # the quantizer's all-int8 file
        row["aeq_int8"] = {"cosine": res.int8.accuracy.get("out"), "error": res.int8.error}
        row["trials"] = [t.to_json() for t in res.trials]


def run_input_name(data: bytes, tmp: Path) -> str:
    from rewriter.verify.runners import LiteRTRunner

    path = tmp / "sig.tflite"
    path.write_bytes(data)
    return LiteRTRunner(path).inputs[0].name


def _allowed(target: str) -> Any:
    from rewriter.targets.registry import load_target

    t = load_target(target)
    return lambda op: op not in ("QUANTIZE", "DEQUANTIZE") and bool(t.int16_kernel(op))


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
        for key, label in (("int8", "int8 only"), ("16x8", "16x8 only"),
                           ("16x8_rounded", "16x8 only, int16 ranges 2x, weights by GPTQ"), ("plan", "plan"),
                           ("weights", "ceiling: int8 weights, float activations")):
            c = r.get(key)
            if not c:
                continue
            if "error" in c:
                out.append(f"| {r['model']} | {r['target']} | {label} | failed: {c['error']} "
                           "| | | | | |")
                continue
            if key == "plan":
                label = ("plan: whole model 16x8 (converter)" if c.get("whole") else
                         f"plan: {c['ops_16x8']}/{c['ops']} ops 16x8") + (
                    f", {c['rounded'].get('move', 'refined')}" if (c.get("rounded") or {}).get(
                        "kept") else ""
                ) + ("" if c["met"] else " (not met)")
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
            "tflm, LiteRT for Ethos-U); Vela 5.2 ethos-u55-128 estimate for every file; 'int8 "
            "only' and '16x8 only' are the TFLite converter, the plan is the search's choice "
            "(rewriter.tune.plan_search): the AI Edge Quantizer's file (rewriter.tune.mixed) or, "
            "where the target runs every op in 16x8, the converter's whole-model 16x8 file, a "
            "candidate too; every candidate is also tried with its int16 activation ranges 2x "
            "wider (rewriter.tune.headroom) and its int8 weights rounded by GPTQ on the "
            "calibration images (rewriter.tune.rounding), kept when better on the held-back "
            "images; '16x8 only, int16 ranges 2x, weights by GPTQ' is the converter's 16x8 file "
            "so refined. The ceiling: the float file with only its conv/dense weights "
            "rounded to nearest int8 per channel (LiteRT), which bounds every int8 and 16x8 plan "
            "with weights rounded to nearest. Weights drawn with keras.utils.set_random_seed(0).")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--calibration", type=int, default=64)
    p.add_argument("--heldback", type=int, default=32)
    p.add_argument("--probe", type=int, default=8)
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
