"""Measure ``rewrite MODEL --target T`` on the model families beyond CNN classifiers.

Models (nothing downloaded; the small ones are built by ``tests/families.py`` the way their
users build them, seeded):

* the recurrent and grouped-convolution models of ``tests.families.FAMILIES``: Keras 3 and
  tf_keras LSTM/GRU (stacked, ``return_sequences``, ``Bidirectional``), a keyword spotter (conv
  front end + stacked GRU), frozen graphs with a functional ``While`` and a TF1 ``dynamic_rnn``,
  a tf_keras RegNet-like net with grouped convs (RegNetX002 itself with ``--slow``), each with
  representative calibration (128 inputs, seed 1; ``--calibration-samples 128``) and
  verification data (8 inputs, seed 2);

* ``detector``: SSD-like, Keras 3 (upsampled feature fusion, box/class heads reshaped and
  concatenated, sigmoid scores), 64x64 input; ``detector_tfkeras`` the same in tf_keras (.h5);
* ``detector_nms``: that detector as a SavedModel ending in combined NMS, whole (a CPU tail) and
  ended before NMS with the ``--outputs`` the report prints;
* ``audio``: a SavedModel with a ``tf.signal`` front end (STFT, power, mel, log) and a conv
  stack, whole and from its log-mel (``--inputs logmel``);
* ``basic_pitch``: the trained Spotify Basic Pitch SavedModel the ``basic-pitch`` wheel ships
  (``models/third_party/basic_pitch_nmp``, Apache-2.0; a CQT front end inside), whole and from
  its normalised log-CQT on.

For the others, calibration/verification data: random images in [-1, 1] for the detectors; keyword-like tone
clips (``tests/families.waveforms``) for the audio models, mapped through the model's own front
end for the cut runs. Each job runs in-process (``rewriter.cli.main``); the table gives the exit
code, what is left unsupported in the artifact, the Edge TPU cut, Vela's NPU/CPU operators, the
artifact's worst cosine (int8, LiteRT) or relative error (ONNX Runtime), the CPU tail, the
range-starved int8 tensors the report names (``int8_layers.range``) and the remedies it gives
for the target, and for
``tflm`` the cosine of TFLite Micro's own interpreter (a child process) running the file on the
first verification inputs against the job's rewritten float model; for ``onnx`` whether
``onnx.checker`` passes. Results: ``benchmarks/results/model_families.{md,json}``.

    PYTHONPATH=. python benchmarks/model_families.py [--models recurrent,detector,...]
        [--targets edgetpu,ethos-u55-128,tflm,onnx] [--slow]
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
OTHERS = ("detector", "detector_tfkeras", "detector_nms", "audio", "basic_pitch")
TFLM_SAMPLES = 4
BASIC_PITCH = ROOT / "models" / "third_party" / "basic_pitch_nmp"
BP_CUT = "StatefulPartitionedCall/model_1/normalized_log_1/Reshape_2"
BP_SAMPLES = 43844


def _prepare(name: str, tmp: Path) -> list[tuple[str, Path, list[str]]]:
    """(case label, model path, extra CLI arguments) for one model family."""
    from tests import families

    if name in families.FAMILIES:
        cal, data = tmp / "calibration.npy", tmp / "data.npy"
        np.save(cal, families.family_data(name, 128, 1))
        np.save(data, families.family_data(name, 8, 2))
        return [(families.FAMILIES[name].title, families.build(name, tmp),
                 ["--calibration", str(cal), "--calibration-samples", "128",
                  "--data", str(data)])]
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
    rng = (r.get("int8_layers") or {}).get("range")
    if rng is not None:
        row["range_starved"] = {t["node"]: t["below_step"] for t in rng["tensors"]}
        row["remedies"] = sorted({x["remedy"] + (f" {x['node']}" if x.get("node") else "")
                                  for d in rng["diagnosis"] for x in d["remedies"]
                                  if x["applies"]})
    if target == "tflm" and (out / "model.tflite").exists():
        row["tflm_cosine"] = tflm_cosine(out, _samples(extra))
    if target == "onnx" and (out / "model.onnx").exists():
        row["onnx_checker"] = _onnx_checker(out / "model.onnx")
    return row


def _samples(extra: list[str]) -> np.ndarray:
    """The first inputs of the job's verification data (its calibration data without one)."""
    flag = "--data" if "--data" in extra else "--calibration"
    return np.load(extra[extra.index(flag) + 1])[:TFLM_SAMPLES]


