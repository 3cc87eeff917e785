"""Per-rule checking names the broken rule and the node it rewrote; correct rules all pass."""

from __future__ import annotations

import numpy as np
import pytest

from rewriter.verify.per_rule import RuleCheck, check_each_rule, first_failure
from rewriter.verify.tolerance import TolerancePolicy

RULES = ["batchnorm_fold_into_conv", "elu_exact"]


def convbn_elu_model():
    """x -> conv+bias -> FusedBatchNormV3 (eps 1e-3) -> Elu, twice: two BN roots to tell apart."""
    import tensorflow as tf

    from rewriter.testing import model_from_function

    rng = np.random.default_rng(0)

    def block(y, cin, cout):
        w = rng.normal(0, 0.5, (3, 3, cin, cout)).astype("f4")
        y = tf.nn.bias_add(tf.nn.conv2d(y, w, 1, "SAME"), rng.normal(0, 1, cout).astype("f4"))
        y = tf.raw_ops.FusedBatchNormV3(
            x=y, scale=rng.uniform(0.5, 2, cout).astype("f4"),
            offset=rng.normal(0, 1, cout).astype("f4"), mean=rng.normal(0, 1, cout).astype("f4"),
            variance=rng.uniform(0.01, 0.05, cout).astype("f4"), epsilon=1e-3,
            is_training=False)[0]
        return tf.nn.elu(y)

    return model_from_function(lambda x: block(block(x, 3, 4), 4, 5), [(1, 8, 8, 3)])


def break_bn_epsilon(monkeypatch, wrong: float = 0.1) -> None:
    """Make BN folding read a wrong epsilon (the bug users hunt for by hand)."""
    from rewriter.ir.graph import NodeDef
    from rewriter.rules import _batchnorm

    real = _batchnorm._fused

    def wrong_eps(g, node):
        copy = NodeDef()
        copy.CopyFrom(node)
        copy.attr["epsilon"].f = wrong
        return real(g, copy)

    monkeypatch.setattr(_batchnorm, "_fused", wrong_eps)


def tiny_samples(n: int = 2):
    rng = np.random.default_rng(1)
    return [{"x0": rng.uniform(-1, 1, (1, 8, 8, 3)).astype("f4")} for _ in range(n)]


@pytest.fixture(scope="module")
def model():
    return convbn_elu_model()


def bn_roots(model) -> list[str]:
    return [n.name for n in model.graph_def.node if n.op == "FusedBatchNormV3"]


def test_correct_rules_pass_every_check(model):
    checks = check_each_rule(model, RULES, tiny_samples())
    assert [c.rule for c in checks] == RULES
    assert all(c.ok for c in checks), [c.describe() for c in checks]
    assert first_failure(checks) is None
    assert sorted(checks[0].roots) == sorted(bn_roots(model))
    assert checks[0].max_rel_error < 1e-5


def test_wrong_epsilon_in_bn_folding_names_the_rule_and_the_node(model, monkeypatch):
    break_bn_epsilon(monkeypatch)
    checks = check_each_rule(model, RULES, tiny_samples())
    bad = first_failure(checks)
    assert bad is not None and not bad.ok
    assert bad.rule == "batchnorm_fold_into_conv"
    assert bad.node == bn_roots(model)[0]
    assert "MISMATCH" in bad.describe() and bad.node in bad.describe()
    assert "elu_exact" not in [c.rule for c in checks]  # stopped at the culprit


def test_application_granularity_checks_every_application(model):
    seen: list[RuleCheck] = []
    checks = check_each_rule(model, RULES, tiny_samples(1), granularity="application",
                             on_check=seen.append)
    assert len(checks) == 4 and seen == checks  # 2 BN folds + 2 ELUs
    assert all(c.node is not None and c.ok for c in checks)
    assert checks[-1].to_json()["node"] == checks[-1].roots[0]


def test_a_rule_that_raises_is_named_with_its_node(model, monkeypatch):
    from rewriter.rules.elu_exact import EluExact

    def boom(self, g, m, b):
        raise ValueError("broken on purpose")

    monkeypatch.setattr(EluExact, "rewrite", boom)
    bad = first_failure(check_each_rule(model, RULES, tiny_samples(1)))
    assert bad is not None and bad.rule == "elu_exact"
    assert bad.error and "broken on purpose" in bad.error
    assert bad.node in {n.name for n in model.graph_def.node if n.op == "Elu"}


def test_approximate_tolerance_grows_with_the_applied_bounds():
    ref = {"y": np.array([0.0, 4.0])}
    tol = TolerancePolicy().for_rewrite([{"exact": True}], ref)
    assert tol.rtol == 1e-5 and tol.atol["y"] == pytest.approx(4e-5) and tol.min_cosine is None
    tol = TolerancePolicy().for_rewrite(
        [{"exact": False, "bound": {"max_abs_error": 1e-3}}] * 2, ref)
    assert tol.atol["y"] == pytest.approx(1e-5 * 4.0 + 2e-3 * 4.0)
    assert tol.min_cosine == 0.999 and "2 approximate" in tol.note
    # below scale 1 the bounds count in absolute terms: max(1, s)
    tol = TolerancePolicy().for_rewrite([{"exact": False, "bound": {"max_abs_error": 1e-3}}],
                                        {"y": np.array([0.0, 0.5])})
    assert tol.atol["y"] == pytest.approx(1e-5 * 0.5 + 1e-3)
