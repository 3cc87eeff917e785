"""Per-rule checking: apply a plan's rules one at a time and compare outputs after each.

:func:`check_each_rule` replays what :func:`rewriter.passes.apply_rules` does (one pass per rule,
in plan order, repeated until nothing changes), but through the public rule API
(``Rule.match`` / ``Rule.apply`` on one :class:`~rewriter.graph.GraphIndex`) so it can stop
between applications. With ``granularity="rule"`` (default) the outputs are compared after each
rule's pass; when one fails, that pass is replayed from the graph before it one application at a
time, so the report names the rule *and* the node (root) it rewrote. ``granularity="application"``
compares after every application.

Tolerances are the job's (:class:`~rewriter.verify.tolerance.TolerancePolicy`), after the
applications made so far. A rule that raises or leaves an invalid graph is a failed check too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.graph import GraphIndex
from rewriter.model import Model
from rewriter.rules.base import Applied, Match, Rule
from rewriter.verify.tolerance import DEFAULT_POLICY, TolerancePolicy

__all__ = ["RuleCheck", "check_each_rule", "first_failure"]

DEFAULT_MAX_ITERATIONS = 8

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


# ------------------------------------------------------------------------- the stepping engine
class _Stepper:
    """Holds the graph being rewritten, the reference outputs and everything applied so far."""

    def __init__(self, model: Model, samples: Samples, policy: TolerancePolicy) -> None:
        self.model = model
        self.samples = list(samples)
        self.policy = policy
        self.g = GraphIndex(model.graph_def)
        self.protected = {s.node for s in list(model.inputs) + list(model.outputs)}
        self.applied: list[Applied] = []
        self.reference = _run(model, self.samples)
        self.checks: list[RuleCheck] = []

    def candidates(self, rule: Rule) -> list[str]:
        return [n.name for n in self.g if n.op in rule.anchors]

    def try_apply(self, rule: Rule, name: str) -> Applied | str | None:
        """Apply ``rule`` at node ``name`` if it matches: the Applied, an error text, or None."""
        from rewriter.passes import validate_graph

        node = self.g.nodes.get(name)
        if node is None:
            return None
        m = rule.match(self.g, node)
        if not isinstance(m, Match):
            return None
        try:
            a = rule.apply(self.g, m, self.protected)
        except Exception as exc:  # a rule bug: report it against the rule and node
            return f"raised {type(exc).__name__}: {exc}"
        self.applied.append(a)
        err = validate_graph(self.g, self.model)
        return f"left an invalid graph: {err}" if err else a

    def check(self, rule: Rule, roots: list[str], created: list[str],
              error: str | None = None) -> RuleCheck:
        from rewriter.verify.metrics import compare

        start = time.perf_counter()
        tolerance = self.policy.for_rewrite(self.applied, self.reference)
        base = dict(step=len(self.checks) + 1, rule=rule.name, roots=roots, exact=rule.exact,
                    bound=rule.bound.to_json() if rule.bound else None, tolerance=tolerance.note,
                    created=created)
        if error is not None:
            c = RuleCheck(**base, ok=False, max_abs_error=float("inf"),
                          max_rel_error=float("inf"), min_cosine=0.0, error=error)
        else:
            current = self.model.with_graph(self.g.to_graph_def())
            cmp = compare(self.reference, _run(current, self.samples), samples=len(self.samples),
                          **tolerance.kwargs())
            c = RuleCheck(**base, ok=cmp.ok,
                          max_abs_error=max(o.max_abs_error for o in cmp.outputs),
                          max_rel_error=max(o.max_rel_error for o in cmp.outputs),
                          min_cosine=min(o.cosine for o in cmp.outputs),
                          outputs=cmp.to_json()["outputs"])
        c.seconds = time.perf_counter() - start
        self.checks.append(c)
        return c


def _run(model: Model, samples: Samples) -> dict[str, np.ndarray]:
    from rewriter.verify.metrics import stack_samples

    return stack_samples([model.run(s) for s in samples])


def check_each_rule(model: Model, rules_in_order: Sequence[Rule | str], samples: Samples,
                    policy: TolerancePolicy | None = None, granularity: str = "rule",
                    max_iterations: int = DEFAULT_MAX_ITERATIONS, stop_at_first: bool = True,
                    on_check: Callable[[RuleCheck], None] | None = None) -> list[RuleCheck]:
    """Apply ``rules_in_order`` like the pass manager, comparing outputs with the original.

    ``granularity``: ``"rule"`` compares after each rule's pass and drills into a failing pass
    one application at a time; ``"application"`` compares after every application. Returns the
    checks in order; with ``stop_at_first`` it stops after the first failing application (later
    results would mix the culprit's error in). :func:`first_failure` picks the culprit.
    """
    from rewriter.rules import get_rule

    if granularity not in ("rule", "application"):
        raise ValueError(f"granularity must be 'rule' or 'application', not {granularity!r}")
    rules = [get_rule(r) if isinstance(r, str) else r for r in rules_in_order]
    st = _Stepper(model, samples, policy or DEFAULT_POLICY)
    notify = on_check or (lambda _c: None)
    for _ in range(max_iterations):
        changed = False
        for rule in rules:
            failed, did = _one_pass(st, rule, granularity, notify)
            changed = changed or did
            if failed and stop_at_first:
                return st.checks
        if not changed:
            break
    return st.checks


def _one_pass(st: _Stepper, rule: Rule, granularity: str,
              notify: Callable[[RuleCheck], None]) -> tuple[bool, bool]:
    """One sweep of ``rule`` (like ``RulePass``); returns (a check failed, graph changed)."""
    before = st.g.to_graph_def() if granularity == "rule" else None
    n_applied = len(st.applied)
    done: list[Applied] = []
    for name in st.candidates(rule):
        got = st.try_apply(rule, name)
        if got is None:
            continue
        if isinstance(got, str):  # a crash or an invalid graph: the culprit is known
            c = st.check(rule, [name], [], error=got)
            notify(c)
            return True, True
        done.append(got)
        if granularity == "application":
            c = st.check(rule, [got.root], list(got.created))
            notify(c)
            if not c.ok:
                return True, True
    if not done:
        return False, False
    if granularity == "application":
        return False, True
    c = st.check(rule, [a.root for a in done], [n for a in done for n in a.created])
    notify(c)
    if c.ok:
        return False, True
    # drill down: replay this pass from the graph before it, one application at a time
    st.g = GraphIndex(before)
    del st.applied[n_applied:]
    _one_pass(st, rule, "application", notify)
    return True, True
