"""Rule application: the one pass engine.

* :class:`RulePass` applies a list of rules in one linear sweep: it visits only nodes whose op is
  an anchor of some rule, matches upward from each, and rewrites in place.
* :class:`PassManager` runs passes in an explicit order until nothing changes (bounded
  iterations), checks the graph after every pass (inputs resolve, no cycle, signature tensors
  still exist) and raises :class:`~rewriter.errors.RuleError` naming the failing pass and rule.
* A :class:`Tracer` observes the one engine (onnxscript's ``MatchingTracer`` idea): it is told
  before and after every pass, after every rule application and when a rule fails, and may end
  the run with :class:`StopRewrite`. Per-rule checking (:mod:`rewriter.verify.per_rule`) is
  such an observer, not a second engine.

Which rules to run for a target is :mod:`rewriter.rewrite.planner`'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rewriter.errors import RuleError
from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.ir.model import Model
from rewriter.rules import get_rule
from rewriter.rules.base import Applied, Match, Reject, Rule

__all__ = ["PassManager", "RewriteResult", "RuleFailure", "RulePass", "Samples", "StopRewrite",
           "Tracer", "apply_rules", "validate_graph"]

DEFAULT_MAX_ITERATIONS = 8
#: Sample feed dicts (keyed by input name): the calibration data fitted rules measure ranges on.
Samples = Sequence[Mapping[str, Any]]


# ----------------------------------------------------------------------------- results
@dataclass
class PassResult:
    """What one run of a pass did."""

    name: str
    applied: list[Applied] = field(default_factory=list)
    rejected: list[Reject] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        return bool(self.applied)


@dataclass
class RewriteResult:
    """The rewritten model and what happened: every rule application (:class:`Applied`, in
    order) and the matches a rule refused that are still in the graph (:class:`Reject`)."""

    model: Model
    applied: list[Applied]
    rejected: list[Reject]
    iterations: int
    passes: list[str]
    stopped: bool = False  # a tracer ended the run early (StopRewrite)

    def rule_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for a in self.applied:
            counts[a.rule] = counts.get(a.rule, 0) + 1
        return counts


# ----------------------------------------------------------------------------- tracing
class RuleFailure(RuleError):
    """A rule raised, or created a node reading a missing tensor: names the rule and node."""

    def __init__(self, message: str, rule: str, node: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.node = node


class StopRewrite(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a :class:`Tracer` hook to end the pass manager's run where it is."""


class Tracer:
    """Observes the pass engine; every hook does nothing unless overridden.

    ``g`` is the graph being rewritten, in place: a tracer may read it (run it, validate it,
    copy it) but must not change it. A hook may raise :class:`StopRewrite`.
    """

    def before_pass(self, g: GraphIndex, p: Pass) -> None:
        """Before ``p`` sweeps the graph."""

    def after_application(self, g: GraphIndex, p: Pass, rule: Rule, applied: Applied) -> None:
        """After ``rule`` rewrote one match (``applied``) inside pass ``p``."""

    def after_pass(self, g: GraphIndex, p: Pass, result: PassResult) -> None:
        """After ``p`` swept the graph (``result.applied`` may be empty)."""

    def rule_failed(self, g: GraphIndex, p: Pass, failure: RuleFailure) -> None:
        """When a rule failed; the failure is raised after this hook unless it stops the run."""


# ----------------------------------------------------------------------------- passes
def as_focus(focus: Mapping[str, str | None] | Iterable[str] | None
             ) -> dict[str, str | None] | None:
    """``focus`` as {node name: op it had when found unsupported, or None for any op}."""
    if focus is None:
        return None
    if isinstance(focus, Mapping):
        return dict(focus)
    return dict.fromkeys(focus)


def in_focus(focus: Mapping[str, str | None] | None, node: NodeDef) -> bool:
    """Whether a ``targeted`` rule may start from ``node``: no focus, or the node is a focus node
    that still has the op it was found unsupported with. A rule that fixed the node earlier in
    the same round (``neg_as_mul`` turning the unsupported ``Neg_8`` into a MUL named ``Neg_8``)
    changed its op, so a generic rule does not approximate what is already fixed."""
    if focus is None:
        return True
    if node.name not in focus:
        return False
    op = focus[node.name]
    return op is None or op == node.op


class Pass(Protocol):
    """Anything with a ``name`` and ``run(g, protected, tracer) -> PassResult``."""

    name: str

    def run(self, g: GraphIndex, protected: set[str],
            tracer: Tracer | None = None) -> PassResult: ...


