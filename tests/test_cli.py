"""The command line as people and pipelines use it: parsing, help, fast refusals, output that
survives a closed pipe, progress in CI logs, and words that fit each target."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rewriter.cli import build_parser, main, with_default_command

from .conftest import ROOT, SAMPLES


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# ----------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("value", ["-1,1", "-0.5,0.5", "image:-1,1", "-1e-3,1e3"])
def test_negative_ranges_are_values_not_options(value):
    args = build_parser().parse_args(["run", "m.keras", "--target", "tflite",
                                      "--input-range", value])
    assert args.input_range == [value]


def test_negative_range_in_verify_and_still_rejects_unknown_options(capsys):
    args = build_parser().parse_args(["verify", "a.keras", "b.tflite", "--input-range", "-2,2"])
    assert args.input_range == ["-2,2"]
    assert main(["run", "m.keras", "--target", "tflite", "-x"]) == 2
    assert "unrecognized arguments: -x" in capsys.readouterr().err


@pytest.mark.parametrize("argv, command, quiet", [
    (["-q", "m.keras", "--target", "edgetpu"], "run", True),
    (["--quiet", "run", "m.keras", "--target", "edgetpu"], "run", True),
    (["m.keras", "-q", "--target", "edgetpu"], "run", True),
    (["m.keras", "--target", "edgetpu"], "run", False),
    (["-q", "targets"], "targets", True),
    (["targets"], "targets", False),
])
def test_global_options_before_the_model_or_command(argv, command, quiet):
    args = build_parser().parse_args(with_default_command(argv))
    assert args.command == command and args.quiet is quiet


def test_main_help_shows_the_main_jobs_options(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "rewrite [run] MODEL --target T" in out
    for option in ("--calibration DATA", "--input-range", "--exact-only", "--quantize",
                   "--check-each-rule", "-o OUT, --out OUT"):
        assert option in out, option


# ----------------------------------------------------------------------------- fail fast
_NO_TF = ("import sys; from rewriter.cli import main; code = main({argv!r}); "
          "print(code, 'tensorflow' in sys.modules)")


@pytest.mark.parametrize("argv, message", [
    ([str(SAMPLES["keras"]), "--target", "edgeptu"], "unknown target 'edgeptu'"),
    (["check", str(SAMPLES["keras"]), "-t", "ethos-u55-129"], "unknown target"),
    (["models/nope.keras", "--target", "edgetpu"], "models/nope.keras: no such file"),
    (["check", "nope.tflite", "--target", "edgetpu"], "nope.tflite: no such file"),
    ([str(SAMPLES["keras"]), "--target", "edgetpu", "--calibration", "cal.npy"],
     "--calibration cal.npy: no such file"),
    (["verify", str(SAMPLES["keras"]), "b.tflite"], "b.tflite: no such file"),
    (["verify", str(SAMPLES["keras"]), str(SAMPLES["keras"]), "--atol", "abc"], "--atol"),
    (["inspect", "nope.onnx"], "nope.onnx: no such file"),
])
def test_typos_are_refused_before_tensorflow_is_imported(argv, message):
    proc = subprocess.run([sys.executable, "-c", _NO_TF.format(argv=argv)], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert len(proc.stderr.splitlines()) == 1


# ----------------------------------------------------------------------------- output
def test_closed_stdout_ends_quietly():
    """`rewrite targets --json | head`: the reader has gone before the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "rewriter", "targets", "--json"],
                              stdout=write_end, stderr=subprocess.PIPE, env=_env(), text=True,
                              timeout=120)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 0


def test_progress_is_plain_lines_when_stderr_is_not_a_terminal(cli):
    code, out, err = cli("inspect", SAMPLES["keras"])
    assert code == 0 and "Conv2D" in out
    assert err.startswith(f"loading {SAMPLES['keras']}: ") and err.rstrip().endswith("s")
    from rewriter.ui import is_progress_line

    assert all(is_progress_line(line) for line in err.splitlines())
    assert not is_progress_line("error: x: 1.0s") and not is_progress_line("warning: x: 1.0s")
    code, _, err = cli("-q", "inspect", SAMPLES["keras"])
    assert code == 0 and err == ""


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    from rewriter.export.onnx import export_onnx
    from rewriter.export.tflite import export_tflite
    from rewriter.frontends import load_model

    d = tmp_path_factory.mktemp("artifacts")
    model = load_model(SAMPLES["keras"])
    calib = [{"image": c[None]} for c in np.load(ROOT / "models" / "calibration.npy")[:8]]
    return {"int8": export_tflite(model, d / "int8.tflite", quantize="int8",
                                  calibration=calib).path,
            "onnx": export_onnx(model, d / "model.onnx").path}


