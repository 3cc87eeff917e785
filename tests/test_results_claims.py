"""Claims measured by a benchmark are checked on its results file, not measured a second time.

The slow suite used to rerun what a benchmark of ``benchmarks/regenerate.py``'s plan measures and
records: every activation on every int8 target (``benchmarks/activation_matrix.py``, 144 jobs),
the real architectures at 224x224 through every target (``benchmarks/real_models.py``) and the
pre-quantisation table (``benchmarks/prequant_int8.py``). Each test here asserts the same
claim, with the same bars, on the results file that benchmark wrote, and first that the file is
current for this checkout's code (``benchmarks/stamp.py``: no change to ``rewriter/``,
``op_tables/`` or the script since its commit); a stale file fails with the command that
regenerates it. They take milliseconds but are ``slow``: they hold when the full plan has run at
this commit (``regenerate.py`` runs the slow suite last), and the slow suite's record says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import stamp

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
pytestmark = pytest.mark.slow


def _current(name: str) -> dict[str, Any]:
    """The results file ``benchmarks/results/NAME.json``, asserted current for HEAD's code."""
    from benchmarks.regenerate import PLAN

    path = RESULTS / f"{name}.json"
    head = stamp.stamp_of(path)
    why = stamp.stale(head)
    command = next((b.command for b in PLAN if str(path.relative_to(ROOT)) in b.files), "?")
    assert why is None, f"{path.name} is stale ({why}): regenerate it with `{command}`"
    return json.loads(path.read_text())


def test_every_activation_is_placed_and_close_in_int8_on_every_target():
    """Was tests/test_activations.py's slow matrix (135 jobs): the same bars on each cell of
    activation_matrix.json (exit 0, nothing unsupported, no Edge TPU cut, Vela 0 CPU operators,
    int8 cosine >= 0.99 in LiteRT and, for tflm, in TFLite Micro)."""
    from benchmarks.activation_matrix import MIN_COSINE, TARGETS
    from rewriter.frontends.activations import catalogue

    results = _current("activation_matrix")
    failed = []
    for act in catalogue():
        for target in TARGETS:
            cell = results["rows"].get(act.key, {}).get(target)
            ok = (cell is not None and cell.get("pass") and cell.get("exit") == 0
                  and cell.get("unsupported_after") == [] and cell["cosine"] >= MIN_COSINE
                  and (target != "tflm" or cell["tflm_cosine"] >= MIN_COSINE)
                  and (target != "edgetpu" or cell.get("cut") is None)
                  and (not target.startswith("ethos-u") or cell["vela"]["cpu"] == 0))
            if ok and act.key == "sparsemax":  # rewritten without a sort (TOPK_V2, CUMSUM)
                ok = "sparsemax_pairwise" in {r["rule"] for r in cell.get("rules", [])}
            if not ok:
                failed.append(f"{act.key} on {target}: {cell or 'not measured'}")
    assert failed == []


ARCHS = ("EfficientNetB0", "ConvNeXtTiny", "MobileNetV3Small")


@pytest.mark.parametrize("arch", ARCHS)
def test_real_architecture_whole_job_at_224(arch):
    """Was tests/test_real_architectures.py::test_real_architecture_whole_job (12 jobs at
    224x224): the same assertions on real_models.json's rewrite of ARCH on every target."""
    from rewriter.verify.tolerance import ARTIFACT_RTOL, EXACT_RTOL

    results = _current("real_models")
    assert results["meta"]["size"] == 224 and results["meta"]["realistic"]
    [row] = [r for r in results["results"] if r["model"] == arch]
    for target in ("edgetpu", "ethos-u55-128", "tflm", "onnx"):
        job = row["rewrite"][target]
        assert "error" not in job, job
        assert job["unsupported_after"] == [], (target, job["unsupported_after"])
        placement = job["placement_after"]
        assert placement["cut"] is None, (target, placement)
        assert placement["ops_on_accelerator"] == placement["ops_total"], (target, placement)
        if target.startswith("ethos"):
            assert job["vela"] and job["vela"]["cpu_ops"] == 0 and job["vela"]["npu_ops"] > 0
        exact = all(v == "exact" for v in job["rules_exactness"].values())
        assert job["tf"]["ok"] and (not exact or job["tf"]["max_rel_error"] <= EXACT_RTOL)
        if target == "onnx":
            assert job["artifact"]["max_rel_error"] <= ARTIFACT_RTOL["none"], job["artifact"]


def test_the_prequant_table_is_one_run_against_its_plain_converter():
    """Was tests/test_prequant.py::test_the_benchmark_table_is_regenerated_from_one_run (the
    benchmark rerun on MobileNetV3Small at 32x32, 22 min in the slow suite): on each model of
    prequant_int8.json, every variant measured against the plain converter of the same run,
    the equalisation exact in float, and the .md rendered from the .json."""
    from benchmarks.prequant_int8 import VARIANTS, render

    results = _current("prequant_int8")
    assert {m["model"] for m in results["models"]} >= {"MobileNetV3Small"}
    for row in results["models"]:
        variants = row["variants"]
        assert list(variants) == list(VARIANTS) and variants["plain"]["error_ratio"] == 1.0
        assert variants["cle"]["float_moved"] < 1e-4 < variants["bias"]["float_moved"]
        assert all(0 < v["cosine"] <= 1 for v in variants.values())
    md = (RESULTS / "prequant_int8.md").read_text()
    rendered = render({k: v for k, v in results.items() if k != "stamp"})
    assert [ln for ln in rendered.splitlines() if ln.startswith("|")] == \
        [ln for ln in md.splitlines() if ln.startswith("|")]
