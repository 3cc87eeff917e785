"""int8 fidelity with and without the pre-quantisation rewrites, against the plain converter.

For each architecture (keras.applications, ``weights=None``, learned-looking BN statistics as in
``real_models.py --realistic``, structured images in [0, 255], calibration seed 1, held-out
seed 2), the same run measures full-int8 TFLite files (LiteRT builtin kernels) of:

* ``plain``: the original model through the converter (the baseline);
* ``cle``: after cross-layer equalisation (:func:`rewriter.tune.prequant.equalize`, exact in float);
* ``bias``: after empirical bias correction (:func:`rewriter.tune.prequant.correct_bias`, 2 rounds);
* ``cle+bias``: both.

Per variant: cosine and max |error| / max |ref| of the logits on the held-out images, and the
ratio of the int8 error (1 - cosine, and max relative error) to the plain converter's in the same
run (below 1: better than the plain converter), plus how far the rewritten float model moved
from the original (0 for exact rewrites, up to float rounding). Results go to
``benchmarks/results/prequant_int8.{json,md}``.

    PYTHONPATH=. python benchmarks/prequant_int8.py [--size 128] \
        [--models MobileNetV2,MobileNetV3Small,EfficientNetB0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from real_models import RESULTS, VERIFY_SAMPLES, build_arch  # noqa: E402

MODELS = ("MobileNetV2", "MobileNetV3Small", "EfficientNetB0")
VARIANTS = ("plain", "cle", "bias", "cle+bias")
#: Calibration samples the rewrites measure on (the converter calibrates on all of them).
MEASURE_SAMPLES = 8


def measure(model: Any, held: list[dict], reference: np.ndarray, calib: list[dict],
            path: Path) -> dict[str, float]:
    from rewriter.export.tflite import export_tflite
    from rewriter.verify.runners import LiteRTRunner

    name = model.outputs[0].name
    floats = np.concatenate([model.run(s)[name] for s in held])
    start = time.perf_counter()
    export_tflite(model, path, quantize="int8", calibration=calib)
    seconds = time.perf_counter() - start
    runner = LiteRTRunner(path)
    got = np.concatenate([runner.run(s)[runner.outputs[0]] for s in held])
    scale = float(np.abs(reference).max())
    cosine = float(np.dot(reference.ravel(), got.ravel())
                   / (np.linalg.norm(reference) * np.linalg.norm(got)))
    return {"cosine": cosine, "max_rel_error": float(np.abs(got - reference).max() / scale),
            "float_moved": float(np.abs(floats - reference).max() / scale),
            "export_seconds": round(seconds, 2)}


def run_model(arch: str, size: int, workdir: Path) -> dict[str, Any]:
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model
    from rewriter.tune.prequant import correct_bias, equalize

    case = build_arch(arch, size, True, workdir)
    model = load_model(case.path)
    key = model.inputs[0].name
    calib = [{key: x[None]} for x in np.load(case.calibration)]
    held = [{key: x[None]} for x in np.load(case.data)]
    name = model.outputs[0].name
    reference = np.concatenate([model.run(s)[name] for s in held])
    out = workdir / f"{arch}_{size}"

    def export(m: Any) -> str:
        return export_tflite(m, out / "bias_round.tflite", quantize="int8",
                             calibration=calib).path

    rows: dict[str, Any] = {}
    start = time.perf_counter()
    eq = equalize(model, calib[:MEASURE_SAMPLES])
    info = {"cle": {"pairs": len(eq.pairs), "seconds": round(time.perf_counter() - start, 2)}}
    models = {"plain": model, "cle": eq.model}
    for variant, base in (("bias", model), ("cle+bias", eq.model)):
        start = time.perf_counter()
        bc = correct_bias(base, calib[:MEASURE_SAMPLES], export)
        models[variant] = bc.model
        info[variant] = bc.to_json() | {"seconds": round(time.perf_counter() - start, 2)}
    for variant in VARIANTS:
        rows[variant] = measure(models[variant], held, reference, calib,
                                out / f"{variant.replace('+', '_')}.tflite")
        if variant == "plain":
            info["plain_layers"] = layer_profile(out / "plain.tflite", model, held[:2])
        plain = rows["plain"]
        rows[variant]["error_ratio"] = _ratio(1 - rows[variant]["cosine"], 1 - plain["cosine"])
        rows[variant]["max_rel_ratio"] = _ratio(rows[variant]["max_rel_error"],
                                                plain["max_rel_error"])
        _log(f"{arch} {variant}: {rows[variant]}")
    return {"model": arch, "size": size, "note": case.note, "variants": rows, "rewrites": info}


def layer_profile(path: Path, model: Any, held: list[dict]) -> dict[str, Any]:
    """Where the plain file's error comes from (:mod:`rewriter.verify.int8_layers`): the error
    each layer adds itself, and how much a layer multiplies the error entering it."""
    from rewriter.verify.int8_layers import int8_layer_errors

    layers = int8_layer_errors(str(path), model, held).layers
    added = np.array([x.added for x in layers if np.isfinite(x.added)])
    gain = np.array([x.error_out / x.error_in for x in layers
                     if x.error_in >= 0.01 and np.isfinite(x.error_out)
                     and x.ops[-1] not in ("MEAN", "ADD", "DEQUANTIZE")])
    return {"layers": len(layers), "added_median": round(float(np.median(added)), 4),
            "added_p90": round(float(np.percentile(added, 90)), 4),
            "gain_median": round(float(np.median(gain)), 3) if gain.size else None,
            "worst": [x.layer for x in sorted(layers, key=lambda x: -x.added)[:3]]}


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def render(results: dict[str, Any]) -> str:
    lines = ["# int8 fidelity: pre-quantisation rewrites vs the plain converter", "",
             f"Generated by `{results['command']}` on {results['date']} (TF "
             f"{results['versions'].get('tensorflow')}). Each model at {results['size']}x"
             f"{results['size']}, learned-looking BN statistics, {results['held_out']} held-out "
             "structured images; full int8 in LiteRT. *error ratio* = (1 - cosine) / the plain "
             "converter's (same run); *max rel ratio* likewise for max |error| / max |ref|; "
             "below 1 is better than the plain converter. *float moved*: how far the "
             "rewritten float model is from the original (max |d| / max |ref|).", "",
             "| model | variant | cosine | max rel error | error ratio | max rel ratio | "
             "float moved | rewrites |", "|---|---|---|---|---|---|---|---|"]
    for r in results["models"]:
        for variant, v in r["variants"].items():
            parts = []
            if "cle" in variant:
                parts.append(f"{r['rewrites']['cle']['pairs']} pair(s) equalised")
            if "bias" in variant:
                bias = r["rewrites"][variant]
                parts.append(f"{bias['layers']} bias correction(s) in {bias['iterations']} "
                             "round(s)")
            detail = "; ".join(parts)
            lines.append(f"| {r['model']} | {variant} | {v['cosine']:.5f} | "
                         f"{v['max_rel_error']:.4f} | {v['error_ratio']} | {v['max_rel_ratio']} | "
                         f"{v['float_moved']:.2g} | {detail} |")
    lines += ["", "Where the plain converter's error comes from (`rewriter.verify.int8_layers` on "
              "its file, 2 held-out images): the relative error each layer adds itself, and "
              "the median factor by which a conv/depthwise/activation layer multiplies the "
              "error entering it.", "",
              "| model | layers | added (median) | added (90th pct) | gain per layer (median) "
              "| layers adding most |", "|---|---|---|---|---|---|"]
    for r in results["models"]:
        p = r["rewrites"].get("plain_layers") or {}
        lines.append(f"| {r['model']} | {p.get('layers')} | {p.get('added_median')} | "
                     f"{p.get('added_p90')} | {p.get('gain_median')} | "
                     f"{', '.join(p.get('worst') or [])} |")
    lines += ["", finding(results)]
    return "\n".join(lines) + "\n"


def finding(results: dict[str, Any]) -> str:
    """The run's result in words, from its own figures."""
    best = []
    for r in results["models"]:
        ratios = {v: x["error_ratio"] for v, x in r["variants"].items()
                  if v != "plain" and x["error_ratio"] is not None}
        if ratios:
            v = min(ratios, key=ratios.__getitem__)
            best.append(f"{r['model']} {ratios[v]} ({v})")
    cos = [r["variants"]["plain"]["cosine"] for r in results["models"]]
    moved = [x["float_moved"] for r in results["models"] for v, x in r["variants"].items()
             if "bias" in v]
    return ("In this run the best error ratio per model is " + ", ".join(best)
            + f"; the plain converter's cosine is {min(cos):.3f}-{max(cos):.3f}"
            + (f"; bias correction moves the float model by {min(moved):.2g}-{max(moved):.2g} "
               "of the output scale" if moved else "") + ".")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--workdir", default="/tmp/rewriter-prequant")
    ap.add_argument("--render", metavar="JSON", help="only rewrite the .md from a results file")
    args = ap.parse_args(argv)
    md, js = RESULTS / "prequant_int8.md", RESULTS / "prequant_int8.json"
    if args.render:
        md.write_text(render(json.loads(Path(args.render).read_text())))
        return 0
    import tensorflow as tf

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results = {"command": "PYTHONPATH=. python benchmarks/prequant_int8.py --size "
                          f"{args.size} --models {args.models}",
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "size": args.size,
               "held_out": VERIFY_SAMPLES, "versions": {"tensorflow": tf.__version__},
               "models": [run_model(m, args.size, workdir) for m in args.models.split(",")]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    js.write_text(json.dumps(results, indent=2))
    md.write_text(render(results))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
