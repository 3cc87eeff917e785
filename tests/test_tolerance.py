"""One tolerance policy for the job, `rewrite verify`, the per-rule and the per-node checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewriter.rules.base import Applied, Bound
from rewriter.verify.metrics import compare_within
from rewriter.verify.tolerance import (
    ARTIFACT_RTOL,
    DEFAULT_POLICY,
    EXACT_RTOL,
    INT8_MIN_COSINE,
    bound_of,
    output_scale,
)

REF = {"y": np.array([[-3.0, 2.0], [0.5, np.inf]])}


def test_output_scale_ignores_non_finite_values():
    assert output_scale(REF) == {"y": 3.0}


def test_bound_of_reads_applied_objects_and_their_json():
    approx = {"exact": False, "bound": {"max_abs_error": 2e-3}}
    assert bound_of({"exact": True}) is None and bound_of(approx) == 2e-3
    assert bound_of({"exact": False, "bound": None}) == math.inf
    applied = Applied(rule="r", root="n", matched=["n"], created=[], exact=False,
                      bound=Bound(2e-3, (-8.0, 8.0)))
    assert bound_of(applied) == 2e-3


def test_exact_rewrites_allow_float_rounding_only():
    tol = DEFAULT_POLICY.for_rewrite([{"exact": True}], REF)
    assert tol.atol == {"y": pytest.approx(EXACT_RTOL * 3.0)} and tol.rtol == EXACT_RTOL
    assert tol.min_cosine is None and "exact" in tol.note


def test_a_tensor_bound_is_the_same_formula_as_an_output_bound():
    tol = DEFAULT_POLICY.for_rewrite([{"exact": False, "bound": {"max_abs_error": 1e-3}}], REF)
    assert tol.atol["y"] == pytest.approx(DEFAULT_POLICY.tensor_atol(3.0, 1e-3))
    assert tol.atol["y"] == pytest.approx(EXACT_RTOL * 3.0 + 1e-3 * 3.0)
    assert DEFAULT_POLICY.tensor_atol(0.25, 1e-3) == pytest.approx(EXACT_RTOL * 0.25 + 1e-3)


def test_artifact_tolerance_by_quantization():
    int8 = DEFAULT_POLICY.for_artifact("int8", REF)
    assert int8.min_cosine == INT8_MIN_COSINE and int8.atol == math.inf
    f16 = DEFAULT_POLICY.for_artifact("float16", REF)
    assert f16.rtol == ARTIFACT_RTOL["float16"] == 1e-2
    assert f16.atol == {"y": pytest.approx(3e-2)}
    assert DEFAULT_POLICY.for_artifact("none", REF).rtol == 1e-4


def test_compare_within_applies_the_tolerance_and_states_it():
    ref = {"y": np.array([1.0, 2.0])}
    tol = DEFAULT_POLICY.for_artifact("none", ref)
    ok = compare_within(ref, {"y": ref["y"] + 1e-4}, tol)
    bad = compare_within(ref, {"y": ref["y"] + 1e-3}, tol)
    assert ok.ok and not bad.ok and bad.notes == [tol.note]


def test_a_float_artifact_carries_the_approximate_rules_bounds():
    applied = [{"exact": False, "bound": {"max_abs_error": 5e-4}},
               {"exact": False, "bound": {"max_abs_error": 5e-4}}, {"exact": True}]
    tol = DEFAULT_POLICY.for_artifact("none", REF, applied)
    assert tol.atol["y"] == pytest.approx(1e-4 * 3.0 + 1e-3 * 3.0)
    assert tol.min_cosine == DEFAULT_POLICY.approx_min_cosine and "bounds (0.001)" in tol.note
    exact_only = DEFAULT_POLICY.for_artifact("none", REF, [{"exact": True}])
    assert exact_only.atol["y"] == pytest.approx(3e-4) and exact_only.min_cosine is None
    assert DEFAULT_POLICY.for_artifact("int8", REF, applied).atol == math.inf  # cosine decides
