"""The audio family model in the job's 16x8 mode (int16 activations, int8 weights) beside int8.

The audio model of ``benchmarks/model_families.py`` (``tests.families.audio_saved_model``, 8000
samples, frame 256, step 128, 32 mels; 32 tone clips of ``tests.families.waveforms`` as the one
set of data, ``--calibration``) is run by the job per target twice, in-process: ``rewrite run
--target T --calibration clips.npy`` (int8) and the same with ``--quantize 16x8``. The job holds
the last 8 clips back and calibrates on the other 24, so each cosine is the job's own figure on
8 clips calibration never saw (report.json ``equivalence.artifact``, in the target's runtime:
TFLite Micro for tflm, LiteRT for ethos-u55-128), with Vela 5.2's NPU/CPU operators for Ethos-U.
Results: ``benchmarks/results/audio_16x8.md`` (and ``.json``), stamped.

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


def job(target: str, path: Path, clips: Path, out: Path, quantize: str) -> dict[str, Any]:
    from rewriter.cli import main

    args = ["run", str(path), "--target", target, "-o", str(out), "-q", "--calibration",
            str(clips)] + (["--quantize", quantize] if quantize != "int8" else [])
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    report = json.loads((out / "report.json").read_text())
    art = (report.get("equivalence") or {}).get("artifact") or {}
    cos = min((o["cosine"] for o in (art.get("outputs") or {}).values()), default=None)
    vela = report.get("vela") or {}
    return {"target": target, "quantize": quantize, "exit": code, "cosine": cos,
            "runtime": art.get("runtime"), "samples": art.get("samples"),
            "vela": (f"{vela['npu_ops']} NPU / {vela['cpu_ops']} CPU" if vela else ""),
            "unsupported_after": sorted({u["op"] for u in report.get("unsupported_after") or []}),
            "data": report["data"]["verification"].get("verdict_rests_on"),
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> int:
    from benchmarks import stamp
    from tests import families

    rows = []
    with tempfile.TemporaryDirectory(prefix="audio_16x8_") as tmp:
        tmp = Path(tmp)
        path = families.audio_saved_model(tmp / "audio", samples=8000, frame=256, step=128,
                                          mels=32)
        np.save(tmp / "clips.npy", families.waveforms(32, samples=8000)[:, 0])
        for target in TARGETS:
            for quantize in ("int8", "16x8"):
                rows.append(job(target, path, tmp / "clips.npy",
                                tmp / f"{target}-{quantize}", quantize))
                print(json.dumps(rows[-1]), flush=True)
    lines = ["# The audio model in 16x8 (int16 activations, int8 weights), by the job", "",
             "`rewrite run audio --target T --calibration clips.npy [--quantize 16x8]`: 32 "
             "clips, the last 8 held back for the verdict, 24 calibrating.", "",
             "| target | mode | exit | min cosine (held-back clips) | runtime | Vela | ops the "
             "target lacks in the file |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cos = f"{r['cosine']:.4f}" if r["cosine"] is not None else "no artifact"
        lines.append(f"| {r['target']} | {r['quantize']} | {r['exit']} | {cos} | "
                     f"{r['runtime'] or ''} | {r['vela']} | "
                     f"{', '.join(r['unsupported_after']) or 'none'} |")
    out = ROOT / "benchmarks" / "results"
    (out / "audio_16x8.md").write_text("\n".join(lines) + "\n")
    (out / "audio_16x8.json").write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    stamp.stamp_files([out / "audio_16x8.md", out / "audio_16x8.json"], "audio_16x8.py", [])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
