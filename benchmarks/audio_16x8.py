"""The audio family model in the job's 16x8 mode (int16 activations, int8 weights) beside int8.

The audio model of ``benchmarks/model_families.py`` (``tests.families.audio_saved_model``, 8000
samples, frame 256, step 128, 32 mels; 32 tone clips of ``tests.families.waveforms`` as the one
set of data, ``--calibration``) is run by the job per target twice, in-process: ``rewrite run
--target T --calibration clips.npy`` (int8) and the same with ``--quantize 16x8``. The job holds
the last 8 clips back and calibrates on the other 24, so each cosine is the job's own figure on
8 clips calibration never saw (report.json ``equivalence.artifact``, in the target's runtime:
TFLite Micro for tflm, LiteRT for ethos-u55-128), with Vela 5.2's NPU/CPU operators for Ethos-U.
On ethos-u55-128 a fifth job adds ``--accuracy 0.99`` to ``--quantize 16x8``: the approximation
move (``rewriter.job.approximate``) replaces the LOG, which the NPU runs, by ``elementwise_ramps``
on purpose and keeps it only when it meets 0.99 on the held-back clips; its row gives the move,
the rule's stated bound and Vela's time and SRAM for both files. Then both ethos-u55-128 16x8
files (the native int16 LOG, the ramps) are run in LiteRT on clips the calibration's
distribution does not hold (new tones, quieter, louder and clipped, noise): why the job does
not apply the ramps by default.
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


def job(target: str, path: Path, clips: Path, out: Path, quantize: str,
        accuracy: float | None = None) -> dict[str, Any]:
    from rewriter.cli import main

    args = (["run", str(path), "--target", target, "-o", str(out), "-q", "--calibration",
             str(clips)] + (["--quantize", quantize] if quantize != "int8" else [])
            + (["--accuracy", str(accuracy)] if accuracy is not None else []))
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(args)
    report = json.loads((out / "report.json").read_text())
    art = (report.get("equivalence") or {}).get("artifact") or {}
    cos = min((o["cosine"] for o in (art.get("outputs") or {}).values()), default=None)
    vela = report.get("vela") or {}
    move = report.get("approximation")
    return {"target": target, "quantize": quantize + (f" --accuracy {accuracy}"
                                                       if accuracy is not None else ""),
            "exit": code, "cosine": cos, "approximation": move,
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
        target = "ethos-u55-128"
        rows.append(job(target, path, tmp / "clips.npy", tmp / f"{target}-accuracy", "16x8",
                        0.99))
        print(json.dumps(rows[-1]), flush=True)
        shifted = shift(path, {"16x8 (int16 LOG)": tmp / f"{target}-16x8" / "model.tflite",
                               "16x8 --accuracy 0.99 (LOG as ramps)":
                               tmp / f"{target}-accuracy" / "model.tflite"})
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
    lines += _move_lines(rows[-1]["approximation"]) + _shift_lines(shifted)
    out = ROOT / "benchmarks" / "results"
    (out / "audio_16x8.md").write_text("\n".join(lines) + "\n")
    (out / "audio_16x8.json").write_text(json.dumps({"rows": rows, "shifted": shifted},
                                                    indent=2) + "\n")
    stamp.stamp_files([out / "audio_16x8.md", out / "audio_16x8.json"], "audio_16x8.py", [])
    print("\n".join(lines))
    return 0


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def shift(path: Path, files: dict[str, Path]) -> list[dict[str, Any]]:
    """Each file's cosine against the SavedModel on clip sets away from the calibration's."""
    from rewriter.frontends import load_model
    from rewriter.verify.runners import LiteRTRunner
    from tests import families

    model = load_model(path)
    name = model.inputs[0].name
    new = families.waveforms(16, samples=8000, seed=1)[:, 0]
    rng = np.random.default_rng(3)
    sets = {"held-back clips (the verdict's)": families.waveforms(32, samples=8000)[24:, 0],
            "16 new clips (seed 1)": new, "new x0.1 (quiet)": new * 0.1,
            "new x0.3": new * 0.3, "new x2, clipped to [-1, 1]": np.clip(new * 2, -1, 1),
            "new x4, clipped": np.clip(new * 4, -1, 1),
            "gaussian noise, std 0.3": np.clip(rng.normal(0, 0.3, new.shape), -1, 1),
            "gaussian noise, std 0.02": rng.normal(0, 0.02, new.shape)}
    runners = {k: LiteRTRunner(v) for k, v in files.items()}
    out = []
    for label, clips in sets.items():
        clips = clips.astype(np.float32)
        feeds = [{name: clips[i:i + 1]} for i in range(len(clips))]
        ref = np.stack([np.asarray(next(iter(model.run(f).values()))) for f in feeds])
        row: dict[str, Any] = {"clips": label}
        for k, r in runners.items():
            got = np.stack([np.asarray(next(iter(r.run(r.bind_feeds(f)).values())))
                            for f in feeds])
            row[k] = round(_cos(ref, got), 4)
        out.append(row)
    return out


def _move_lines(move: dict[str, Any] | None) -> list[str]:
    if not move:
        return ["", "ethos-u55-128 16x8 --accuracy 0.99: no approximation move recorded."]
    bound = "; ".join(f"max abs error {b['max_abs_error']:.4g} on [{b['input_range'][0]:.3g}, "
                      f"{b['input_range'][1]:.4g}]" for b in move.get("bounds") or [])
    before, after = move.get("cost_before") or {}, move.get("cost_after") or {}
    layer = move.get("layer") or {}
    return ["", f"ethos-u55-128 `--quantize 16x8 --accuracy 0.99`: the approximation move, "
            f"{'kept' if move.get('kept') else 'dropped'} ({move.get('why')}): layer "
            f"{layer.get('name')} ({', '.join(layer.get('ops') or [])}) replaced on purpose by "
            f"`{move.get('rule')}`, stated bound {bound or 'none'}.", "",
            "| file | worst cosine (held-back) | Vela ms | SRAM KiB | CPU ops | size KiB |",
            "|---|---|---|---|---|---|",
            f"| 16x8, int16 LOG | {move['worst_before']:.4f} | {before.get('vela_ms')} | "
            f"{before.get('sram_kib')} | {before.get('cpu_ops')} | {before.get('size_kib')} |",
            "| 16x8, LOG as ramps | "
            + (f"{move['worst_after']:.4f}" if move.get("worst_after") is not None else "-")
            + f" | {after.get('vela_ms')} | {after.get('sram_kib')} | {after.get('cpu_ops')} | "
            f"{after.get('size_kib')} |"]


def _shift_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    keys = [k for k in rows[0] if k != "clips"]
    return ["", "Both ethos-u55-128 16x8 files in LiteRT against the SavedModel (cosine over the "
            "set), on clips away from the calibration's distribution:", "",
            "| clips | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|",
            *(f"| {r['clips']} | " + " | ".join(f"{r[k]:.4f}" for k in keys) + " |"
              for r in rows)]


if __name__ == "__main__":
    sys.exit(main())
