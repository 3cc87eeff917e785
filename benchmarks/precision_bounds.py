"""What stops ``--accuracy 0.99`` where no plan reached it (issue 30): three measurements.

* ``mobilenetv2``: keras.applications MobileNetV2 64x64 as ``benchmarks/mixed_precision.py``
  builds it (seeded weights=None, BN statistics from a training-mode pass; 64 calibration and 32
  held-back structured images), in LiteRT against the float file: the converter's int8 and 16x8
  files, the AI Edge Quantizer with every op in 16x8 (with its own int8 input, and with the
  int16 input ``rewriter.tune.mixed.io_recipe`` gives it), and the float file with only its conv/dense
  weights rounded to int8 per channel (``rewriter.tune.mixed.int8_weights_only``: the ceiling of
  every plan with int8 weights). Also whether the BN statistics are set: the held-back
  inference-mode outputs of two BN layers, as (x - beta) / gamma.
* ``audio``: the audio family model (``tests.families.audio_saved_model``) by the job with
  ``--quantize 16x8`` on ethos-u55-128 and tflm (32 clips, the last 8 held back); each file run
  in LiteRT on the held-back clips, and Vela's estimate of each file for ethos-u55-128.
* ``basic_pitch``: Basic Pitch whole on onnx by the job (16 clips); the onnx file against TF per
  output (max |d| / max |ref| over 8 clips) beside TF against itself with each input sample
  nudged by one ulp (the model's own float32 sensitivity).

    PYTHONPATH=. python benchmarks/precision_bounds.py   # benchmarks/results/precision_bounds.*
"""

from __future__ import annotations

import argparse
import contextlib
import io
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

PARTS = ("mobilenetv2", "audio", "basic_pitch")


def mobilenetv2(tmp: Path) -> dict[str, Any]:
    import keras
    import mixed_precision as mp
    from real_models import structured_images

    from rewriter.tune.mixed import MixedQuantizer, int8_weights_only
    from rewriter.tune.plan_search import accuracy

    size = 64
    cal = structured_images(64, (size, size, 3), 1, (0.0, 255.0)) / 127.5 - 1.0
    held = structured_images(32, (size, size, 3), 2, (0.0, 255.0)) / 127.5 - 1.0
    km = mp.build("MobileNetV2", size, cal)
    cal, held = list(cal.astype(np.float32)), list(held.astype(np.float32))
    out: dict[str, Any] = {"bn": {}}
    bns = [lay for lay in km.layers if isinstance(lay, keras.layers.BatchNormalization)]
    for lay in (bns[len(bns) // 2], bns[-1]):
        y = np.asarray(keras.Model(km.input, lay.output)(np.stack(held), training=False))
        y = (y - np.asarray(lay.beta)) / np.asarray(lay.gamma)
        out["bn"][lay.name] = {"mean": float(y.mean()), "std": float(y.std())}
    flt = mp.convert(km, size, "none", cal)
    ref = mp.run(flt, held, "litert", tmp)
    name = _input_name(flt, tmp)
    mq = MixedQuantizer(flt, [{name: x[None]} for x in cal])
    allowed = _int16_kernel("ethos-u55-128")
    files = {"converter int8": mp.convert(km, size, "int8", cal),
             "converter 16x8": mp.convert(km, size, "16x8", cal),
             "quantizer, every op 16x8 (its own int8 input)":
                 mq.build({o.scope: "16x8" for o in mq.ops if allowed(o.op)},
                          quantizer_io=True),
             "quantizer, every op 16x8 (int16 input, as the job builds it)":
                 mq.build({o.scope: "16x8" for o in mq.ops if allowed(o.op)}),
             "int8 weights only, float activations": int8_weights_only(flt)[0]}
    mq.close()
    for label, data in files.items():
        acc, top1 = accuracy(ref, mp.run(data, held, "litert", tmp))
        out[label] = {"cosine": acc["out"], "top1": top1.get("out")}
    return out


def audio(tmp: Path) -> dict[str, Any]:
    from rewriter.cli import main
    from rewriter.frontends import load_model
    from rewriter.targets.vela import run_vela
    from rewriter.tune.plan_search import accuracy
    from rewriter.verify.runners import LiteRTRunner
    from tests import families

    path = families.audio_saved_model(tmp / "audio", samples=8000, frame=256, step=128, mels=32)
    clips = families.waveforms(32, samples=8000)[:, 0]
    np.save(tmp / "clips.npy", clips)
    model = load_model(path)
    held = clips[24:]
    out: dict[str, Any] = {}
    for target in ("ethos-u55-128", "tflm"):
        job = tmp / target
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", str(path), "--target", target, "-o", str(job), "-q",
                         "--calibration", str(tmp / "clips.npy"), "--quantize", "16x8"])
        report = json.loads((job / "report.json").read_text())
        lite = LiteRTRunner(job / "model.tflite")
        feeds = [{lite.inputs[0].name: np.asarray(x, np.float32).reshape(lite.inputs[0].shape)}
                 for x in held]
        got = [lite.run(f) for f in feeds]
        refs = [dict(zip(got[0], model.run({model.inputs[0].name: f[lite.inputs[0].name]})
                         .values(), strict=True)) for f in feeds]
        v = run_vela(job / "model.tflite", "ethos-u55-128")
        out[f"{target} file"] = {
            "exit": code, "rules": [r.get("rule") for r in report["rules_applied"]],
            "litert_cosine": min(accuracy(refs, got)[0].values()),
            "vela_npu": v.npu_ops, "vela_cpu": v.cpu_ops,
            "vela_ms": round(v.inference_time * 1e3, 3) if v.inference_time else None,
            "sram_kib": float(v.csv.get("sram_memory_used") or 0)}
    return out


