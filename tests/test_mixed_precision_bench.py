"""benchmarks/mixed_precision.py: a model whose files cannot be made is a row saying why, and the
run goes on to the next model (a RuntimeError out of MobileNetV3Large's row stopped the whole
run before; ResNet50 was never reached)."""

from __future__ import annotations

import json

from benchmarks import mixed_precision as mp


def test_a_failed_model_is_a_row_and_the_run_goes_on(tmp_path, monkeypatch):
    seen = []

    def one(name, target, args, tmp, log):
        seen.append(name)
        if name == "Bad":
            raise RuntimeError("converter said no\nQuantization to 16x8-bit not yet supported "
                               "for op: 'HARD_SWISH'.\n")
        return {"model": name, "target": target, "int8": {"cosine": 0.5, "top1": 0.25},
                "16x8": {"error": "RuntimeError: nope"}}

    monkeypatch.setattr(mp, "one", one)
    monkeypatch.setattr(mp.stamp, "stamp_files", lambda *a, **k: None)
    out = tmp_path / "r"
    assert mp.main(["--models", "Bad,Good", "--targets", "tflm", "--out", str(out)]) == 0
    assert seen == ["Bad", "Good"]
    rows = json.loads(out.with_suffix(".json").read_text())
    assert rows[0] == {"model": "Bad", "target": "tflm", "failed": "RuntimeError: Quantization "
                       "to 16x8-bit not yet supported for op: 'HARD_SWISH'."}
    md = out.with_suffix(".md").read_text()
    assert ("| Bad | tflm | every file | failed: RuntimeError: Quantization to 16x8-bit not yet "
            "supported for op: 'HARD_SWISH'. |") in md
    assert "| Good | tflm | 16x8 only | failed: RuntimeError: nope |" in md
    assert "| Good | tflm | int8 only | 0.5000 | 0.250 |" in md
