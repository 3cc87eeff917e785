"""First divergence: a broken BN fold is found at its node; a correct rewrite diverges nowhere."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rewriter.rewrite.passes import apply_rules
from rewriter.rules.base import Bound
from rewriter.verify.divergence import first_divergence
from tests.test_per_rule import RULES, bn_roots, break_bn_epsilon, convbn_elu_model, tiny_samples


@pytest.fixture(scope="module")
def model():
    return convbn_elu_model()


def test_correct_rewrite_reports_no_divergence(model):
    result = apply_rules(model, RULES)
    div = first_divergence(model, result.model, tiny_samples(), result.applied)
    assert div.ok and div.first is None and div.produced_by == []
    assert "no divergence" in div.describe()
    # every BN root and ELU root is compared through its surviving name
    names = {e.node for e in div.nodes}
    assert set(bn_roots(model)) <= names
    assert max(e.max_abs_error / max(e.scale, 1e-30) for e in div.nodes) < 1e-5


def test_wrong_epsilon_is_found_at_the_first_folded_bn(model, monkeypatch):
    break_bn_epsilon(monkeypatch)
    result = apply_rules(model, RULES)
    div = first_divergence(model, result.model, tiny_samples(), result.applied)
    assert not div.ok
    first_bn = bn_roots(model)[0]
    assert div.first.node == first_bn and div.first.op == "FusedBatchNormV3"
    assert div.first.rewritten_op == "BiasAdd"
    assert div.first.max_abs_error > div.first.bound
    assert div.produced_by == [{"rule": "batchnorm_fold_into_conv", "root": first_bn}]
    # nodes before it (the first conv's bias add is replaced, so: nothing upstream diverged)
    before = [e for e in div.nodes if e.index < div.first.index]
    assert all(e.ok for e in before)
    data = div.to_json()
    assert data["first"]["node"] == first_bn and len(data["nodes"]) == len(div.nodes)
    assert "batchnorm_fold_into_conv" in data["summary"]


def test_approximate_rules_upstream_widen_the_bound(model):
    result = apply_rules(model, RULES)
    fake = [replace(a, exact=False, bound=Bound(0.5, (-math.inf, math.inf)))
            if a.rule == "elu_exact" else a for a in result.applied]
    div = first_divergence(model, result.model, tiny_samples(1), fake)
    elus = [e for e in div.nodes if e.op == "Elu"]
    assert elus and all(e.rules == ["elu_exact"] for e in elus)
    assert all(e.bound >= 0.5 for e in elus)
    first_bn = next(e for e in div.nodes if e.node == bn_roots(model)[0])
    assert first_bn.bound < 1e-3 and first_bn.rules == []


def test_rules_applied_from_the_report_form_are_accepted(model):
    result = apply_rules(model, RULES)
    per_rule = [{"rule": r, "exact": True, "bound": None,
                 "roots": [a.root for a in result.applied if a.rule == r]} for r in RULES]
    div = first_divergence(model, result.model, tiny_samples(1), per_rule)
    assert div.ok and np.isfinite([e.max_abs_error for e in div.nodes]).all()


def test_saved_model_scopes_are_ignored_when_matching_names():
    from rewriter.verify.divergence import name_key

    assert name_key("PartitionedCall/PartitionedCall/conv/BiasAdd") == "conv/BiasAdd"
    assert name_key("StatefulPartitionedCall_1/model/Elu") == "model/Elu"
    assert name_key("model/PartitionedCall/x") == "model/PartitionedCall/x"


def test_rules_are_read_from_provenance_when_not_given(model, monkeypatch):
    from rewriter.verify.divergence import rules_from_provenance

    break_bn_epsilon(monkeypatch)
    result = apply_rules(model, RULES)
    apps = rules_from_provenance(result.model, model)
    assert sorted((a["rule"], a["root"]) for a in apps) == sorted(
        (a.rule, a.root) for a in result.applied)
    div = first_divergence(model, result.model, tiny_samples(1))  # no rules_applied given
    assert div.produced_by == [{"rule": "batchnorm_fold_into_conv",
                                "root": bn_roots(model)[0]}]
