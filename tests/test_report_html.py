"""report.html: self-contained (no network), with SVG plots that render in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from rewriter.report.html import render_html, write_html
from rewriter.verify.divergence import Divergence, NodeError
from rewriter.verify.histograms import error_histogram, error_histograms

BAR_BLUE = (59, 118, 196)  # .plot .bar fill #3b76c4
PAGE_BG = (246, 247, 249)  # body background #f6f7f9


def _divergence() -> dict:
    nodes = [NodeError(i, f"block{i}/op", "Conv2D" if i % 2 else "Elu", "BiasAdd",
                       10.0 ** (-7 + i / 4), 3.0, 1e-4, 10.0 ** (-7 + i / 4) <= 1e-4)
             for i in range(20)]
    first = next(n for n in nodes if not n.ok)
    return Divergence(first, [{"rule": "batchnorm_fold_into_conv", "root": first.node}], nodes,
                      0, 2, 0.1).to_json()


def sample_report() -> tuple[dict, dict]:
    rng = np.random.default_rng(0)
    ref = {"logits": rng.normal(0, 1, (8, 10)), "box<1>": rng.normal(0, 5, (8, 4))}
    tf_out = {k: v + rng.normal(0, 1e-7, v.shape) * (rng.random(v.shape) > 0.3)
              for k, v in ref.items()}
    art = {k: v + rng.normal(0, 1e-2, v.shape) for k, v in ref.items()}
    metrics = {k: {"max_abs_error": 2e-7, "max_rel_error": 1e-7, "cosine": 1.0, "atol": 2e-5,
                   "rtol": 1e-5, "needed_atol": 0.0, "ok": True} for k in ref}
    report = {
        "ok": False, "target": "ethos-u55-128", "input": "models/convbn_elu.keras",
        "summary": "3 unsupported op(s) before rewriting (Elu)",
        "equivalence": {"rewritten_tf": {"ok": True, "samples": 8, "outputs": metrics,
                                         "notes": ["all applied rules are exact"]},
                        "artifact": {"ok": True, "samples": 8, "runtime": "LiteRT",
                                     "outputs": {k: dict(m, atol="inf") for k, m in
                                                 metrics.items()}}},
        "placement_before": {"ops_total": 9, "ops_on_accelerator": 6,
                             "percent_on_accelerator": 66.7},
        "placement_after": {"ops_total": 21, "ops_on_accelerator": 21,
                            "percent_on_accelerator": 100.0},
        "unsupported_before": [{"op": "Elu", "count": 3, "fix": "elu_exact",
                                "reason": "Tensors must be int8 <observed float32>"}],
        "unsupported_after": [],
        "rules_applied": [{"rule": "elu_exact", "count": 3, "exact": True,
                           "exactness": "exact", "roots": ["a/Elu", "b/Elu", "c/Elu"]}],
        "vela": {"config": "ethos-u55-128", "npu_ops": 19, "cpu_ops": 1,
                 "cpu_reasons": [{"op": "ELU", "ofm": "t", "reasons": ["not int8"]}],
                 "summary": {"inference_time": "0.0001"}},
        "warnings": ["verified on synthetic inputs"],
        "artifact_ops": ["CONV_2D"] * 3 + ["ELU", "MEAN"],
        "timings": {"rewrite": 0.2, "export": 3.5},
    }
    extras = {"histograms": {"rewritten_tf": error_histograms(ref, tf_out),
                             "artifact": error_histograms(ref, art)},
              "divergence": _divergence()}
    return report, extras


def _plots(page: str) -> list[str]:
    return re.findall(r'<svg[^>]*data-plot="([a-z-]+)"', page)


# ----------------------------------------------------------------------------- data and markup
def test_histogram_counts_every_element_and_spans_the_errors():
    ref = np.zeros(1000)
    test = np.concatenate([np.zeros(100), np.logspace(-9, -2, 900)])
    h = error_histogram(ref, test)
    assert h["zeros"] == 100 and sum(h["counts"]) == 900 and h["total"] == 1000
    assert h["lo"] == -9 and h["hi"] == -2 and h["max_abs_error"] == pytest.approx(1e-2)
    json.dumps(h)  # lives in report.json


def test_histogram_of_identical_outputs_is_all_zeros():
    h = error_histogram(np.ones(10), np.ones(10))
    assert h["zeros"] == 10 and h["counts"] == []
    assert 'data-zeros="10"' in render_html({}, {"histograms": {"x": {"y": h}}})


def test_page_has_a_histogram_per_output_and_stage_and_the_node_plot():
    report, extras = sample_report()
    page = render_html(report, extras)
    plots = _plots(page)
    assert plots.count("histogram") == 4  # 2 outputs x (rewritten TF, artifact)
    assert plots.count("node-errors") == 1
    assert {"placement", "vela", "artifact-ops", "timings"} <= set(plots)
    assert 'data-stage="artifact" data-output="box&lt;1&gt;"' in page
    assert "first divergence: block" in page and "batchnorm_fold_into_conv at block" in page
    assert "Tensors must be int8 &lt;observed float32&gt;" in page  # escaped, in the op table
    assert "elu_exact" in page and "warning: verified on synthetic inputs" in page


def test_page_reads_plot_data_from_the_report_itself():
    report, extras = sample_report()
    from_json = json.loads(json.dumps({**report, "plots": extras}))
    assert render_html(from_json) == render_html(report, extras)


def test_page_is_self_contained():
    page = render_html(*sample_report())
    assert "<script" not in page and "src=" not in page
    assert not re.search(r"(href|url)\s*[=(]\s*[\"']?(https?:)?//", page)


def test_write_html_writes_atomically(tmp_path):
    report, extras = sample_report()
    path = write_html(tmp_path / "out", report, extras)
    assert path == tmp_path / "out" / "report.html"
    assert path.read_text() == render_html(report, extras)
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]  # no temp left behind


# ----------------------------------------------------------------------------- headless Chromium
def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is not installed (CI must install the Debian package)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


def _run_chromium(exe: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    return subprocess.run([exe, *flags, *args], capture_output=True, text=True, timeout=120,
                          check=False)


def decode_png(data: bytes) -> np.ndarray:
    """A tiny decoder for 8-bit RGB/RGBA non-interlaced PNGs (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h, ctype = 8, [], 0, 0, 2
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and not interlace
        elif kind == b"IDAT":
            idat.append(body)
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8).reshape(h, w * bpp + 1)
    out = np.zeros((h, w * bpp), np.uint8)
    prev = np.zeros(w * bpp, np.int64)
    for y in range(h):
        f, line = int(raw[y, 0]), raw[y, 1:].astype(np.int64)
        if f == 0:
            cur = line
        elif f == 1:
            cur = np.cumsum(line.reshape(-1, bpp), axis=0).ravel() % 256
        elif f == 2:
            cur = (line + prev) % 256
        else:
            cur = np.asarray(_unfilter_slow(f, line.tolist(), prev.tolist(), bpp), np.int64)
        out[y] = cur
        prev = cur
    return out.reshape(h, w, bpp)