def tflm_cosine(out: Path, samples: np.ndarray) -> float | str:
    """Cosine of TFLite Micro's own interpreter running ``out/model.tflite`` on ``samples``
    (one batch-1 input each) to the job's rewritten float model (``out/saved_model``, which
    the job proved equal to the original), worst over outputs; the runner's error if it fails."""
    from rewriter.frontends import load_model
    from rewriter.verify.runners import RunnerError, rename_outputs
    from rewriter.verify.tflm import TflmRunner

    model = load_model(out / "saved_model")
    feeds = [{model.inputs[0].name: s[None]} for s in samples]
    try:
        got = TflmRunner(out / "model.tflite").run_many(feeds)
    except RunnerError as exc:
        return f"fails: {str(exc).splitlines()[0][:200]}"
    worst = 1.0
    for feed, outputs in zip(feeds, got):
        want = model.run(feed)
        outputs = rename_outputs(outputs, list(want))
        for key, value in want.items():
            a, b = np.ravel(outputs[key]).astype(np.float64), np.ravel(value).astype(np.float64)
            worst = min(worst, float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30)))
    return worst


def _onnx_checker(path: Path) -> str:
    import onnx

    try:
        onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    except Exception as exc:  # the checker's verdict, whatever its type
        return f"fails: {str(exc).splitlines()[0][:200]}"
    return "passes"


def render(results: list[dict[str, Any]], command: str) -> str:
    lines = ["# Model families", "", f"`{command}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             "| model | target | exit | left unsupported in the artifact | Edge TPU cut / Vela | "
             "artifact vs original | TFLite Micro / onnx.checker | rules | CPU tail | "
             "range-starved int8 tensors (share below one step) | remedies the report gives |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
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
        own = r.get("tflm_cosine", r.get("onnx_checker", ""))
        own = f"runs, cosine {own:.4f}" if isinstance(own, float) else own
        lines.append(f"| {r['case']} | {r['target']} | {r['exit']} | "
                     f"{', '.join(r.get('unsupported_after') or []) or 'none'} | {placement} | "
                     f"{num} | {own} | {', '.join(r.get('rules') or [])} | "
                     f"{'`' + r['cpu_tail'] + '`' if r.get('cpu_tail') else ''} | "
                     + ", ".join(f"{n} {v:.1%}" for n, v in
                                 (r.get("range_starved") or {}).items())
                     + f" | {', '.join(r.get('remedies') or [])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated; 'recurrent' names every model of "
                    "tests.families.FAMILIES (default: all models but the --slow ones)")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--slow", action="store_true", help="also the large models (RegNetX002)")
    ap.add_argument("--out", default=str(RESULTS / "model_families"))
    args = ap.parse_args(argv)
    from tests.families import FAMILIES

    recurrent = [n for n, f in FAMILIES.items() if args.slow or not f.slow]
    names = [m for name in (args.models or "recurrent," + ",".join(OTHERS)).split(",")
             for m in (recurrent if name == "recurrent" else [name])]
    results = []
    with tempfile.TemporaryDirectory(prefix="families_") as tmp:
        for name in names:
            where = Path(tmp) / name
            where.mkdir()
            for case, path, extra in _prepare(name, where):
                for target in args.targets.split(","):
                    out = where / f"out_{len(results)}"
                    row = {"case": case, "target": target, **_job(path, target, extra, out)}
                    print(json.dumps(row), flush=True)
                    results.append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(results, indent=2))
    command = " ".join(["PYTHONPATH=. python benchmarks/model_families.py",
                        *(sys.argv[1:] if argv is None else argv)])
    Path(args.out + ".md").write_text(render(results, command))
    from benchmarks import stamp

    stamp.stamp_files([args.out + ".md", args.out + ".json"], "model_families.py", argv,
                      command=command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
