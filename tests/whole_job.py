"""One main job run on a small stock-Keras model and the checks every family test makes of it.

The model's ``calibration.npy`` and ``data.npy`` (``.npz`` for several inputs) sit beside it. :func:`job` runs the job and returns
its exit code and report; :func:`assert_runs_whole` asserts what "runs whole on the target" means
in this project: exit 0 and ok, on onnx max relative error <= 1e-4, on the int8 targets cosine >=
0.99 with no Edge TPU cut, no Vela CPU operator, and the artifact run by TFLite Micro on tflm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewriter.cli import main

MIN_INT8_COSINE = 0.99
MAX_ONNX_REL_ERROR = 1e-4


def job(model: Path, target: str, out: Path) -> tuple[int, dict[str, Any]]:
    root = model.parent
    ext = "npz" if (root / "calibration.npz").exists() else "npy"  # .npz: several inputs
    code = main([str(model), "--target", target, "--calibration", str(root / f"calibration.{ext}"),
                 "--data", str(root / f"data.{ext}"), "-o", str(out), "-q"])
    return code, json.loads((out / "report.json").read_text())


def rules_applied(report: dict[str, Any]) -> list[str]:
    return [a["rule"] for a in report["rules_applied"]]


def assert_runs_whole(model: Path, target: str, out: Path) -> dict[str, Any]:
    """Run the job and assert it runs whole on ``target``; the report, for further checks."""
    code, report = job(model, target, out)
    assert code == 0 and report["ok"] is True, report.get("unsupported_after")
    assert report["unsupported_after"] == []
    [cmp] = report["equivalence"]["artifact"]["outputs"].values()
    if target == "onnx":
        assert cmp["max_rel_error"] <= MAX_ONNX_REL_ERROR
        return report
    assert cmp["cosine"] >= MIN_INT8_COSINE
    if target == "edgetpu":
        assert report["placement_after"]["cut"] is None
    if target.startswith("ethos-u"):
        assert report["vela"]["cpu_ops"] == 0
    if target == "tflm":
        assert report["equivalence"]["artifact"]["runtime"] == "TFLite Micro"
    return report
