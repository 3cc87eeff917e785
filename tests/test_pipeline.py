"""The job's decisions that need no conversion: the retry plan after a bad artifact."""

from __future__ import annotations

from rewriter.passes import Plan, rules_for_op
from rewriter.pipeline import _retry_plan
from rewriter.targets import load_target


def _plan(rule: str) -> Plan:
    return Plan("edgetpu", "int8", False, [rule],
                [{"op": "Elu", "count": 3, "reason": "ELU is not supported", "rule": rule,
                  "exact": True, "bound": None}], [])


def test_retry_replaces_the_rule_whose_op_came_back_in_the_artifact():
    target = load_target("edgetpu")
    after = {"unsupported_after": [{"op": "ELU", "count": 3}]}
    retry = _retry_plan(_plan("elu_exact"), target, "int8", False, after)
    assert retry is not None
    # The next rule for Elu that the Edge TPU can run (it has no EXP): the bounded form.
    names = [r.name for r in rules_for_op("Elu")]
    new = retry["replaced"]["elu_exact"]
    assert names.index(new) > names.index("elu_exact")
    assert retry["plan"].rules == [new]
    assert retry["because"] == ["ELU"]


def test_retry_respects_exact_only():
    target = load_target("edgetpu")
    after = {"unsupported_after": [{"op": "ELU", "count": 3}]}
    assert _retry_plan(_plan("elu_exact"), target, "int8", True, after) is None


def test_no_retry_when_the_artifact_is_clean_or_unrelated():
    target = load_target("edgetpu")
    assert _retry_plan(_plan("elu_exact"), target, "int8", False, {"unsupported_after": []}) \
        is None
    unrelated = {"unsupported_after": [{"op": "CUMSUM", "count": 1}]}
    assert _retry_plan(_plan("elu_exact"), target, "int8", False, unrelated) is None
