"""An approximate node's error amplified by the layers after it: the tolerance follows the model's
own measured response to the stated bound (rewriter.verify.bound_response), not the bound alone.

The model: ``y = conv1x1(tanh(x))`` with both input channels weighted 1.5, so an error ``e`` of
``tanh`` (the approximate application's root, bound b = 1e-3) reaches ``y`` as ``3 e``; inputs
in [-0.1, 0.1] keep ``max |y| <= 0.3 < 1``, so the old rule allows ``b`` only.
"""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.rules.base import Applied, Bound
from rewriter.verify.bound_response import RESPONSE_FACTOR, bound_response
from rewriter.verify.metrics import compare_within
from rewriter.verify.tolerance import DEFAULT_POLICY, EXACT_RTOL

B = 1e-3
APPLIED = [Applied("elementwise_ramps", "act", ["act"], [], False, Bound(B, (-0.1, 0.1))),
           Applied("batchnorm_fold_into_conv", "conv", ["conv"], [], True, None)]


def _model(residual: float):
    """The original (``residual`` 0) or a rewrite of ``tanh`` off by ``residual`` everywhere."""
    import tensorflow as tf

    from rewriter.testing import model_from_function

    w = np.full((1, 1, 2, 1), 1.5, "f4")

    def f(x):
        return tf.nn.conv2d(tf.add(tf.tanh(x), residual, name="act"), w, 1, "SAME", name="conv")

    return model_from_function(f, [(1, 4, 4, 2)])


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    samples = [{"x0": rng.uniform(-0.1, 0.1, (1, 4, 4, 2)).astype("f4")} for _ in range(2)]
    original = _model(0.0)
    reference = {"output_0": np.stack([original.run(s)["output_0"] for s in samples])}
    response = bound_response(original, samples, reference, APPLIED)
    return original, samples, reference, response


def _outputs(residual: float, samples):
    m = _model(residual)
    return {"output_0": np.stack([m.run(s)["output_0"] for s in samples])}


def test_the_response_is_the_gain_after_the_node_times_the_bound(case):
    _, _, reference, response = case
    # +b on both channels moves y by 1.5 b + 1.5 b; float32 rounding only otherwise
    assert response.response["output_0"] == pytest.approx(3 * B, rel=1e-3)
    assert response.samples == 2 and response.measured_budget == B
    assert [m["root"] for m in response.measured] == ["act"] and response.unmeasured == []
    assert float(np.abs(reference["output_0"]).max()) < 0.3


def test_an_amplified_honest_error_fails_the_old_rule_and_passes_the_measured_one(case):
    _, samples, reference, response = case
    test = _outputs(0.9 * B, samples)  # within its bound at the node, 2.7 b at the output
    s = float(np.abs(reference["output_0"]).max())
    old = DEFAULT_POLICY.for_rewrite(APPLIED, reference)
    assert old.atol["output_0"] == pytest.approx(EXACT_RTOL * s + B)
    assert not compare_within(reference, test, old, 2).ok
    new = DEFAULT_POLICY.for_rewrite(APPLIED, reference, response)
    # by hand: 1e-5 x max|y| + max(b x 1, 2 x 3 b)
    assert new.atol["output_0"] == pytest.approx(EXACT_RTOL * s + RESPONSE_FACTOR * 3 * B,
                                                 rel=1e-3)
    assert RESPONSE_FACTOR * 3 * B > B
    cmp = compare_within(reference, test, new, 2)
    assert cmp.ok, cmp.to_json()
    assert max(o.max_abs_error for o in cmp.outputs) == pytest.approx(2.7 * B, rel=1e-3)
    assert new.min_cosine == DEFAULT_POLICY.approx_min_cosine
    assert "2x the model's own response to its approximations' bounds, measured on 2 " \
           "sample(s)" in new.note and "output_0: 0.003" in new.note


def test_a_rule_ten_times_off_its_bound_still_fails(case):
    _, samples, reference, response = case
    test = _outputs(10 * B, samples)  # 30 b at the output
    cmp = compare_within(reference, test, DEFAULT_POLICY.for_rewrite(APPLIED, reference,
                                                                     response), 2)
    assert not cmp.ok
    assert cmp.outputs[0].mismatched == cmp.outputs[0].size
    assert cmp.outputs[0].max_abs_error == pytest.approx(30 * B, rel=1e-3)


def test_unmeasured_applications_keep_the_old_rule(case):
    original, samples, reference, _ = case
    elsewhere = Applied("elementwise_ramps", "not/in/graph", ["x"], [], False,
                        Bound(5e-4, (0.0, 1.0)))
    r = bound_response(original, samples, reference, [*APPLIED, elsewhere])
    assert r.unmeasured_budget == 5e-4 and "not a node" in r.unmeasured[0]["why"]
    s = float(np.abs(reference["output_0"]).max())
    tol = DEFAULT_POLICY.for_rewrite([*APPLIED, elsewhere], reference, r)
    assert tol.atol["output_0"] == pytest.approx(EXACT_RTOL * s + 6 * B + 5e-4, rel=1e-3)
    assert "+ the 1 unmeasured application(s)' bounds (0.0005)" in tol.note
    capped = bound_response(original, samples, reference, APPLIED, max_applications=0)
    assert capped.measured == [] and capped.unmeasured_budget == B
    old = DEFAULT_POLICY.for_rewrite(APPLIED, reference)
    assert DEFAULT_POLICY.for_rewrite(APPLIED, reference, capped).atol == old.atol
    assert bound_response(original, samples, reference, APPLIED[1:]) is None  # all exact
    at_input = Applied("elementwise_ramps", "x0", ["x0"], [], False, Bound(B, (0.0, 1.0)))
    fed_twice = bound_response(original, samples, reference, [at_input])
    assert fed_twice.measured == [] and "could not be fed" in fed_twice.unmeasured[0]["why"]


def test_a_float_artifact_carries_the_measured_response_too(case):
    _, _, reference, response = case
    s = float(np.abs(reference["output_0"]).max())
    tol = DEFAULT_POLICY.for_artifact("none", reference, APPLIED, response=response)
    assert tol.atol["output_0"] == pytest.approx(1e-4 * s + 6 * B, rel=1e-3)
    assert "for the 1 approximate application(s): the larger of" in tol.note


def test_applications_are_matched_to_the_response_by_root_and_bound(case):
    """The per-rule checker judges prefixes of the job's applications with the job's response:
    only the applications it measured (same root, bound no larger) use it."""
    _, _, reference, response = case
    s = float(np.abs(reference["output_0"]).max())
    exact_only = DEFAULT_POLICY.for_rewrite(APPLIED[1:], reference, response)
    assert exact_only.min_cosine is None and exact_only.atol["output_0"] == pytest.approx(
        EXACT_RTOL * s)
    looser = [Applied("elementwise_ramps", "act", ["act"], [], False, Bound(2 * B, (0, 1)))]
    tol = DEFAULT_POLICY.for_rewrite(looser, reference, response)  # measured for b, not 2b
    assert tol.atol["output_0"] == pytest.approx(EXACT_RTOL * s + 2 * B)
    assert "response" not in tol.note


def test_the_most_sensitive_application_is_named_with_its_gain(case):
    _, _, reference, response = case
    s = float(np.abs(reference["output_0"]).max())
    line = response.most_sensitive({"output_0": s})
    assert line.startswith("elementwise_ramps at act (stated bound 0.001) moves output output_0 "
                           "by up to 0.003") and "a gain of 3," in line
