"""Why a log-mel front end loses accuracy in int8: what one int8 scale keeps of a mel power.

The audio family model of ``benchmarks/model_families.py`` (``tests.families.audio_saved_model``,
8000 samples, frame 256, step 128, 32 mels) on its 32 calibration clips
(``tests.families.waveforms``): the float mel power (the MatMul before ``log(. + 1e-6)``) is
quantized the way a per-tensor int8 tensor holds it (scale = calibrated max / 255, zero point at
0), the log is taken as the int8 LOG does (clamped at the calibrated minimum of the log-mel),
and the model's conv stack runs in float on that log-mel (``--inputs logmel``), so the figures
isolate the one tensor. Results: ``benchmarks/results/audio_int8_range.md``.

    PYTHONPATH=. python benchmarks/audio_int8_range.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
MEL = "StatefulPartitionedCall/MatMul:0"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def measure(tmp: Path) -> dict[str, float]:
    from rewriter.frontends import load_model
    from rewriter.frontends.options import LoadOptions
    from tests import families

    path = families.audio_saved_model(tmp / "audio", samples=8000, frame=256, step=128, mels=32)
    waves = families.waveforms(32, samples=8000)[:, 0]
    model = load_model(path)
    cut = load_model(path, LoadOptions(inputs=[families.LOGMEL]))
    x = model.inputs[0].name
    mel = np.concatenate([model.run({x: w[None]}, fetches=[MEL])[MEL] for w in waves])
    step = float(mel.max()) / 255
    logmel = np.log(mel + 1e-6)
    held = np.maximum(np.log(np.round(mel / step) * step + 1e-6), logmel.min())
    worst, want, got = 1.0, [], []
    for a, b in zip(logmel, held):
        fa = cut.run({cut.inputs[0].name: a[None].astype("f4")})
        fb = cut.run({cut.inputs[0].name: b[None].astype("f4")})
        worst = min(worst, *(_cos(fa[k], fb[k]) for k in fa))
        want.extend(fa.values())
        got.extend(fb.values())
    return {"peak": float(mel.max()), "median": float(np.median(mel)),
            "below_one_step": float((mel < step).mean()),
            "range_db_p1": float(10 * np.log10(mel.max() / np.percentile(mel, 1))),
            "log_err_max": float(np.abs(held - logmel).max()),
            "log_err_mean": float(np.abs(held - logmel).mean()),
            "logmel_cosine": _cos(logmel, held), "logits_cosine": worst,
            "logits_cosine_all": _cos(np.concatenate(want), np.concatenate(got))}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="audio_int8_") as tmp:
        r = measure(Path(tmp))
    text = "\n".join([
        "# int8 range of a log-mel front end", "",
        f"`PYTHONPATH=. python benchmarks/audio_int8_range.py` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
        "| mel power peak | median | below one int8 step | p1..peak | log-mel abs error "
        "max / mean | log-mel cosine | logits cosine, all clips / worst clip (only this tensor int8) |",
        "|---|---|---|---|---|---|---|",
        f"| {r['peak']:.4g} | {r['median']:.3g} | {r['below_one_step']:.1%} | "
        f"{r['range_db_p1']:.1f} dB | {r['log_err_max']:.2f} / {r['log_err_mean']:.2f} | "
        f"{r['logmel_cosine']:.4f} | {r['logits_cosine_all']:.4f} / {r['logits_cosine']:.4f} |", ""])
    out = ROOT / "benchmarks" / "results" / "audio_int8_range.md"
    out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
