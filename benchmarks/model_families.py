"""Measure ``rewrite MODEL --target T`` on the detector and audio model families.

Models (nothing downloaded; the small ones are built by ``tests/families.py`` the way their
users build them, seeded):

* ``detector``: SSD-like, Keras 3 (upsampled feature fusion, box/class heads reshaped and
  concatenated, sigmoid scores), 64x64 input; ``detector_tfkeras`` the same in tf_keras (.h5);
* ``detector_nms``: that detector as a SavedModel ending in combined NMS, whole (a CPU tail) and
  ended before NMS with the ``--outputs`` the report prints;
* ``audio``: a SavedModel with a ``tf.signal`` front end (STFT, power, mel, log) and a conv
  stack, whole and from its log-mel (``--inputs logmel``);
* ``basic_pitch``: the trained Spotify Basic Pitch SavedModel the ``basic-pitch`` wheel ships
  (``models/third_party/basic_pitch_nmp``, Apache-2.0; a CQT front end inside), whole and from
  its normalised log-CQT on.

Calibration/verification data: random images in [-1, 1] for the detectors; keyword-like tone
clips (``tests/families.waveforms``) for the audio models, mapped through the model's own front
end for the cut runs. Each job runs in-process (``rewriter.cli.main``); the table gives the exit
code, what is left unsupported in the artifact, the Edge TPU cut, Vela's NPU/CPU operators, the
artifact's worst cosine (int8) or relative error (ONNX), and the CPU tail. Results:
``benchmarks/results/model_families.{md,json}``.

    PYTHONPATH=. python benchmarks/model_families.py [--models detector,audio]
        [--targets edgetpu,ethos-u55-128,tflm,onnx]
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
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = ("edgetpu", "ethos-u55-128", "tflm", "onnx")
MODELS = ("detector", "detector_tfkeras", "detector_nms", "audio", "basic_pitch")
BASIC_PITCH = ROOT / "models" / "third_party" / "basic_pitch_nmp"
BP_CUT = "StatefulPartitionedCall/model_1/normalized_log_1/Reshape_2"
BP_SAMPLES = 43844


def _prepare(name: str, tmp: Path) -> list[tuple[str, Path, list[str]]]:
    """(case label, model path, extra CLI arguments) for one model family."""
    from tests import families

    rng = np.random.default_rng(0)
    if name.startswith("detector") and name != "detector_nms":
        legacy = name == "detector_tfkeras"
        path = tmp / ("det.h5" if legacy else "det.keras")
        families.detector(size=64, legacy=legacy).save(path)
        np.save(tmp / "images.npy", rng.uniform(-1, 1, (32, 64, 64, 3)).astype(np.float32))
        return [(name, path, ["--calibration", str(tmp / "images.npy")])]
    if name == "detector_nms":
        path = families.detector_with_nms(tmp / "det_nms", size=64)
        np.save(tmp / "images.npy", rng.uniform(-1, 1, (32, 64, 64, 3)).astype(np.float32))
        cal = ["--calibration", str(tmp / "images.npy")]
        return [("detector + NMS, whole", path, cal),
                ("detector + NMS, --outputs from the report", path,
                 cal + ["--outputs", "StatefulPartitionedCall/boxes_raw,"
                        "StatefulPartitionedCall/scores_raw"])]
    if name == "audio":
        path = families.audio_saved_model(tmp / "audio", samples=8000, frame=256, step=128,
                                          mels=32)
        waves = families.waveforms(32, samples=8000)
        np.save(tmp / "waves.npy", waves[:, 0])
        _front_end_data(path, families.LOGMEL, waves, tmp / "logmel.npy")
        return [("audio (tf.signal STFT) whole", path, ["--calibration", str(tmp / "waves.npy")]),
                ("audio from --inputs logmel", path,
                 ["--inputs", families.LOGMEL, "--calibration", str(tmp / "logmel.npy")])]
    waves = families.waveforms(16, samples=BP_SAMPLES)[:, :, :, None]  # [n, 1, 43844, 1]
    np.save(tmp / "bp_waves.npy", waves[:, 0])
    _front_end_data(BASIC_PITCH, BP_CUT, waves, tmp / "bp_cqt.npy")
    return [("basic_pitch (trained, CQT) whole", BASIC_PITCH,
             ["--calibration", str(tmp / "bp_waves.npy")]),
            ("basic_pitch from the log-CQT", BASIC_PITCH,
             ["--inputs", BP_CUT, "--calibration", str(tmp / "bp_cqt.npy")])]


def _front_end_data(path: Path, node: str, inputs: np.ndarray, out: Path) -> None:
    """The model's own front-end output on ``inputs`` (what a cut model is fed)."""
    from rewriter.frontends import load_model

    model = load_model(path)
    tensor = next(f"{n.name}:0" for n in model.graph_def.node
                  if n.name == node or n.name.endswith("/" + node))
    name = model.inputs[0].name
    np.save(out, np.concatenate([model.run({name: x}, fetches=[tensor])[tensor]
                                 for x in inputs]))


