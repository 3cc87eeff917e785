"""Per-rule checking: an observer on the pass engine that compares outputs as rules apply.

:func:`check_each_rule` runs the rules through the one :class:`~rewriter.rewrite.passes.PassManager`
(one :class:`~rewriter.rewrite.passes.RulePass` per rule, in plan order, repeated until nothing changes,
as :func:`rewriter.rewrite.passes.apply_rules` does) with a :class:`RuleChecker` tracing it. With
``granularity="rule"`` (default) the outputs are compared after each pass that changed the
graph; when one fails, the same ``RulePass`` sweeps again from the graph before it with the
checker comparing after every application, so the report names the rule *and* the node (root)
it rewrote. ``granularity="application"`` compares after every application.

Tolerances are the job's (:class:`~rewriter.verify.tolerance.TolerancePolicy`), after the
applications made so far. A rule that raises or leaves an invalid graph is a failed check too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex
from rewriter.ir.model import Model
from rewriter.rewrite.passes import (
    DEFAULT_MAX_ITERATIONS,
    Pass,
    PassManager,
    PassResult,
    RuleFailure,
    RulePass,
    StopRewrite,
    Tracer,
    validate_graph,
)
from rewriter.rules.base import Applied, Rule
from rewriter.verify.tolerance import DEFAULT_POLICY, TolerancePolicy

__all__ = ["RuleCheck", "RuleChecker", "check_each_rule", "first_failure"]

Samples = Sequence[Mapping[str, np.ndarray]]


@dataclass
class RuleCheck:
    """One comparison: after ``rule`` (at ``root`` for one application, else every root of the
    pass) the outputs were ``ok`` or not against the original."""

    step: int
    rule: str
    roots: list[str]
    exact: bool
    bound: dict[str, Any] | None
    ok: bool
    max_abs_error: float
    max_rel_error: float
    min_cosine: float
    tolerance: str
    created: list[str] = field(default_factory=list)
    error: str | None = None  # the rule raised, or left an invalid graph
    outputs: dict[str, Any] = field(default_factory=dict)  # Comparison.to_json()["outputs"]
    seconds: float = 0.0

    @property
    def node(self) -> str | None:
        """The node a failing single application rewrote (None for a whole pass)."""
        return self.roots[0] if len(self.roots) == 1 else None

    def describe(self) -> str:
        where = f"node {self.roots[0]}" if len(self.roots) == 1 else \
            f"{len(self.roots)} node(s)"
        if self.error:
            return f"rule {self.rule} at {where}: {self.error}"
        state = "ok" if self.ok else "MISMATCH"
        return (f"rule {self.rule} at {where}: {state} (max abs {self.max_abs_error:.3g}, "
                f"max rel {self.max_rel_error:.3g}, cosine {self.min_cosine:.6f}; "
                f"{self.tolerance})")

    def to_json(self) -> dict[str, Any]:
        def fin(x: float) -> Any:
            return x if np.isfinite(x) else str(x)

        return {"step": self.step, "rule": self.rule, "roots": list(self.roots),
                "node": self.node, "exact": self.exact, "bound": self.bound, "ok": self.ok,
                "max_abs_error": fin(self.max_abs_error),
                "max_rel_error": fin(self.max_rel_error), "min_cosine": fin(self.min_cosine),
                "tolerance": self.tolerance, "error": self.error, "created": self.created[:50],
                "outputs": self.outputs, "seconds": round(self.seconds, 3)}


def first_failure(checks: Iterable[RuleCheck]) -> RuleCheck | None:
    """The first failing single-application check (the culprit), else the first failing one."""
    failing = [c for c in checks if not c.ok]
    single = [c for c in failing if c.node is not None]
    return (single or failing or [None])[0]


# ------------------------------------------------------------------------- the observer
class RuleChecker(Tracer):
    """Compares the graph's outputs with the original's while the pass manager rewrites it.

    ``checks`` collects one :class:`RuleCheck` per comparison; with ``stop_at_first`` the run
    ends after the first failing application (later results would mix the culprit's error in).
    """

    def __init__(self, model: Model, samples: Samples, policy: TolerancePolicy,
                 granularity: str = "rule", stop_at_first: bool = True,
                 on_check: Callable[[RuleCheck], None] | None = None,
                 response: Any = None) -> None:
        if granularity not in ("rule", "application"):
            raise ValueError(f"granularity must be 'rule' or 'application', not {granularity!r}")
        self.model = model
        self.samples = list(samples)
        self.policy = policy
        #: the job's measured response to its approximations' bounds (matched by root)
        self.response = response
        self.per_application = granularity == "application"
        self.stop_at_first = stop_at_first
        self.on_check = on_check
        self.protected = {s.node for s in list(model.inputs) + list(model.outputs)}
        self.reference = _run(model, self.samples)
        self.applied: list[Applied] = []
        self.checks: list[RuleCheck] = []
        self._before: Any = None  # the GraphDef before the current pass (rule granularity)
        self._mark = 0

    # -- hooks
    def before_pass(self, g: GraphIndex, p: Pass) -> None:
        if not self.per_application:
            self._before, self._mark = g.to_graph_def(), len(self.applied)

    def after_application(self, g: GraphIndex, p: Pass, rule: Rule, applied: Applied) -> None:
        self.applied.append(applied)
        err = validate_graph(g, self.model)
        if err is not None:
            self._record(self._check(g, rule, [applied], f"left an invalid graph: {err}"))
            raise StopRewrite
        if self.per_application and not self._record(self._check(g, rule, [applied])).ok \
                and self.stop_at_first:
            raise StopRewrite

    def after_pass(self, g: GraphIndex, p: Pass, result: PassResult) -> None:
        if self.per_application or not result.applied:
            return
        if self._record(self._check(g, _rule_of(p), result.applied)).ok:
            return
        # drill down: the same pass again, from the graph before it, one application at a time
        del self.applied[self._mark:]
        self.per_application = True
        try:
            p.run(GraphIndex(self._before), self.protected, self)
        except StopRewrite:
            pass
        finally:
            self.per_application = False
        if self.stop_at_first:
            raise StopRewrite

    def rule_failed(self, g: GraphIndex, p: Pass, failure: RuleFailure) -> None:
        cause = failure.__cause__
        error = f"raised {type(cause).__name__}: {cause}" if cause is not None else str(failure)
        rule = next((r for r in _rules_of(p) if r.name == failure.rule), _rule_of(p))
        self._record(self._check(g, rule, [], error, roots=[failure.node]))
        raise StopRewrite  # the graph is half rewritten: nothing after it can be judged

    # -- comparisons
    def _check(self, g: GraphIndex, rule: Rule, applications: Sequence[Applied],
               error: str | None = None, roots: list[str] | None = None) -> RuleCheck:
        from rewriter.verify.metrics import compare

        start = time.perf_counter()
        tolerance = self.policy.for_rewrite(self.applied, self.reference, self.response)
        base = dict(step=len(self.checks) + 1, rule=rule.name,
                    roots=roots or [a.root for a in applications], exact=rule.exact,
                    bound=rule.bound.to_json() if rule.bound else None,
                    tolerance=tolerance.note, created=[n for a in applications
                                                       for n in a.created])
        if error is not None:
            c = RuleCheck(**base, ok=False, max_abs_error=float("inf"),
                          max_rel_error=float("inf"), min_cosine=0.0, error=error)
        else:
            current = self.model.with_graph(g.to_graph_def())
            cmp = compare(self.reference, _run(current, self.samples), samples=len(self.samples),
                          **tolerance.kwargs())
            c = RuleCheck(**base, ok=cmp.ok,
                          max_abs_error=max(o.max_abs_error for o in cmp.outputs),
                          max_rel_error=max(o.max_rel_error for o in cmp.outputs),
                          min_cosine=min(o.cosine for o in cmp.outputs),
                          outputs=cmp.to_json()["outputs"])
        c.seconds = time.perf_counter() - start
        return c

    def _record(self, check: RuleCheck) -> RuleCheck:
        self.checks.append(check)
        if self.on_check is not None:
            self.on_check(check)
        return check


def _rules_of(p: Pass) -> list[Rule]:
    return list(getattr(p, "rules", []))


def _rule_of(p: Pass) -> Rule:
    """The rule a per-rule pass applies (check_each_rule builds one pass per rule)."""
    rules = _rules_of(p)
    if len(rules) != 1:
        raise ValueError(f"per-rule checks need one rule per pass; {p.name} has {len(rules)}")
    return rules[0]


def _run(model: Model, samples: Samples) -> dict[str, np.ndarray]:
    from rewriter.verify.metrics import stack_samples

    return stack_samples([model.run(s) for s in samples])


def check_each_rule(model: Model, rules_in_order: Sequence[Rule | str], samples: Samples,
                    policy: TolerancePolicy | None = None, granularity: str = "rule",
                    max_iterations: int = DEFAULT_MAX_ITERATIONS, stop_at_first: bool = True,
                    on_check: Callable[[RuleCheck], None] | None = None,
                    response: Any = None) -> list[RuleCheck]:
    """Apply ``rules_in_order`` through the pass manager, comparing outputs with the original.

    ``granularity``: ``"rule"`` compares after each rule's pass and drills into a failing pass
    one application at a time; ``"application"`` compares after every application. Returns the
    checks in order; with ``stop_at_first`` it stops after the first failing application.
    :func:`first_failure` picks the culprit. ``response``: the job's measured response to its
    approximations' bounds (:mod:`rewriter.verify.bound_response`), used for the applications
    whose roots it measured.
    """
    from rewriter.rules import get_rule

    rules = [get_rule(r) if isinstance(r, str) else r for r in rules_in_order]
    checker = RuleChecker(model, samples, policy or DEFAULT_POLICY, granularity, stop_at_first,
                          on_check, response)
    PassManager([RulePass([r]) for r in rules], max_iterations).run(model, checker)
    return checker.checks
