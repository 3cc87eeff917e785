"""Comparison metrics: each statistic on hand-computed cases, and the needed tolerances."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rewriter.verify.metrics import compare, compare_arrays, compare_within, stack_samples


def test_identical_outputs_have_zero_error_and_pass():
    r = np.array([1.0, -2.0, 3.0], dtype=np.float32)
    m = compare_arrays("y", r, r.copy(), atol=0.0, rtol=0.0)
    assert m.ok
    assert m.max_abs_error == 0.0 and m.rmse == 0.0 and m.l2_rel_error == 0.0
    assert m.cosine == pytest.approx(1.0)


def test_statistics_match_hand_computation():
    r = np.array([1.0, -2.0, 4.0])
    t = np.array([1.0, -2.5, 4.0])
    m = compare_arrays("y", r, t, atol=0.0, rtol=0.0)
    assert m.max_abs_error == pytest.approx(0.5)
    assert m.max_rel_error == pytest.approx(0.5 / 4.0)  # relative to max |ref|
    assert m.max_elementwise_rel_error == pytest.approx(0.5 / 2.0)
    assert m.rmse == pytest.approx(math.sqrt(0.25 / 3))
    assert m.l2_rel_error == pytest.approx(0.5 / math.sqrt(21.0))
    assert m.cosine == pytest.approx(np.dot(r, t) / np.linalg.norm(r) / np.linalg.norm(t))
    assert m.mismatched == 1 and not m.ok


def test_needed_atol_is_the_smallest_that_passes():
    rng = np.random.default_rng(0)
    r = rng.normal(size=100)
    t = r + rng.normal(scale=1e-3, size=100)
    m = compare_arrays("y", r, t, atol=1e-6, rtol=1e-4)
    assert not m.ok
    assert compare_arrays("y", r, t, atol=m.needed_atol * 1.0001, rtol=1e-4).ok
    assert not compare_arrays("y", r, t, atol=m.needed_atol * 0.99, rtol=1e-4).ok


def test_needed_rtol_is_the_smallest_that_passes():
    rng = np.random.default_rng(1)
    r = rng.uniform(1.0, 2.0, size=50)
    t = r * (1 + rng.uniform(-1e-3, 1e-3, size=50))
    m = compare_arrays("y", r, t, atol=1e-6, rtol=1e-6)
    assert compare_arrays("y", r, t, atol=1e-6, rtol=m.needed_rtol * 1.0001).ok
    assert not compare_arrays("y", r, t, atol=1e-6, rtol=m.needed_rtol * 0.99).ok


def test_needed_rtol_is_infinite_when_a_zero_reference_is_off():
    m = compare_arrays("y", np.array([0.0, 1.0]), np.array([0.1, 1.0]), atol=0.0, rtol=0.0)
    assert m.needed_rtol == math.inf
    assert m.needed_atol == pytest.approx(0.1)


def test_per_output_tolerances_apply_by_name():
    ref = {"a": np.array([1.0]), "b": np.array([1.0])}
    test = {"a": np.array([1.01]), "b": np.array([1.01])}
    c = compare(ref, test, atol={"a": 0.02, "*": 0.0}, rtol=0.0)
    assert [o.ok for o in c.outputs] == [True, False]
    assert not c.ok
    assert [o.name for o in c.failing()] == ["b"]


def test_default_tolerance_is_relative_to_the_output_scale():
    r = np.array([1000.0, -500.0])
    assert compare({"y": r}, {"y": r + 1e-3}).ok  # 1e-6 relative
    assert not compare({"y": r}, {"y": r + 1.0}).ok  # 1e-3 relative


def test_nan_where_reference_is_finite_is_a_mismatch():
    m = compare_arrays("y", np.array([1.0, 2.0]), np.array([1.0, np.nan]), atol=1.0, rtol=1.0)
    assert not m.ok
    assert m.nonfinite_mismatch == 1


def test_nan_in_both_at_the_same_place_is_a_mismatch_counted_and_named():
    r = np.array([1.0, np.nan, np.inf])
    m = compare_arrays("y", r, r.copy(), atol=0.0, rtol=0.0)
    assert not m.ok
    assert (m.nonfinite_mismatch, m.mismatched) == (2, 2)
    assert (m.ref_nan, m.ref_inf, m.test_nan, m.test_inf) == (1, 1, 1, 1)
    assert m.nonfinite_text() == "y: 1 NaN + 1 Inf in the reference, 1 NaN + 1 Inf in the candidate"
    assert m.max_abs_error == 0.0  # statistics over the finite elements


def test_all_nan_outputs_do_not_pass_with_cosine_one():
    """All-NaN data used to report "artifact matches (min cosine 1.00000)"."""
    r = np.full((4, 10), np.nan)
    c = compare({"logits": r}, {"logits": r.copy()}, atol=float("inf"), rtol=0.0,
                min_cosine=0.99)
    assert not c.ok
    assert math.isnan(c.outputs[0].cosine)
    assert c.nonfinite == 40
    assert c.nonfinite_text("original", "artifact") == (
        "logits: 40 NaN in the original, 40 NaN in the artifact")
    assert json.loads(json.dumps(c.to_json(), allow_nan=False))["outputs"]["logits"][
        "cosine"] == "nan"


def test_all_finite_outputs_name_no_nonfinite_values():
    c = compare({"y": np.ones(3)}, {"y": np.ones(3)})
    assert c.ok and c.nonfinite == 0 and c.nonfinite_text() == ""


def test_shape_mismatch_fails_with_a_note():
    m = compare_arrays("y", np.zeros((2, 3)), np.zeros((4,)), atol=1.0, rtol=1.0)
    assert not m.ok
    assert "shape mismatch" in m.note


def test_same_size_different_shape_is_reshaped_and_noted():
    m = compare_arrays("y", np.ones((1, 4)), np.ones((4,)), atol=0.0, rtol=0.0)
    assert m.ok
    assert "reshaped" in m.note


def test_min_cosine_is_an_extra_criterion():
    r = np.array([1.0, 0.0])
    t = np.array([1.0, 1.0])  # cosine 0.707
    assert compare_arrays("y", r, t, atol=10.0, rtol=0.0).ok
    assert not compare_arrays("y", r, t, atol=10.0, rtol=0.0, min_cosine=0.99).ok


def test_comparison_json_is_valid_json_even_with_infinities():
    c = compare({"y": np.array([0.0])}, {"y": np.array([1.0])}, atol=0.0, rtol=0.0)
    text = json.dumps(c.to_json(), allow_nan=False)
    data = json.loads(text)
    assert data["ok"] is False
    assert data["outputs"]["y"]["needed_rtol"] == "inf"
    assert {"max_abs_error", "max_rel_error", "cosine", "atol", "rtol"} <= set(
        data["outputs"]["y"])


def test_missing_output_in_test_raises():
    with pytest.raises(KeyError, match="z"):
        compare({"z": np.zeros(1)}, {"y": np.zeros(1)})


def test_stack_samples_adds_a_leading_axis_per_run():
    runs = [{"y": np.zeros((1, 3))}, {"y": np.ones((1, 3))}]
    stacked = stack_samples(runs)
    assert stacked["y"].shape == (2, 1, 3)
    assert stacked["y"][1].sum() == 3


def test_top1_agreement_of_classifier_outputs_and_its_criterion():
    """A classifier output ([samples, 1, classes]) reports the share of samples whose arg-max
    agrees; with ``min_top1`` that share, not the cosine, decides; other outputs report None."""
    ref = np.array([[[0.1, 0.9]], [[0.8, 0.2]], [[0.6, 0.4]], [[0.3, 0.7]]])
    test = np.array([[[0.2, 0.8]], [[0.7, 0.3]], [[0.4, 0.6]], [[0.3, 0.7]]])  # one flips
    plain = compare({"p": ref}, {"p": test}, atol=math.inf, rtol=0.0, min_cosine=0.999)
    [o] = plain.outputs
    assert o.top1_agreement == 0.75 and o.min_top1 is None and not o.ok  # cosine 0.97 judged
    judged = compare({"p": ref}, {"p": test}, atol=math.inf, rtol=0.0, min_cosine=0.999,
                     min_top1=0.75)
    [o] = judged.outputs
    assert o.ok and o.min_top1 == 0.75 and o.min_cosine is None
    assert not compare({"p": ref}, {"p": test}, atol=math.inf, rtol=0.0,
                       min_top1=0.8).outputs[0].ok
    image = np.ones((2, 1, 4, 4, 3))
    assert compare({"f": image}, {"f": image}).outputs[0].top1_agreement is None


def test_an_index_map_is_judged_by_index_agreement_not_cosine():
    """An integer output (an arg-max class per pixel) compared against a cosine passes on the
    share of equal indices (>= MIN_INDEX_AGREEMENT): class numbers have no cosine. Exact
    comparisons (no cosine) still count every differing index as a mismatch, and report the
    share too."""
    from rewriter.verify.metrics import MIN_INDEX_AGREEMENT

    ref = np.zeros((2, 1, 10, 10), np.int64)
    ref[:, :, :5] = 3
    test = ref.copy()
    test[0, 0, 0, 0] = 1  # 1 of 200 pixels differs: agreement 0.995
    [o] = compare({"m": ref}, {"m": test}, atol=math.inf, rtol=0.0, min_cosine=0.999).outputs
    assert o.index_agreement == 0.995 and o.ok and o.min_cosine is None
    assert o.min_index_agreement == MIN_INDEX_AGREEMENT == 0.99 and o.top1_agreement is None
    test[0, 0, 1, :2] = 0  # 3 of 200 differ: 0.985
    [o] = compare({"m": ref}, {"m": test}, atol=math.inf, rtol=0.0, min_cosine=0.999).outputs
    assert o.index_agreement == 0.985 and not o.ok
    [o] = compare({"m": ref}, {"m": test}).outputs  # no cosine: every index counts
    assert o.mismatched == 3 and not o.ok and o.integer
    assert o.index_agreement == 0.985 and o.min_index_agreement is None  # reported, not judged


def test_the_summary_and_reports_say_an_index_map_rests_on_index_agreement():
    """The artifact's verdict on an arg-max output names index agreement and how many indices
    it counted, not a cosine it did not judge; a cosine-judged output beside it keeps its min
    cosine (over the cosine-judged outputs only). report.md and report.html say the same."""
    from rewriter.report.build import _criteria, render_markdown
    from rewriter.report.html import render_html

    ref = np.zeros((8, 1, 4, 4), np.int64)
    ref[:, :, :2] = 3
    test = ref.copy()
    test[0, 0, 0, 0] = 1  # 1 of 128 differs
    logits = np.linspace(-1, 1, 80).reshape(8, 10)
    cmp = compare({"m": ref}, {"m": test}, atol=math.inf, rtol=0.0, min_cosine=0.99, samples=8)
    text = _criteria(cmp)
    assert "min cosine" not in text
    assert text == ("index agreement of m 0.9922 over 128 indices of 8 input(s) (share of equal "
                    "arg-max indices, the criterion: >= 0.99; cosine not judged)"), text
    both = compare({"m": ref, "y": logits}, {"m": test, "y": logits * 0.5}, atol=math.inf,
                   rtol=0.0, min_cosine=0.99, samples=8)
    assert _criteria(both).startswith("min cosine 1.00000; index agreement of m 0.9922 over 128")
    report = {"ok": True, "target": "tflm", "equivalence": {"artifact": cmp.to_json()}}
    line = "index agreement of m 0.9922 over 128 indices of 8 input(s)"
    assert line in render_markdown(report) and line in render_html(report)


def test_a_float_file_s_summary_says_the_relative_error_it_was_judged_by():
    """A float artifact (onnx, float tflite) is judged element-wise (|error| <= atol + rtol x
    |value|), not by cosine: the summary said "min cosine 1.00000" on it, a number no verdict
    used. It gives the worst relative error against the tolerance, and what lies outside."""
    from rewriter.report.build import _criteria
    from rewriter.verify.tolerance import DEFAULT_POLICY

    ref = {"y": np.linspace(-2.0, 2.0, 80).reshape(8, 10)}  # scale 2: atol 2e-4
    tol = DEFAULT_POLICY.for_artifact("none", ref)
    ok = compare_within(ref, {"y": ref["y"] * (1 + 2e-5)}, tol, 8)
    assert ok.ok and _criteria(ok) == (
        "max relative error 2e-05 of scale (y) vs the tolerance 0.0001 of scale + 0.0001 x "
        "|value|, element-wise: 0 of 80 value(s) outside; top-1 agreement 1.000"), _criteria(ok)
    off = compare_within(ref, {"y": ref["y"] + 3e-3}, tol, 8)  # 3e-3 > 2e-4 + 1e-4 x 2
    assert not off.ok and "min cosine" not in _criteria(off)
    assert _criteria(off).startswith("max relative error 0.0015 of scale (y) vs the tolerance "
                                     "0.0001 of scale + 0.0001 x |value|, element-wise: 80 of 80")
    # a quantised file is judged by cosine: its summary keeps it
    int8 = compare(ref, {"y": ref["y"] * 0.5}, atol=math.inf, rtol=0.0, min_cosine=0.99)
    assert _criteria(int8).startswith("min cosine 1.00000")
