"""The job's decisions that need no conversion: rounds of planning, and the retry after a bad
artifact."""

from __future__ import annotations

from rewriter.job.pipeline import plan_retry
from rewriter.rewrite.planner import Fix, Plan, choose_rules
from rewriter.targets import load_target


def _plan(rule: str) -> Plan:
    return Plan("edgetpu", "int8", False, [rule],
                [Fix("Elu", 3, "ELU is not supported", rule, [], True, None)], [])


ELU_BACK = {"ELU"}  # the artifact verdict's unsupported ops


def test_retry_excludes_the_rule_whose_op_came_back_in_the_artifact():
    target = load_target("edgetpu")
    retry = plan_retry(_plan("elu_exact"), target, "int8", False, ELU_BACK)
    assert retry is not None and retry.exclude == ["elu_exact"]
    assert retry.because == ["ELU"]
    # Planned again without it, Elu gets the next rule the Edge TPU runs (it has no EXP).
    rules, _ = choose_rules("Elu", target, "int8", False, {}, set(retry.exclude))
    assert [r.name for r in rules] == ["elementwise_ramps"]


def test_retry_needs_an_alternative_exact_only_refuses_the_approximate_one():
    target = load_target("edgetpu")
    assert plan_retry(_plan("elu_exact"), target, "int8", True, ELU_BACK) is None


def test_no_retry_when_the_artifact_is_clean_or_unrelated():
    target = load_target("edgetpu")
    assert plan_retry(_plan("elu_exact"), target, "int8", False, set()) is None
    assert plan_retry(_plan("elu_exact"), target, "int8", False, {"CUMSUM"}) is None
