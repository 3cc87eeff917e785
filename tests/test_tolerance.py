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


# ------------------------------------------------------------ float files: the model's own noise
def test_perturbed_moves_each_float_one_step_and_leaves_ids_alone():
    from rewriter.verify.float_noise import perturbed

    x = np.array([[1.0, -2.0, 0.0, 3e-30]], np.float32)
    ids = np.array([[3, 4]], np.int32)
    moved = perturbed({"x": x, "ids": ids})
    steps = np.abs(moved["x"].astype(np.float64) - x) / np.spacing(np.abs(x)).astype(np.float64)
    assert np.all((steps >= 0.5) & (steps <= 1.0)) and not np.array_equal(moved["x"], x)
    assert np.array_equal(moved["ids"], ids) and moved["x"].dtype == np.float32
    assert np.array_equal(perturbed({"x": x})["x"], moved["x"])  # seeded


def _cancelling(sample):
    """log|a.x - b.x| with b = a(1 + 1e-3): a float32 function that amplifies its rounding."""
    x = sample["x"].astype(np.float32)
    a = np.linspace(1.0, 2.0, x.shape[-1], dtype=np.float32)
    d = np.float32(x @ a) - np.float32(x @ (a * np.float32(1.001)))
    return {"y": np.log(np.abs(d) + np.float32(1e-12)).reshape(1, 1)}


def test_the_noise_floor_is_the_original_s_own_response_to_one_step_of_its_input():
    from rewriter.verify.float_noise import noise_floor

    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((1, 4096)).astype(np.float32)} for _ in range(3)]
    ref = {"y": np.stack([_cancelling(s)["y"] for s in samples])}
    floor = noise_floor(_cancelling, samples, ref)
    assert 1e-6 < floor["y"] / output_scale(ref)["y"] < 1e-2  # measured, not 0
    flat = noise_floor(lambda s: {"y": 2 * s["x"][:, :1]}, samples,
                       {"y": np.stack([2 * s["x"][:, :1] for s in samples])})
    assert flat["y"] <= 2 * np.abs(samples[0]["x"]).max() * 2 ** -22  # a linear map: ~1 step
    ids = [{"x": np.arange(4, dtype=np.int32)[None]}]
    assert noise_floor(lambda s: {"y": s["x"] * 1.0}, ids, {"y": ids[0]["x"][None] * 1.0}) \
        == {"y": 0.0}


def test_a_float_file_is_judged_against_the_model_s_own_float32_noise_where_larger():
    from rewriter.verify.float_noise import NOISE_FACTOR

    ref = {"y": np.array([[10.0, -5.0]]), "z": np.array([[1.0, 0.5]])}
    off = {"y": ref["y"] + np.array([[3e-3, 0.0]]), "z": ref["z"] + 2e-5}  # y: 3e-4 of scale
    plain = DEFAULT_POLICY.for_artifact("none", ref)
    assert not compare_within(ref, off, plain, 1).ok
    floor = {"y": 5e-4, "z": 1e-9}  # y moves 5e-5 of its scale for one input step; z does not
    tol = DEFAULT_POLICY.for_artifact("none", ref, noise_floor=floor)
    assert tol.atol == {"y": NOISE_FACTOR * 5e-4, "z": ARTIFACT_RTOL["none"] * 1.0}
    assert compare_within(ref, off, tol, 1).ok
    assert "8x the original's own change" in tol.note and "y: 0.0004" in tol.note
    assert "z:" not in tol.note and tol.note.startswith("float32 artifact vs original")
    # four times the floor's allowance still fails: the floor widens, it does not switch off
    assert not compare_within(ref, {**off, "y": ref["y"] + 4 * NOISE_FACTOR * 5e-4}, tol, 1).ok
