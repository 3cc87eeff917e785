"""report.json and ``check --json`` keep every key they had before the issue-15 restructure.

The key paths were captured (``tests/data/report_keys.json``) from the sample model's jobs on
the main code before the flow was split into typed stages; a report may gain keys, never lose
one. ``tests/report_keys.py`` says how a path is written.
"""

from __future__ import annotations

import json

import pytest

from .conftest import MODELS, SAMPLES
from .report_keys import missing

CALIB = str(MODELS / "calibration.npy")


def _report(out) -> dict:
    return json.loads((out / "report.json").read_text())


def test_edgetpu_report_keeps_its_keys(edgetpu_run):
    code, out = edgetpu_run
    assert code == 0
    assert missing("run-edgetpu", _report(out)) == []


def test_ethos_u_report_with_per_rule_checks_keeps_its_keys(tmp_path, cli):
    code, _, _ = cli(SAMPLES["keras"], "--target", "ethos-u55-128", "-o", tmp_path, "-q",
                     "--calibration", CALIB, "--check-each-rule")
    assert code == 0
    assert missing("run-ethos-u55-128-check-each-rule", _report(tmp_path)) == []
    from tests.test_explore import check_vela_overlay

    check_vela_overlay(tmp_path)


def test_onnx_report_keeps_its_keys(tmp_path, cli):
    code, _, _ = cli(SAMPLES["keras"], "--target", "onnx", "-o", tmp_path, "-q",
                     "--calibration", CALIB)
    assert code == 0
    assert missing("run-onnx", _report(tmp_path)) == []


@pytest.mark.parametrize("target", ["edgetpu", "ethos-u55-128", "onnx"])
def test_check_json_keeps_its_keys(cli, target):
    code, out, _ = cli("check", SAMPLES["keras"], "--target", target, "--json", "-q")
    assert code in (0, 1)
    assert missing(f"check-{target}", json.loads(out)) == []


def test_a_lost_key_is_caught():
    report = json.loads(json.dumps({"ok": True}))
    lost = missing("run-onnx", report)
    assert "equivalence.artifact.outputs.*.cosine" in lost and "ok" not in lost
