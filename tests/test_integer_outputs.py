"""Integer outputs (an arg-max index map, ids) are judged as integers everywhere, never by the
cosine of their class numbers: the verdict (index agreement >= 0.99 where the criterion has a
cosine, every index equal in a float file), the tolerance note above it, the summary, and
``--accuracy COS`` (each output by its own criterion: cosine >= COS for a float output, index
agreement >= COS for an integer one).

The numbers: an index map of 512 classes in 0..3 with one index off by one keeps a cosine of
0.9997 (>= 0.999) while its index agreement is 511/512 = 0.99805 (< 0.999): judged by cosine, an
``--accuracy 0.999`` target looked met on it. The whole job on a fitted arg-max head is in
``tests/test_family_argmax.py`` (``-m slow``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewriter.verify.metrics import COSINE, INDEX_AGREEMENT, compare, compare_within, reached
from rewriter.verify.tolerance import DEFAULT_POLICY, MIN_INDEX_AGREEMENT, judged_by


def _index_map() -> tuple[np.ndarray, np.ndarray]:
    """8 samples of 8x8 classes in 0..3 and the same with one index off by one (511/512)."""
    ref = (np.arange(512).reshape(8, 1, 8, 8) * 7 % 4).astype(np.int64)
    test = ref.copy()
    test[0, 0, 0, 1] += 1  # 1 -> 2
    return ref, test


LOGITS = np.linspace(-1, 1, 80).reshape(8, 1, 10)


def test_an_index_map_off_at_one_index_keeps_a_cosine_that_would_pass():
    """Why cosine is the wrong measure: the numbers the module docstring gives."""
    ref, test = _index_map()
    [o] = compare({"argmax": ref}, {"argmax": test}, atol=math.inf, rtol=0.0,
                  min_cosine=0.99).outputs
    assert o.cosine == pytest.approx(0.99972, abs=1e-5) and o.cosine >= 0.999
    assert o.index_agreement == 511 / 512 < 0.999
    assert reached(o) == (INDEX_AGREEMENT, 511 / 512)


def test_reached_judges_float_outputs_by_cosine_and_integer_ones_by_index_agreement():
    ref, test = _index_map()
    cmp = compare({"argmax": ref, "logits": LOGITS}, {"argmax": test, "logits": LOGITS * 0.5},
                  atol=math.inf, rtol=0.0, min_cosine=0.99)
    got = {o.name: reached(o) for o in cmp.outputs}
    assert got == {"argmax": (INDEX_AGREEMENT, 511 / 512), "logits": (COSINE, pytest.approx(1.0))}
    # judged element-wise (a float file, an exact rewrite): still an integer, still its share
    [o] = compare({"argmax": ref}, {"argmax": test}).outputs
    assert o.integer and o.min_index_agreement is None and reached(o) == (INDEX_AGREEMENT,
                                                                           511 / 512)
    [o] = compare({"logits": LOGITS}, {"logits": LOGITS}).outputs
    assert not o.integer and o.index_agreement is None and reached(o)[0] == COSINE


def test_the_int8_note_says_what_the_outputs_were_judged_by():
    """report.md prints the tolerance note above the index-agreement line: with no float output
    it must not say "pass is cosine >= 0.99"."""
    ref, _ = _index_map()
    only = DEFAULT_POLICY.for_artifact("int8", {"argmax": ref}).note
    assert only == ("int8 artifact vs float original: pass is index agreement >= 0.99 (the "
                    "share of equal indices) for the integer output argmax; no output judged "
                    "by cosine"), only
    both = DEFAULT_POLICY.for_artifact("int8", {"logits": LOGITS, "argmax": ref}).note
    assert both == ("int8 artifact vs float original: pass is cosine >= 0.99 for the float "
                    "outputs, index agreement >= 0.99 (the share of equal indices) for the "
                    "integer output argmax"), both
    floats = DEFAULT_POLICY.for_artifact("int8", {"logits": LOGITS}).note
    assert floats == "int8 artifact vs float original: pass is cosine >= 0.99"
    assert MIN_INDEX_AGREEMENT == DEFAULT_POLICY.int8_min_cosine == 0.99
    assert judged_by("cosine >= 0.999", None) == "cosine >= 0.999"


def test_the_note_matches_the_verdict_it_sits_above():
    """Whatever the note says an output was judged by is what compare judged it by."""
    ref, test = _index_map()
    test[1, 0, :3, :3] = (test[1, 0, :3, :3] + 1) % 4  # 10 of 512 off: 0.9805 < 0.99
    reference = {"logits": LOGITS, "argmax": ref}
    cmp = compare_within(reference, {"logits": LOGITS, "argmax": test},
                         DEFAULT_POLICY.for_artifact("int8", reference), 8)
    by = {o.name: o for o in cmp.outputs}
    assert by["argmax"].min_cosine is None and by["argmax"].min_index_agreement == 0.99
    assert by["argmax"].cosine > 0.99 and not by["argmax"].ok  # cosine would have passed it
    assert by["logits"].min_cosine == 0.99 and by["logits"].ok
    assert "index agreement >= 0.99" in cmp.notes[0] and not cmp.ok


def test_a_float_file_judges_an_integer_output_exactly_and_says_so():
    """onnx (a float file): the element-wise tolerance is 1e-4 of the output's scale, below one
    index step, so every index must be equal; the note and the summary say that, not a cosine."""
    from rewriter.report.build import _criteria

    ref, test = _index_map()
    reference = {"argmax": ref}
    tol = DEFAULT_POLICY.for_artifact("none", reference)
    assert tol.note.endswith("; the integer output argmax: every index equal to the "
                             "original's"), tol.note
    same = compare_within(reference, {"argmax": ref.astype(np.int32)}, tol, 8)
    assert same.ok and _criteria(same) == (
        "index agreement of argmax 1.0000 over 512 indices of 8 input(s) (share of equal arg-max "
        "indices, the criterion: every index equal, element-wise; cosine not judged)")
    assert "cosine 1.0" not in _criteria(same)
    off = compare_within(reference, {"argmax": test}, tol, 8)
    assert not off.ok and off.outputs[0].mismatched == 1
    assert _criteria(off).startswith("index agreement of argmax 0.9980 over 512")
    # a float output beside it says the relative error it was judged by (element-wise)
    both = compare_within({"argmax": ref, "logits": LOGITS}, {"argmax": ref, "logits": LOGITS},
                          DEFAULT_POLICY.for_artifact("none", {"argmax": ref, "logits": LOGITS}),
                          8)
    assert _criteria(both).startswith("max relative error 0 of scale (logits) vs the tolerance "
                                      "0.0001 of scale + 0.0001 x |value|, element-wise: 0 of "
                                      "80 value(s) outside; index agreement of argmax 1.0000")


def test_the_plan_search_measures_an_integer_output_by_index_agreement():
    """``--accuracy``'s measure of a plan (plan_search.accuracy): the share of equal indices for
    an integer output (a float index read as round(value)), cosine for a float one."""
    from rewriter.tune.plan_search import accuracy, criteria

    ref, test = _index_map()
    refs = [{"argmax": r, "logits": lg} for r, lg in zip(ref, LOGITS, strict=True)]
    tests = [{"argmax": t.astype(np.float32) + 0.2, "logits": -lg}
             for t, lg in zip(test, LOGITS, strict=True)]
    acc, top1 = accuracy(refs, tests)
    assert acc["argmax"] == 511 / 512 and acc["logits"] == pytest.approx(-1.0)
    assert criteria(refs[0]) == {"argmax": INDEX_AGREEMENT, "logits": COSINE}
    assert top1 == {"logits": 0.0}


def _result(int8: dict[str, float], plan: dict[str, float], target: float):
    from rewriter.tune.plan_search import SearchResult, Trial

    i8 = Trial((), int8, {"size_kib": 2.0})
    best = Trial(("conv",), plan, {"size_kib": 2.2})
    met = min(plan.values()) >= target
    return SearchResult(target, met, best, i8, [i8, best],
                        [{"index": 0, "op": "CONV_2D", "scope": "conv", "precision": "16x8"}],
                        {"argmax": INDEX_AGREEMENT, "logits": COSINE})


def test_the_report_and_json_say_per_output_which_criterion_and_what_it_reached():
    from rewriter.job.precision import PrecisionPlan, worst_reached

    res = _result({"argmax": 0.998046875, "logits": 0.9712},
                  {"argmax": 0.998046875, "logits": 0.9994}, 0.999)
    plan = PrecisionPlan(0.999, res, True, {"size_kib": 1.8}, {"size_kib": 2.2})
    out = plan.to_json()
    assert not out["met"]
    assert out["outputs"] == {
        "argmax": {"criterion": "index agreement", "target": 0.999, "int8": 0.998046875,
                   "plan": 0.998046875, "met": False},
        "logits": {"criterion": "cosine", "target": 0.999, "int8": 0.9712, "plan": 0.9994,
                   "met": True}}
    text = plan.describe()
    assert ("(argmax index agreement 0.9980 (int8 0.9980), logits cosine 0.9994 (int8 "
            "0.9712))") in text, text
    plan.recover_not_tried("no gradient")
    assert plan.describe().endswith("then --recover, the search's last move: not tried: "
                                    "no gradient")
    ref, test = _index_map()
    cmp = compare({"argmax": ref, "logits": LOGITS}, {"argmax": test, "logits": LOGITS},
                  atol=math.inf, rtol=0.0, min_cosine=0.99)
    assert worst_reached(cmp) == 511 / 512


def test_the_search_is_started_when_an_integer_output_misses_the_target():
    """The job's trigger: before, min cosine 0.9997 >= 0.999 said the int8 file met it."""
    from rewriter.job.pipeline import _misses

    ref, test = _index_map()
    cmp = compare({"argmax": ref}, {"argmax": test}, atol=math.inf, rtol=0.0, min_cosine=0.99)
    assert _misses(cmp, 0.999) and not _misses(cmp, 0.998)


def test_rewrite_verify_says_why_an_index_map_fails():
    """``rewrite verify`` on a quantised file: an index map below 0.99 agreement names it (it
    printed the output's name and no reason: its cosine 0.997 passed and atol is inf)."""
    from rewriter.commands.verify import _why

    ref, test = _index_map()
    test[1, 0, :3, :3] = (test[1, 0, :3, :3] + 1) % 4
    [o] = compare({"argmax": ref}, {"argmax": test}, atol=math.inf, rtol=0.0,
                  min_cosine=0.99).outputs
    assert not o.ok and o.cosine > 0.99
    assert _why(o) == ("argmax: index agreement 0.9805 < 0.99 (share of equal indices; an "
                       "integer output)"), _why(o)