class RulePass:
    """Apply ``rules`` in one sweep over the graph; the first rule that matches a node wins."""

    def __init__(self, rules: Sequence[Rule], name: str | None = None,
                 focus: Mapping[str, str | None] | Iterable[str] | None = None) -> None:
        self.rules = list(rules)
        self.name = name or "+".join(r.name for r in self.rules)
        #: Nodes a ``targeted`` rule may start from (None: every anchor node), each with the op
        #: it had when found unsupported (None: any op).
        self.focus = as_focus(focus)
        self._by_op: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for op in rule.anchors:
                self._by_op.setdefault(op, []).append(rule)

    def run(self, g: GraphIndex, protected: set[str],
            tracer: Tracer | None = None) -> PassResult:
        result = PassResult(self.name)
        candidates = [n.name for n in g if n.op in self._by_op]
        for name in candidates:
            node = g.nodes.get(name)
            if node is None:
                continue
            for rule in self._by_op.get(node.op, ()):
                if rule.targeted and not in_focus(self.focus, node):
                    continue
                m = _match_one(g, rule, node, self.name)
                if isinstance(m, Reject):
                    result.rejected.append(m)
                elif isinstance(m, Match):
                    applied = _apply_one(g, rule, m, protected, self.name)
                    result.applied.append(applied)
                    if tracer is not None:
                        tracer.after_application(g, self, rule, applied)
                    break
        return result


def _match_one(g: GraphIndex, rule: Rule, node: Any, pass_name: str) -> Match | Reject | None:
    try:
        return rule.match(g, node)
    except Exception as exc:  # a rule bug: name it
        raise RuleError(f"pass {pass_name}: rule {rule.name} failed matching node {node.name} "
                        f"({node.op}): {type(exc).__name__}: {exc}") from exc


def _apply_one(g: GraphIndex, rule: Rule, m: Match, protected: set[str],
               pass_name: str) -> Applied:
    try:
        applied = rule.apply(g, m, protected)
    except Exception as exc:  # a rule bug: name it
        raise RuleFailure(f"pass {pass_name}: rule {rule.name} failed on node {m.root.name}: "
                          f"{type(exc).__name__}: {exc}", rule.name, m.root.name) from exc
    for name in applied.created:
        for ref in g[name].input if name in g else ():
            if parse_input(ref)[0] not in g:
                raise RuleFailure(f"pass {pass_name}: rule {rule.name} at {m.root.name} "
                                  f"created {name} reading missing tensor {ref}", rule.name,
                                  m.root.name)
    return applied


def validate_graph(g: GraphIndex, model: Model, import_with_tf: bool = False) -> str | None:
    """Why the graph is invalid (dangling input, cycle, missing signature tensor), or None."""
    for node in g:
        for ref in node.input:
            if parse_input(ref)[0] not in g:
                return f"node {node.name} reads missing tensor {ref}"
    try:
        g.topological_order()
    except ValueError as exc:
        return str(exc)
    for spec in list(model.inputs) + list(model.outputs):
        if spec.node not in g:
            return f"signature tensor {spec.tensor} ({spec.name}) no longer exists"
    if import_with_tf:
        return _tf_import_error(g)
    return None


def _tf_import_error(g: GraphIndex) -> str | None:
    import tensorflow as tf

    try:
        with tf.Graph().as_default():
            tf.compat.v1.import_graph_def(g.to_graph_def(), name="")
    except Exception as exc:  # TF raises ValueError / InvalidArgumentError variants
        return f"TensorFlow cannot import the graph: {str(exc).splitlines()[0]}"
    return None