def _unfilter_slow(f: int, line: list[int], prev: list[int], bpp: int) -> list[int]:
    cur = [0] * len(line)
    for i, x in enumerate(line):
        a = cur[i - bpp] if i >= bpp else 0
        b = prev[i]
        if f == 3:
            cur[i] = (x + (a + b) // 2) & 255
            continue
        c = prev[i - bpp] if i >= bpp else 0
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        cur[i] = (x + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    return cur


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    exe = _chromium()
    tmp = tmp_path_factory.mktemp("html")
    report, extras = sample_report()
    page = write_html(tmp, report, extras).as_uri()
    dom = _run_chromium(exe, tmp, "--dump-dom", page)
    png = tmp / "shot.png"
    shot = _run_chromium(exe, tmp, f"--screenshot={png}", "--window-size=1200,2000", page)
    return dom, shot, png


def test_chromium_renders_the_plots_into_the_dom(rendered):
    dom, _, _ = rendered
    assert dom.returncode == 0, dom.stderr[-2000:]
    plots = _plots(dom.stdout)
    assert plots.count("histogram") == 4 and plots.count("node-errors") == 1
    assert len(re.findall(r'<rect class="bar"', dom.stdout)) >= 20
    assert len(re.findall(r'<circle ', dom.stdout)) == 20


def test_chromium_screenshot_shows_the_plots(rendered):
    _, shot, png = rendered
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    img = decode_png(png.read_bytes())
    assert img.shape[:2] == (2000, 1200)
    rgb = img[..., :3].reshape(-1, 3)
    assert len(np.unique(rgb, axis=0)) > 50  # not blank
    assert tuple(np.median(rgb, axis=0).astype(int)) == PAGE_BG  # the page itself, not an error
    assert np.sum(np.all(rgb == BAR_BLUE, axis=1)) > 5000  # histogram bars are drawn