def basic_pitch(tmp: Path) -> dict[str, Any]:
    import model_families as mf
    import onnxruntime as ort

    from rewriter.cli import main
    from rewriter.frontends import load_model
    from tests import families

    waves = families.waveforms(16, samples=mf.BP_SAMPLES)[:, :, :, None]
    np.save(tmp / "bp.npy", waves[:, 0])
    job = tmp / "bp"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", str(mf.BASIC_PITCH), "--target", "onnx", "-o", str(job), "-q",
                     "--calibration", str(tmp / "bp.npy")])
    report = json.loads((job / "report.json").read_text())
    model = load_model(job / "saved_model")
    sess = ort.InferenceSession(str(job / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst: dict[str, list[float]] = {}
    for x in waves[:8, 0].astype(np.float32):
        feed = x[None]
        nudged = (feed + np.spacing(np.abs(feed)) * rng.choice([-1, 1], feed.shape)
                  ).astype(np.float32)
        a = model.run({model.inputs[0].name: feed})
        b = model.run({model.inputs[0].name: nudged})
        o = dict(zip([i.name for i in sess.get_outputs()],
                     sess.run(None, {sess.get_inputs()[0].name: feed}), strict=True))
        for n, r in a.items():
            r = np.asarray(r, np.float64)
            scale = float(np.abs(r).max()) or 1.0
            onnx_out = next(v for k, v in o.items() if n.split(":")[0].endswith(k.split(":")[0])
                            or k.split(":")[0].endswith(n.split(":")[0]))
            w = worst.setdefault(n.split(":")[0].rsplit("/", 1)[-1], [0.0, 0.0])
            w[0] = max(w[0], float(np.abs(np.asarray(b[n]) - r).max()) / scale)
            w[1] = max(w[1], float(np.abs(np.asarray(onnx_out).reshape(r.shape) - r).max())
                       / scale)
    return {"exit": code, "rules": [r.get("rule") for r in report["rules_applied"]],
            "outputs": {n: {"tf_vs_tf_nudged": e[0], "tf_vs_onnx": e[1]}
                        for n, e in worst.items()}}


def markdown(res: dict[str, Any], seconds: float) -> str:
    lines = ["# What stops --accuracy 0.99 (issue 30)", ""]
    m = res.get("mobilenetv2")
    if m:
        lines += ["## MobileNetV2 64x64 (LiteRT, 32 held-back images)", "",
                  "BN statistics set: held-back inference-mode (x - beta) / gamma: "
                  + "; ".join(f"{k} mean {v['mean']:.3f} std {v['std']:.3f}"
                              for k, v in m["bn"].items()) + ".", "",
                  "| file | cosine | top-1 |", "|---|---|---|"]
        lines += [f"| {k} | {v['cosine']:.4f} | {v['top1']:.3f} |" for k, v in m.items()
                  if k != "bn"]
        lines.append("")
    a = res.get("audio")
    if a:
        lines += ["## Audio family, --quantize 16x8 (8 held-back clips, LiteRT; Vela "
                  "ethos-u55-128)", "", "| file | job exit | rules | cosine | Vela NPU/CPU | "
                  "Vela ms | SRAM KiB |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {v['exit']} | {', '.join(v['rules'])} | {v['litert_cosine']:.4f} | "
                  f"{v['vela_npu']} / {v['vela_cpu']} | {v['vela_ms']} | {v['sram_kib']} |"
                  for k, v in a.items()]
        lines.append("")
    b = res.get("basic_pitch")
    if b:
        lines += ["## Basic Pitch whole on onnx (8 clips; max |d| / max |ref| per output)", "",
                  f"Job exit {b['exit']}, rules applied: {', '.join(b['rules']) or 'none'}.", "",
                  "| output | TF vs TF, input nudged 1 ulp | TF vs the onnx file |",
                  "|---|---|---|"]
        lines += [f"| {k} | {v['tf_vs_tf_nudged']:.1e} | {v['tf_vs_onnx']:.1e} |"
                  for k, v in b["outputs"].items()]
        lines.append("")
    lines.append(f"{seconds:.0f} s.")
    return "\n".join(lines) + "\n"


def _input_name(data: bytes, tmp: Path) -> str:
    from rewriter.verify.runners import LiteRTRunner

    path = tmp / "sig.tflite"
    path.write_bytes(data)
    return LiteRTRunner(path).inputs[0].name


def _int16_kernel(target: str) -> Any:
    """op -> whether ``target`` has a 16x8 kernel for it (QUANTIZE/DEQUANTIZE never promoted)."""
    from rewriter.targets.registry import load_target

    t = load_target(target)
    return lambda op: op not in ("QUANTIZE", "DEQUANTIZE") and bool(t.int16_kernel(op))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", default=",".join(PARTS))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "precision_bounds"))
    args = p.parse_args(argv)
    start = time.time()
    res: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="precision_bounds_") as tmp:
        for part in args.parts.split(","):
            res[part] = globals()[part](Path(tmp))
            print(f"[{time.time() - start:6.0f}s] {part}: {json.dumps(res[part])}", flush=True)
    out = Path(args.out)
    Path(f"{out}.json").write_text(json.dumps(res, indent=1) + "\n")
    Path(f"{out}.md").write_text(markdown(res, time.time() - start))
    stamp.stamp_files([Path(f"{out}.md"), Path(f"{out}.json")], "precision_bounds.py", argv)
    print(Path(f"{out}.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
