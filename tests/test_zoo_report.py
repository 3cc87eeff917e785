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
        "plain_tflite": {"seconds": 20.0, "peak_rss_mb": 2000.0, "judge": {
            "accuracy": {"cosine": 0.95},
            "targets": {"edgetpu": {"ops_on_accelerator": 10, "ops_counted": 40,
                                    "cut": {"op": "HARD_SWISH"}},
                        "ethos-u55-128": {"vela": vela}}}},
        "onnx2tf": {"pipeline_seconds": 40.0, "pipeline_peak_rss_mb": 2200.0},
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
    assert f["onnx2tf"]["text"] == "conversion failed"  # no judge: nothing converted
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