def _job(path: Path, target: str, extra: list[str], out: Path) -> dict[str, Any]:
    from rewriter.cli import main

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["run", str(path), "--target", target, "-o", str(out), "-q", *extra])
    seconds = round(time.perf_counter() - start, 1)
    report_path = out / "report.json"
    if not report_path.exists():
        return {"exit": code, "seconds": seconds, "error": "no report"}
    r = json.loads(report_path.read_text())
    art = (r.get("equivalence") or {}).get("artifact") or {}
    outs = list((art.get("outputs") or {}).values())
    row = {"exit": code, "seconds": seconds, "ok": r.get("ok"),
           "unsupported_after": sorted({u["op"] for u in r.get("unsupported_after") or []}),
           "rules": sorted({x["rule"] for x in r.get("rules_applied") or []}),
           "cut": ((r.get("placement_after") or {}).get("cut") or {}).get("op"),
           "placed": (r.get("placement_after") or {}).get("percent_on_accelerator"),
           "min_cosine": min((o["cosine"] for o in outs), default=None),
           "max_rel_error": max((o["max_rel_error"] for o in outs), default=None),
           "cpu_tail": (r.get("cpu_tail") or {}).get("hint")}
    if "vela" in r:
        row["vela"] = f"{r['vela']['npu_ops']} NPU / {r['vela']['cpu_ops']} CPU"
    return row


def render(results: list[dict[str, Any]]) -> str:
    lines = ["# Model families: detector and audio", "",
             "`PYTHONPATH=. python benchmarks/model_families.py` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             "| model | target | exit | left unsupported in the artifact | Edge TPU cut / Vela | "
             "artifact vs original | rules | CPU tail |", "|---|---|---|---|---|---|---|---|"]
    for r in results:
        placement = r.get("vela") or (f"cut at {r['cut']}" if r.get("cut") else
                                      ("no cut" if r["target"] == "edgetpu" else ""))
        if r.get("placed") is None:
            placement = "export failed"
        if r["target"] == "onnx":
            err = r.get("max_rel_error")
            num = f"max rel {err:.1e}" if isinstance(err, (int, float)) else ""
        else:
            cos = r.get("min_cosine")
            num = f"cosine {cos:.4f}" if isinstance(cos, (int, float)) else "(no artifact)"
        lines.append(f"| {r['case']} | {r['target']} | {r['exit']} | "
                     f"{', '.join(r.get('unsupported_after') or []) or 'none'} | {placement} | "
                     f"{num} | {', '.join(r.get('rules') or [])} | "
                     f"{'`' + r['cpu_tail'] + '`' if r.get('cpu_tail') else ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--out", default=str(RESULTS / "model_families"))
    args = ap.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="families_") as tmp:
        for name in args.models.split(","):
            where = Path(tmp) / name
            where.mkdir()
            for case, path, extra in _prepare(name, where):
                for target in args.targets.split(","):
                    out = where / f"out_{len(results)}"
                    row = {"case": case, "target": target, **_job(path, target, extra, out)}
                    print(json.dumps(row), flush=True)
                    results.append(row)
    Path(args.out + ".json").write_text(json.dumps(results, indent=2))
    Path(args.out + ".md").write_text(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
