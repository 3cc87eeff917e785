"""The zoo benchmark's report (benchmarks/zoo_report.py): figures and ratios from a results
document as benchmarks/zoo.py writes it, RESULTS.md and a well-formed SVG chart."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from benchmarks.zoo_report import costs, figures, render_md, render_svg


def _doc() -> dict:
    vela = {"npu_ops": 30, "cpu_ops": 2, "inference_ms": 1.25}
    case = {
        "info": {"note": "test"},
        "jobs": {
            "edgetpu": {"target": "edgetpu", "exit_code": 0, "ok": True, "seconds": 60.0,
                        "peak_rss_mb": 3000.0, "peak_mem_mb": 2400.0,
                        "report": {"placement_after": {"ops_on_accelerator": 50, "ops_total": 50,
                                                       "cut": None},
                                   "artifact": {"cosine": 0.999, "max_rel_error": 0.02}}},
            "ethos-u55-128": {"target": "ethos-u55-128", "exit_code": 0, "ok": True,
                              "seconds": 50.0, "peak_rss_mb": 2500.0, "peak_mem_mb": 2000.0,
                              "report": {"placement_after": {"ops_on_accelerator": 50,
                                                             "ops_total": 50},
                                         "vela": {"npu_ops": 32, "cpu_ops": 0,
                                                  "inference_ms": 1.0},
                                         "artifact": {"cosine": 0.998}}},
        },
        "plain_tflite": {"exit": 0, "result": {"ok": True}, "seconds": 20.0,
                         "peak_rss_mb": 2000.0, "judge": {
            "accuracy": {"cosine": 0.95},
            "targets": {"edgetpu": {"ops_on_accelerator": 10, "ops_counted": 40,
                                    "cut": {"op": "HARD_SWISH"}},
                        "ethos-u55-128": {"vela": vela}}}},
        "plain_onnx": {"exit": 0, "result": {"ok": True}, "seconds": 10.0},
        "onnx2tf": {"exit": 1, "file": None, "seconds": 3.0, "peak_rss_mb": 600.0,
                    "pipeline_seconds": 13.0, "pipeline_peak_rss_mb": 2200.0, "attempts": [
                        {"backend": "default (flatbuffer_direct)", "exit": 1,
                         "stderr": "RuntimeError: flatbuffer_direct fast path failed."},
                        {"backend": "tf_converter", "exit": -9, "stderr": ""}]},
    }
    meta = {"command": "python benchmarks/zoo.py", "date_utc": "2026-11-23 22:00 UTC",
            "total_s": 100.0, "size": 64, "workers": 1, "full": False,
            "targets": ["edgetpu", "ethos-u55-128"],
            "machine": {"cpu": "cpu", "cores": 2, "memory_gb": 24.0, "os": "linux",
                        "python": "3.11", "load_average_at_start": (1.0, 1.0, 1.0),
                        "load_average_at_end": (2.0, 2.0, 2.0)},
            "versions": {"tensorflow": "2.21.0"}, "onnx2tf_flags": ["-oiqt"]}
    return {"meta": meta, "results": {"Net": case}}


def test_figures_and_ratios_come_from_the_records():
    case = _doc()["results"]["Net"]
    f = figures(case, "edgetpu")
    assert f["rewrite"]["placed"] == 100.0 and f["rewrite"]["cosine"] == 0.999
    assert f["plain_tflite"]["placed"] == 25.0
    assert f["plain_tflite"]["text"] == "10/40 (cut at HARD_SWISH)"
    # no judge: nothing converted; why each of its backends failed
    assert f["onnx2tf"]["text"] == ("failed: default (flatbuffer_direct): RuntimeError: "
                                    "flatbuffer_direct fast path failed.; tf_converter: died "
                                    "with SIGKILL")
    e = figures(case, "ethos-u55-128")
    assert e["plain_tflite"]["placed"] == pytest.approx(93.75)
    assert e["plain_tflite"]["vela_ms"] == 1.25 and e["rewrite"]["vela_ms"] == 1.0
    c = costs(case, "edgetpu")
    assert c["mem_ratio"] == pytest.approx(1.5) and c["footprint_ratio"] == pytest.approx(1.2)
    assert c["time_ratio"] == pytest.approx(3.0)


def test_results_markdown_and_chart():
    doc = _doc()
    md = render_md(doc)
    assert "Models run: Net (the reduced zoo" in md
    assert "| Net | edgetpu | 20.0, 2000 | 60.0, 3000, 2400 | 3.00 | 1.50 | 1.20 |" in md
    assert "Largest RSS ratio: **1.50** (Net / edgetpu)" in md
    svg = ET.fromstring(render_svg(doc))
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "Net" in texts and "1.50" in texts


def _crashed(case: dict) -> dict:
    """The plain converter killed by SIGSEGV after 3.5 s (kws in the zoo run at abacb5d)."""
    case["plain_tflite"] = {"exit": -11, "seconds": 3.5, "peak_rss_mb": 641.0, "result": None}
    return case


def test_no_ratio_against_a_baseline_that_crashed():
    doc = _doc()
    case = _crashed(doc["results"]["Net"])
    c = costs(case, "edgetpu")
    assert c["plain_status"] == "died with SIGSEGV"
    assert "time_ratio" not in c and "mem_ratio" not in c and "footprint_ratio" not in c
    assert figures(case, "edgetpu")["plain_tflite"]["text"] == "died with SIGSEGV"
    md = render_md(doc)
    row = next(ln for ln in md.splitlines() if ln.startswith("| Net | edgetpu | **died"))
    assert row == ("| Net | edgetpu | **died with SIGSEGV** (after 3.5, 641) | 60.0, 3000, 2400 | "
                   "no ratio | no ratio | no ratio | failed |")
    assert "3.00" not in md and "1.50" not in md  # the old table printed ratios against it
    assert "Largest RSS ratio" not in md


def test_a_failed_conversion_is_a_failure_with_its_reason():
    case = _doc()["results"]["Net"]
    case["plain_tflite"] = {"exit": 0, "seconds": 5.0, "peak_rss_mb": 700.0,
                            "result": {"ok": False, "error": "Quantization not yet supported"}}
    assert costs(case, "edgetpu").get("mem_ratio") is None
    assert figures(case, "edgetpu")["plain_tflite"]["text"] == (
        "failed: Quantization not yet supported")


def test_onnx2tf_is_not_run_without_tf2onnx_file():
    case = _doc()["results"]["Net"]
    del case["onnx2tf"]
    case["plain_onnx"] = {"exit": 0, "result": {"ok": False, "error": "No Op registered"}}
    assert figures(case, "edgetpu")["onnx2tf"]["text"] == (
        "not run (tf2onnx wrote no file: No Op registered)")


def test_edgetpu_cells_count_ops_that_might_not_be_mapped():
    case = _doc()["results"]["Net"]
    warned = [{"op": "RESHAPE", "count": 3, "warning": "large tensor [1, 32, 32, 16]"},
              {"op": "RESHAPE", "count": 1, "warning": "large tensor [1, 32, 512, 1]"},
              {"op": "RESIZE_BILINEAR", "count": 1, "warning": "precision"}]
    case["jobs"]["edgetpu"]["report"]["placement_after"]["might_not_map"] = warned
    case["plain_tflite"]["judge"]["targets"]["edgetpu"]["might_not_map"] = warned[:2]
    f = figures(case, "edgetpu")
    assert f["rewrite"]["text"] == ("50/50 (no cut), 5 might not be mapped (RESHAPE x4, "
                                    "RESIZE_BILINEAR x1)")
    assert f["rewrite"]["might_not_map"] == 5
    assert f["plain_tflite"]["text"] == ("10/40 (cut at HARD_SWISH), 4 might not be mapped "
                                         "(RESHAPE x4)")
    assert "5 might not be mapped" in render_md(_doc_with(case))
    # an empty list is a measured zero: the cell stays as it was
    case["jobs"]["edgetpu"]["report"]["placement_after"]["might_not_map"] = []
    assert figures(case, "edgetpu")["rewrite"]["text"] == "50/50 (no cut)"


def _doc_with(case: dict) -> dict:
    doc = _doc()
    doc["results"]["Net"] = case
    return doc


def test_the_first_error_line_of_the_whole_stderr_is_the_reason():
    """zoo.measured keeps the error lines of the whole stderr: the first is the reason, not the
    re-raise at the end of the kept tail (onnx2tf 2.6.9 on kws: an ONNX_LOOP custom op)."""
    case = _doc()["results"]["Net"]
    case["onnx2tf"]["attempts"][0]["errors"] = [
        "RuntimeError: Encountered unresolved custom op: ONNX_LOOP.",
        "RuntimeError: flatbuffer_direct fast path failed."]
    assert figures(case, "edgetpu")["onnx2tf"]["text"].startswith(
        "failed: default (flatbuffer_direct): RuntimeError: Encountered unresolved custom op: "
        "ONNX_LOOP.; tf_converter: died with SIGKILL")
