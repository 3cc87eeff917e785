"""The 16x8 remedy measured on the audio family model: int16 activations, int8 weights.

``rewrite`` has no 16x8 mode (``--quantize`` is int8, float16 or none), so this script measures
what the range diagnosis's third remedy would give: the audio model of
``benchmarks/model_families.py`` (``tests.families.audio_saved_model``, 8000 samples, frame
256, step 128, 32 mels; 32 tone clips of ``tests.families.waveforms`` as calibration and
verification data, as there) is rewritten by the job for each target (``rewrite run --target
T``, in-process), and the rewritten ``saved_model/`` the job writes is converted by the TFLite
converter with ``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8`` (float I/O, the
same 32 clips as representative data). Per target: the job's int8 cosine (from its report), the
job's int8 file and the 16x8 file's cosine to the original model in LiteRT (all clips / worst clip), the target's
verdict on the file (its op table: ops it would not run), Vela 5.2's NPU/CPU operators
(ethos-u55-128) and the cosine of TFLite Micro's own interpreter on the first 4 clips (tflm).
Results: ``benchmarks/results/audio_16x8.md``.

    PYTHONPATH=. python benchmarks/audio_16x8.py
"""

from __future__ import annotations

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
TARGETS = ("ethos-u55-128", "tflm")


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def convert_16x8(saved_model: Path, waves: np.ndarray, out: Path) -> Path:
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_saved_model(str(saved_model))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ({"waveform": w[None].astype(np.float32)}
                                           for w in waves)
    conv.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
    out.write_bytes(conv.convert())
    return out


def measure(target: str, path: Path, waves: np.ndarray, want: list[np.ndarray],
            tmp: Path) -> dict[str, Any]:
    from rewriter.cli import main
    from rewriter.targets import load_target
    from rewriter.verify.runners import LiteRTRunner

    out = tmp / f"job-{target}"
    np.save(tmp / "waves.npy", waves)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", str(path), "--target", target, "-o", str(out), "-q",
                     "--calibration", str(tmp / "waves.npy")])
    report = json.loads((out / "report.json").read_text())
    int8 = min(o["cosine"] for o in report["equivalence"]["artifact"]["outputs"].values())
    f16 = convert_16x8(out / "saved_model", waves, tmp / f"{target}_16x8.tflite")
    runner = LiteRTRunner(f16)
    got = [runner.run({"waveform": w[None]})[runner.outputs[0]] for w in waves]
    runner8 = LiteRTRunner(out / "model.tflite")
    got8 = [runner8.run({"waveform": w[None]})[runner8.outputs[0]] for w in waves]
    check = load_target(target).check_artifact(str(f16))
    row: dict[str, Any] = {
        "target": target, "job_exit": code, "int8_cosine": int8,
        "int8_cosine_all": _cos(np.concatenate(want), np.concatenate(got8)),
        "int8_cosine_worst": min(_cos(a, b) for a, b in zip(want, got8)),
        "int16x8_cosine_all": _cos(np.concatenate(want), np.concatenate(got)),
        "int16x8_cosine_worst": min(_cos(a, b) for a, b in zip(want, got)),
        "unsupported": sorted({u["op"] for u in check.unsupported_summary()}),
        "ops": sorted(set(_ops(f16)))}
    if target.startswith("ethos"):
        from rewriter.targets.vela import run_vela

        v = run_vela(f16, target)
        row["vela"] = (f"{v.npu_ops} NPU / {v.cpu_ops} CPU"
                       + (f" ({', '.join(sorted({c.op for c in v.cpu_reasons}))})"
                          if v.cpu_reasons else ""))
    if target == "tflm":
        from rewriter.verify.runners import RunnerError
        from rewriter.verify.tflm import TflmRunner

        try:
            outs = TflmRunner(f16).run_many([{"waveform": w[None]} for w in waves[:4]])
            row["tflm_cosine"] = min(_cos(a, next(iter(o.values())))
                                     for a, o in zip(want, outs))
        except RunnerError as exc:
            row["tflm_cosine"] = f"fails: {str(exc).splitlines()[0][:160]}"
    return row


def _ops(path: Path) -> list[str]:
    from rewriter.export.tflite import tflite_ops

    return tflite_ops(path.read_bytes())[0]


def main() -> int:
    from rewriter.frontends import load_model
    from tests import families

    rows = []
    with tempfile.TemporaryDirectory(prefix="audio_16x8_") as tmp:
        tmp = Path(tmp)
        path = families.audio_saved_model(tmp / "audio", samples=8000, frame=256, step=128,
                                          mels=32)
        waves = families.waveforms(32, samples=8000)[:, 0]
        model = load_model(path)
        name = model.inputs[0].name
        want = [next(iter(model.run({name: w[None]}).values())) for w in waves]
        for target in TARGETS:
            rows.append(measure(target, path, waves, want, tmp))
            print(json.dumps(rows[-1]), flush=True)
    lines = ["# The audio model in 16x8 (int16 activations, int8 weights)", "",
             f"`PYTHONPATH=. python benchmarks/audio_16x8.py` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             "| target | job (int8): exit, cosine in its report | int8 file: cosine all clips / "
             "worst clip (LiteRT) | 16x8 file: cosine all clips / worst clip (LiteRT) | ops the "
             "target's table refuses in the 16x8 file | Vela | TFLite Micro (4 clips) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        tflm = r.get("tflm_cosine", "")
        tflm = f"runs, cosine {tflm:.4f}" if isinstance(tflm, float) else tflm
        lines.append(f"| {r['target']} | {r['job_exit']}, {r['int8_cosine']:.4f} | "
                     f"{r['int8_cosine_all']:.4f} / {r['int8_cosine_worst']:.4f} | "
                     f"{r['int16x8_cosine_all']:.4f} / {r['int16x8_cosine_worst']:.4f} | "
                     f"{', '.join(r['unsupported']) or 'none'} | {r.get('vela', '')} | "
                     f"{tflm} |")
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / "audio_16x8.md").write_text(text)
    (ROOT / "benchmarks" / "results" / "audio_16x8.json").write_text(json.dumps(rows, indent=2))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
