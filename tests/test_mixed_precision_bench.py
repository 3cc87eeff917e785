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
    assert "| Good | tflm | 16x8 only (converter) | failed: RuntimeError: nope |" in md
    assert "| Good | tflm | int8 only (converter) | 0.5000 | 0.250 |" in md


def test_the_plan_row_says_what_the_job_delivered():
    """The 'rewrite --accuracy' row reads the job's report: the plan delivered (its ops in 16x8,
    the refine move kept), or the int8 file when none was, and the later moves kept."""
    layers = [{"index": i} for i in range(65)]
    report = {"quantize": "int8", "precision": {
        "delivered": True, "met": True, "layers": layers,
        "plan": {"promoted": 40, "refined": {"kept": True, "move": "int16 ranges 2x wider"}}}}
    assert mp.chosen(report) == "40/65 ops 16x8, int16 ranges 2x wider"
    whole = {"quantize": "int8", "precision": {
        "delivered": True, "met": True, "layers": layers,
        "plan": {"promoted": 65, "label": "the whole model in 16x8 (TFLite converter)",
                 "refined": {"kept": False, "move": "int16 ranges 2x wider"}}}}
    assert mp.chosen(whole) == "the whole model in 16x8 (TFLite converter)"
    missed = {"quantize": "int8", "precision": {"delivered": False, "met": False,
                                                "layers": layers, "plan": {"promoted": 65}},
              "approximation": {"kept": True, "rule": "softmax_ramps"}}
    assert mp.chosen(missed) == "the whole model in 16x8 with softmax_ramps (approximate)"
    missed.pop("approximation")
    assert mp.chosen(missed) == "int8 file (no plan delivered)"
    assert mp.chosen({"quantize": "int8", "recover": {"kept": True}}) == (
        "int8 file (no plan searched), fine-tuned (--recover)")
    rows = [{"model": "M", "target": "tflm", "plan": {
        "cosine": 0.99123, "top1": 0.75, "exit": 0, "met": True, "chosen": "40/65 ops 16x8",
        "vela_ms": 8.5, "sram_kib": 244.4, "size_kib": 3965.0, "cpu_ops": 0}}]
    assert ("| M | tflm | rewrite --accuracy (exit 0): 40/65 ops 16x8 | 0.9912 | 0.750 | 8.5 | "
            "244.4 | 3965.0 | 0 |") in mp.table(rows)


def test_what_other_benchmarks_take_from_it_exists():
    """benchmarks/precision_bounds.py imports this module and called a helper that a change here
    had removed (AttributeError, found only when regenerating): every ``mp.NAME`` another
    benchmark reads must exist."""
    import re
    from pathlib import Path

    root = Path(mp.__file__).parent
    used = {}
    for path in root.glob("*.py"):
        text = path.read_text()
        if re.search(r"import mixed_precision as mp\b", text):
            used[path.name] = set(re.findall(r"\bmp\.(\w+)", text))
    assert used, "no benchmark imports mixed_precision: the test reads nothing"
    missing = {f: sorted(n for n in names if not hasattr(mp, n)) for f, names in used.items()}
    assert not any(missing.values()), missing