class PassManager:
    """Run passes in order until none changes the graph, validating after each pass."""

    def __init__(self, passes: Sequence[Pass], max_iterations: int = DEFAULT_MAX_ITERATIONS,
                 import_with_tf: bool = False, data: Samples | None = None) -> None:
        self.passes = list(passes)
        self.max_iterations = max_iterations
        self.import_with_tf = import_with_tf
        self.data = data

    def run(self, model: Model, tracer: Tracer | None = None) -> RewriteResult:
        """Rewrite ``model`` (never modified); ``tracer`` observes every pass and application
        and may end the run early (the result then says ``stopped``)."""
        g = GraphIndex(model.graph_def)
        if self.data:  # rules fitted on the data's range read it (rewriter.ir.ranges)
            from rewriter.ir.ranges import attach_samples

            range_ops = {op for p in self.passes for r in getattr(p, "rules", ())
                         if r.needs_range for op in r.anchors}
            near = [n for p in self.passes if getattr(p, "focus", None) for n in p.focus]
            attach_samples(g, model.inputs, self.data, range_ops, near or None)
        protected = {s.node for s in list(model.inputs) + list(model.outputs)}
        applied: list[Applied] = []
        rejected: dict[tuple[str, str], Reject] = {}
        done: list[str] = []
        iteration, changed, stopped = 0, False, False
        try:
            while iteration < self.max_iterations:
                iteration += 1
                changed = False
                for p in self.passes:
                    res = self._run_pass(g, p, protected, tracer, applied)
                    if res.modified:  # an unchanged graph was valid already
                        self._validate(g, model, p, res, done)
                    done.append(p.name)
                    rejected.update({(r.rule, r.node): r for r in res.rejected})
                    changed = changed or res.modified
                    if tracer is not None:
                        tracer.after_pass(g, p, res)
                if not changed:
                    break
        except StopRewrite:
            stopped, changed = True, False
        if changed:
            raise RuleError(f"passes still changing the graph after {self.max_iterations} "
                            f"iterations: {', '.join(p.name for p in self.passes)}")
        new_model = model.with_graph(g.to_graph_def(), note=_note(applied))
        replaced = {n for a in applied for n in a.matched}
        still = [r for r in rejected.values() if r.node in g and r.node not in replaced]
        return RewriteResult(new_model, list(applied), still, iteration,
                             [p.name for p in self.passes], stopped)

    @staticmethod
    def _run_pass(g: GraphIndex, p: Pass, protected: set[str], tracer: Tracer | None,
                  applied: list[Applied]) -> PassResult:
        """One sweep of ``p``; its applications are added to ``applied`` as they happen (so a
        tracer that stops the run mid-pass leaves them counted)."""
        if tracer is None:
            res = p.run(g, protected)
            applied.extend(res.applied)
            return res
        tracer.before_pass(g, p)
        try:
            return p.run(g, protected, _Recording(tracer, applied))
        except RuleFailure as failure:
            tracer.rule_failed(g, p, failure)
            raise

    def _validate(self, g: GraphIndex, model: Model, p: Pass, res: PassResult,
                  done: list[str]) -> None:
        err = validate_graph(g, model, self.import_with_tf)
        if err is None:
            return
        rules = sorted({a.rule for a in res.applied}) or ["(no rule applied)"]
        before = ", ".join(done[-5:]) or "none"
        raise RuleError(f"pass {p.name} left an invalid graph ({err}); rules applied in it: "
                        f"{', '.join(rules)}; passes before it: {before}")


class _Recording(Tracer):
    """Passes each application to ``tracer`` after recording it in ``applied``."""

    def __init__(self, tracer: Tracer, applied: list[Applied]) -> None:
        self.tracer = tracer
        self.applied = applied

    def after_application(self, g: GraphIndex, p: Pass, rule: Rule, applied: Applied) -> None:
        self.applied.append(applied)
        self.tracer.after_application(g, p, rule, applied)


def _note(applied: list[Applied]) -> str | None:
    if not applied:
        return None
    counts: dict[str, int] = {}
    for a in applied:
        counts[a.rule] = counts.get(a.rule, 0) + 1
    return "rewritten: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()))


def apply_rules(model: Model, rules: Iterable[Rule | str], one_pass_each: bool = True,
                max_iterations: int = DEFAULT_MAX_ITERATIONS,
                import_with_tf: bool = False, data: Samples | None = None,
                focus: Mapping[str, str | None] | Iterable[str] | None = None
                ) -> RewriteResult:
    """Apply ``rules`` (objects or names) to ``model``, one pass per rule in the given order.

    ``data`` (feed dicts keyed by input name, the calibration samples) is what rules fitted on
    the observed range of a tensor measure it on; without it they refuse with that reason.
    ``focus``: the only nodes ``targeted`` rules start from (the plan's unsupported nodes), as
    names or as {name: the op it was found unsupported with} (:func:`in_focus`).
    """
    objs = [get_rule(r) if isinstance(r, str) else r for r in rules]
    focus = as_focus(focus)
    passes = ([RulePass([r], focus=focus) for r in objs] if one_pass_each
              else [RulePass(objs, focus=focus)])
    return PassManager(passes, max_iterations, import_with_tf, data).run(model)
