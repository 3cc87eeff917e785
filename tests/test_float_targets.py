"""Float targets judge the exported file by what was done to the model: with approximate rules
applied, the file carries their error, so it is held to their bounds (not to 1e-4 alone)."""

from __future__ import annotations

import json


def test_rknn_artifact_with_an_approximate_gelu_is_judged_by_its_bound(cli, gelu_keras, tmp_path):
    code, out, _ = cli(gelu_keras, "--target", "rknn", "-o", tmp_path / "out", "--json")
    report = json.loads(out)
    approx = [r for r in report["rules_applied"] if not r["exact"]]
    assert approx, "the ONNX profile lacks Erf: an approximate GELU is expected"
    art = report["equivalence"]["artifact"]
    (logits,) = art["outputs"].values()
    assert logits["max_abs_error"] > 1e-4 * logits["ref_max_abs"]  # beyond the float-only 1e-4
    bound = sum(r["bound"]["max_abs_error"] * r["count"] for r in approx)
    assert logits["max_abs_error"] <= bound * max(1.0, logits["ref_max_abs"])
    assert art["ok"] and code == 0, report["summary"]
    note = art["notes"][0]
    assert "2 approximate application(s)" in note and "the sum of their bounds (" in note
    assert "the model's own response to its approximations' bounds" in note