def test_inspect_reads_the_tools_own_tflite(cli, artifacts):
    code, out, _ = cli("inspect", artifacts["int8"], "--json")
    assert code == 0
    info = json.loads(out)
    assert info["format"] == "tflite" and info["operators"] == sum(info["ops"].values())
    assert info["ops"]["CONV_2D"] == 3 and info["ops"]["ELU"] == 3
    (image,) = info["signature"]["inputs"]
    assert image["shape"] == [1, 32, 32, 3] and image["dtype"] == "float32"
    notes = {n["op"]: n["note"] for n in info["notes"]}  # the float islands around ELU
    assert set(notes) == {"ELU", "QUANTIZE", "DEQUANTIZE"} and "float32" in notes["ELU"]
    code, out, _ = cli("inspect", artifacts["int8"])
    assert code == 0 and "CONV_2D" in out and "note: ELU" in out


def test_inspect_reads_the_tools_own_onnx(cli, artifacts):
    code, out, _ = cli("inspect", artifacts["onnx"], "--json")
    assert code == 0
    info = json.loads(out)
    assert info["format"] == "onnx" and info["opset"] == 17 and info["ops"]["Conv"] == 3
    assert [o["shape"] for o in info["signature"]["outputs"]] == [[1, 10]]


# ----------------------------------------------------------------------------- words
def test_every_target_says_what_its_placement_counts():
    from rewriter.targets import table_targets

    labels = {t.name: t.ops_label for t in table_targets()}
    assert labels["edgetpu"] == "ops on the Edge TPU"
    assert labels["tflm"] == "ops with a TFLite Micro kernel"
    assert labels["onnx"] == "ops in standard ONNX"
    assert all(label != "ops the target supports" for label in labels.values()), labels


def test_check_on_a_runtime_target_does_not_speak_of_an_accelerator(cli):
    code, out, _ = cli("check", SAMPLES["keras"], "--target", "onnx", "--graph-only")
    assert "ops in standard ONNX" in out and "accelerator" not in out


def test_report_placement_column_uses_the_targets_words():
    from rewriter.report.build import render_markdown
    from rewriter.report.html import render_html

    placement = {"ops_total": 17, "ops_on_accelerator": 17, "percent_on_accelerator": 100.0,
                 "label": "ops with a TFLite Micro kernel", "cut": None}
    report = {"ok": True, "target": "tflm", "summary": "", "placement_before": placement,
              "placement_after": placement}
    md, html = render_markdown(report), render_html(report)
    assert "| model | ops with a TFLite Micro kernel | cut |" in md
    assert "ops with a TFLite Micro kernel" in html
    assert "accelerator" not in md and "accelerator" not in html


_VELA = {"config": "ethos-u55-128", "npu_ops": 7, "cpu_ops": 11, "file_ops": 17,
         "cpu_reasons": [], "summary": {"inference_time": "0.000229", "cycles_npu": "114580",
                                        "nn_macs": "5177504", "sram_memory_used": "144.0"}}


def test_vela_counts_beside_the_tables_are_explained():
    from rewriter.report.build import render_markdown
    from rewriter.targets.vela import count_note

    note = count_note(_VELA, 17)
    assert "17 operators" in note and "11 of them to the CPU" in note
    assert "other 6" in note and "7 operators" in note
    assert count_note({"npu_ops": 6, "cpu_ops": 11}, 17) is None  # counts agree: nothing to say
    assert note in render_markdown({"ok": False, "target": "ethos-u55-128", "vela": _VELA})


def test_vela_metrics_have_units_in_html_and_markdown():
    from rewriter.report.build import render_markdown
    from rewriter.report.html import render_html

    report = {"ok": True, "target": "ethos-u55-128", "summary": "", "vela": _VELA}
    html, md = render_html(report), render_markdown(report)
    for text in (html, md):
        assert "0.229 ms" in text and "144.00 KiB" in text
        assert "114580 cycles" in text and "5177504 MACs" in text
    assert "sram_memory_used" not in html  # labels, not CSV column names


def test_a_degenerate_reference_is_named_next_to_its_cosine():
    from types import SimpleNamespace

    from rewriter.report.build import summary as job_summary
    from rewriter.verify.metrics import compare

    rng = np.random.default_rng(0)
    ref = {"logits": (rng.normal(size=(8, 10)) * 1e-10).astype(np.float32)}
    test = {"logits": np.zeros((8, 10), np.float32)}
    art = compare(ref, test, atol=np.inf, rtol=0.0, min_cosine=0.99)
    assert not art.ok and art.outputs[0].cosine == 0.0
    assert "nearly zero" in art.degenerate_text() and "logits" in art.degenerate_text()
    attempt = SimpleNamespace(rewrite=SimpleNamespace(applied=[]),
                              deployment=SimpleNamespace(verdict=None), tf=compare(ref, ref),
                              artifact=SimpleNamespace(comparison=art, fallback=None))
    summary = job_summary({}, attempt, synthetic=False)
    assert "min cosine 0.00000" in summary and "nearly zero" in summary
    healthy = compare({"y": np.ones(4)}, {"y": np.ones(4)})
    assert healthy.degenerate_text() == ""
