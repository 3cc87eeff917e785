"""The baselines of ``benchmarks/zoo.py``, each run as a process of its own (so its wall time and
peak memory are its own), and the judge that scores any file like the job scores its artifact.

* ``plain-tflite CASE OUT``: the plain TFLite converter as its users run it: the Keras model
  loaded, exported as a SavedModel at batch 1, ``TFLiteConverter.from_saved_model``, full int8
  with int8 input/output (the accelerators' setting) calibrated on the case's calibration data;
  no rewriting.
* ``plain-onnx CASE OUT``: plain tf2onnx (the exporter ``rewrite`` uses, in this process) on the
  frozen graph, no rewriting.
* ``judge CASE FILE T1,T2,..``: the file against each target the way the job judges its artifact
  (op table, Edge TPU cut, Vela for Ethos-U; :func:`benchmarks.real_models.judge_baseline`) and
  its outputs against the original float model on the case's verification data (cosine, max
  error relative to the output scale); one JSON object on stdout.

onnx2tf runs in a Python of its own (it pins TensorFlow 2.19); ``benchmarks/zoo.py`` calls its
command line directly.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _case(case_dir: Path) -> Any:
    from benchmarks.real_models import Case

    info = json.loads((case_dir / "case.json").read_text())
    return Case(info["name"], case_dir / info["model"], case_dir / info["calibration"],
                case_dir / info["data"], info["note"], (0.0, 1.0))


def plain_tflite(case_dir: Path, out: Path) -> dict[str, Any]:
    from benchmarks.real_models import baseline_tflite

    return baseline_tflite(_case(case_dir), "int8", out)


def plain_onnx(case_dir: Path, out: Path) -> dict[str, Any]:
    import time

    from rewriter.export.onnx import _convert_here
    from rewriter.frontends import LoadOptions, load_model

    start = time.perf_counter()
    model = load_model(str(_case(case_dir).path), LoadOptions())
    try:
        proto = _convert_here(model, 17)
    except Exception as exc:  # a failed export is a result
        return {"ok": False, "error": str(exc).strip().splitlines()[0][:300]}
    out.write_bytes(proto.SerializeToString())

    return {"ok": True, "path": str(out), "seconds": round(time.perf_counter() - start, 2)}


def judge(case_dir: Path, path: str, targets: list[str]) -> dict[str, Any]:
    from benchmarks.real_models import _guard, baseline_accuracy, judge_baseline

    case = _case(case_dir)
    res: dict[str, Any] = {"accuracy": _guard(baseline_accuracy, path, case), "targets": {}}
    for t in targets:
        res["targets"][t] = _guard(judge_baseline, path, t, Path(path).parent / f"judge_{t}")
    return res


def sample_data(path: Path) -> None:
    """onnx2tf reads ``calibration_image_sample_data_20x128x128x3_float32.npy`` from its working
    directory, and downloads it when absent (for its own output check on RGB models): write
    seeded structured images there instead, so nothing is downloaded."""
    from benchmarks.real_models import structured_images

    np.save(path, structured_images(20, (128, 128, 3), 7, (0.0, 1.0)))


def main(argv: list[str]) -> int:
    cmd, *rest = argv
    if cmd == "plain-tflite":
        res = plain_tflite(Path(rest[0]), Path(rest[1]))
    elif cmd == "plain-onnx":
        res = plain_onnx(Path(rest[0]), Path(rest[1]))
    elif cmd == "judge":
        res = judge(Path(rest[0]), rest[1], rest[2].split(","))
    elif cmd == "sample-data":
        sample_data(Path(rest[0]))
        res = {"ok": True}
    else:
        raise SystemExit(f"unknown command {cmd!r}")
    sys.stdout.write(json.dumps(res, default=str) + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.redirect_stderr(io.StringIO()) if os.environ.get("ZOO_QUIET") else \
            contextlib.nullcontext():
        raise SystemExit(main(sys.argv[1:]))
