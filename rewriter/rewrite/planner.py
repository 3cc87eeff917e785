"""Per-target planning: which rules, in which order, make a model run on a target.

:func:`plan` asks the target which nodes it lacks (:meth:`PlanTarget.check_graph`, node level,
so attribute limits count) and picks, per op and rule family, the best exact rule whose
``emits`` the target runs (its ``fused`` target ops where the converter fuses them; where
several forms of one family fit, the cheapest on the target by the measured table of
:mod:`rewriter.targets.form_costs`, recorded in ``Fix.choice``); an
approximate rule only when no exact one fits (never with ``exact_only``). An op's named fix
(``Fix.rule``) is the first of them whose pattern matches one of its lacking nodes. Ops no rule fits go to
``Plan.unfixable`` with the reason. Nodes named in ``approximate`` are planned as if the target
lacked them, on purpose (``--accuracy``'s approximation move, :mod:`rewriter.job.approximate`:
the target runs the op, but less accurately than a rule's stated bound); their fix's reason says
so (:data:`ON_PURPOSE`). With ``for_16x8`` (``--accuracy`` on an int8 target that runs 16x8,
once int8 missed it), a node the target runs in int8 but has no 16x8 kernel for (TFLite Micro's
MIRROR_PAD) is planned too, with exact rules only whose ops have 16x8 kernels
(:func:`no_16x8_kernel`; reason :data:`FOR_16X8`): left in place, its consumers could not read
an int16 input from it; no such rule, and it stays (the target runs it in int8).
:func:`plan_and_apply` runs plan -> apply -> re-check in
rounds on the one pass engine (:mod:`rewriter.rewrite.passes`). The planner is typed against
:class:`PlanTarget`, which :class:`rewriter.targets.Target` satisfies; tests build their
targets from tables (:func:`rewriter.targets.target_from_table`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from rewriter.ir.graph import GraphIndex
from rewriter.ir.model import PLUMBING_OPS, Model
from rewriter.rewrite.passes import RewriteResult, Samples, apply_rules
from rewriter.rules import all_rules, get_rule, rules_for_op
from rewriter.rules.base import Applied, Bound, Match, Reject, Rule

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.targets import GraphCheck, OpStatus

__all__ = ["FOR_16X8", "MAX_ROUNDS", "ON_PURPOSE", "Fix", "Plan", "PlanTarget", "Unfixable", "apply",
           "choose_rules", "plan", "plan_and_apply"]


class PlanTarget(Protocol):
    """What the planner asks of a target (:class:`rewriter.targets.Target` answers it)."""

    name: str
    artifact: str  # "tflite" | "onnx": selects a rule's ``fused`` target ops

    def check_graph(self, model: Model, quantize: str | None = None) -> GraphCheck:
        """Node-level verdicts on the TF graph (what the target lacks, with reasons)."""
        ...

    def tf_op_status(self, op: str, quantize: str | None = None) -> OpStatus:
        """Whether the target runs TF op type ``op`` once converted."""
        ...

    def target_op_status(self, op: str, quantize: str | None = None) -> OpStatus:
        """Whether the target runs target op ``op`` (e.g. ``L2_NORMALIZATION``)."""
        ...


@dataclass
class Fix:
    """An op type the target lacks (``count`` nodes, the first ``reason``) and the rules for
    it: ``rule`` the best, ``also`` complementary rules planned for the same op, its exactness
    or ``bound``; ``round`` of :func:`plan_and_apply` in which they fired (None: planned)."""

    op: str
    count: int
    reason: str | None
    rule: str
    also: list[str]
    exact: bool
    bound: Bound | None
    round: int | None = None
    #: How the form was chosen where the target runs several exact forms of one family
    #: (:func:`rewriter.targets.form_costs.rank`: the alternatives' measured costs), else None.
    choice: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"op": self.op, "count": self.count, "reason": self.reason, "rule": self.rule,
               "also": list(self.also), "exact": self.exact,
               "bound": self.bound.to_json() if self.bound else None}
        if self.choice is not None:
            out["choice"] = self.choice
        return out if self.round is None else out | {"round": self.round}


@dataclass
class Unfixable:
    """An op type no rule fixed, and ``why`` (never dropped: no rule exists, a rule emits ops
    the target also lacks, only approximate rules exist and ``exact_only`` refused them, or
    ``untried``: the rules planned for it did not match these nodes)."""

    op: str
    count: int
    reason: str | None
    why: str
    untried: Fix | None = None

    def to_json(self) -> dict[str, Any]:
        head = (self.untried.to_json() if self.untried is not None else
                {"op": self.op, "count": self.count, "reason": self.reason})
        return head | {"why": self.why}


@dataclass
class Plan:
    """Which rules to run, in order (``rules``), the ops they fix (``fixes``) and what stays
    unfixable (``unfixable``)."""

    target: str
    quantize: str
    exact_only: bool
    rules: list[str]
    fixes: list[Fix]
    unfixable: list[Unfixable]
    #: The unsupported nodes, where ``targeted`` rules may start: {node name: its TF op}
    #: (a node another rule has already turned into another op is no longer a start).
    focus: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.rules

    def rules_by_op(self) -> dict[str, str]:
        """TF op -> the rules that fixed it (comma-separated, in the order they ran)."""
        names: dict[str, list[str]] = {}
        for f in self.fixes:
            for rule in (f.rule, *f.also):
                if rule not in names.setdefault(f.op, []):
                    names[f.op].append(rule)
        return {op: ", ".join(rules) for op, rules in names.items()}

    def form_choices(self) -> list[dict[str, Any]]:
        """Each family's chosen form and its alternatives' costs, once per family (the first
        fix that chose it)."""
        seen: dict[str, dict[str, Any]] = {}
        for f in self.fixes:
            if f.choice is not None:
                seen.setdefault(str(f.choice.get("family")), f.choice | {"op": f.op})
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "quantize": self.quantize, "exact_only": self.exact_only,
                "rules": list(self.rules), "fixes": [f.to_json() for f in self.fixes],
                "unfixable": [u.to_json() for u in self.unfixable]}


#: The reason of a fix planned for a node the target runs (``approximate``).
ON_PURPOSE = ("replaced on purpose (--accuracy): the target runs it, less accurately here than "
              "the rule's stated bound")


#: Appended to the reason of a fix planned with ``for_16x8`` (:func:`no_16x8_kernel`).
FOR_16X8 = ("; replaced by an exact rule so --accuracy can run the ops it feeds in 16x8 (the "
            "target runs it in int8)")


def plan(model: Model, target: PlanTarget, quantize: str, exact_only: bool = False,
         exclude: frozenset[str] | set[str] = frozenset(),
         approximate: frozenset[str] | set[str] = frozenset(), for_16x8: bool = False) -> Plan:
    """Pick, for each op type the target lacks, the best rule the target can run.

    What the target lacks comes from ``target.check_graph`` (node level, so attribute limits
    such as Vela's depth-reduction MEAN count). Whether a rule's ``emits`` are runnable is asked
    per op type. Rules named in ``exclude`` are not considered (rules tried in an earlier round,
    see :func:`plan_and_apply`). Nodes named in ``approximate`` count as lacking (module
    docstring); with ``for_16x8``, the nodes of :func:`no_16x8_kernel` too.
    """
    lacking = _unsupported(model, target, quantize, approximate)
    widen = _no_16x8(model, target, lacking) if for_16x8 else {}
    cache: dict[str, bool] = {}
    cache16: dict[str, bool] = {}
    fixes: list[Fix] = []
    unfixable: list[Unfixable] = []
    chosen: list[str] = []
    matcher = _Matcher(model)
    for op, (count, reason, nodes) in [*lacking.items(), *widen.items()]:
        forms: dict[str, list[Rule]] = {}
        if op in widen:  # the target runs it in int8: an exact rule with 16x8 ops, or none
            rules, why = choose_rules(op, target, "16x8", True, cache16, exclude, forms)
            if not rules:
                continue
        else:
            rules, why = choose_rules(op, target, quantize, exact_only, cache, exclude, forms)
        if not rules:
            unfixable.append(Unfixable(op, count, reason, why))
            continue
        choices: dict[str, dict[str, Any]] = {}
        rules = [_cheapest_form(r, forms, matcher, nodes, target, choices) for r in rules]
        best = (rules[0] if len(rules) == 1 else
                next((r for r in rules if matcher.covers(r, nodes)), rules[0]))
        rules = [best, *(r for r in rules if r is not best)]
        fixes.append(Fix(op, count, reason, best.name, [r.name for r in rules[1:]], best.exact,
                         best.bound, choice=choices.get(best.name)))
        chosen.extend(r.name for r in rules if r.name not in chosen)
    ordered = sorted((r for r in all_rules() if r.name in chosen),
                     key=lambda r: (r.order, r.sort_key()))
    focus = {n: op for found in (lacking, widen) for op in found for n in found[op][2]}
    return Plan(target.name, quantize, exact_only,
                [r.name for r in ordered], fixes, unfixable, focus)


def _cheapest_form(rule: Rule, forms: dict[str, list[Rule]], matcher: _Matcher,
                   nodes: list[str], target: PlanTarget,
                   choices: dict[str, dict[str, Any]]) -> Rule:
    """The cheapest on ``target`` of the forms of ``rule``'s family the target runs
    (:func:`rewriter.targets.form_costs.rank`, at the shapes of the regions they match among
    ``nodes``), among those that match the nodes (all when none does); ``rule`` when it is its
    family's only form. The evidence goes to ``choices[chosen]``."""
    from rewriter.targets.form_costs import rank

    family = forms.get(rule.family or rule.name) or [rule]
    if len(family) < 2:
        return rule
    matching = [r for r in family if matcher.covers(r, nodes)] or family
    if len(matching) < 2:
        return matching[0]
    shapes = matcher.shapes(matching, nodes)
    order, evidence = rank(rule.family, target.name, [r.name for r in matching], shapes)
    chosen = next(r for r in matching if r.name == order[0])
    if evidence is not None:
        choices[chosen.name] = {"chosen": chosen.name, **evidence}
    return chosen


class _Matcher:
    """Which nodes a rule matches in the model (:meth:`Rule.match` at the rule's anchors only:
    pattern, safety and the rule's own check, once per rule), so a plan names as an op's fix a
    rule that matches it: on a LayerNorm the Neg's fix is layernorm_decompose, not
    groupnorm_decompose (same op, another shape), and on a rank-3 token LayerNorm not
    layernorm_conv_mean (its check refuses what is not NHWC)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self._g: GraphIndex | None = None
        self._by_op: dict[str, list[Any]] = {}
        self._covered: dict[str, set[str]] = {}
        self._found: dict[str, list[Match]] = {}

    def covers(self, rule: Rule, nodes: list[str]) -> bool:
        return not self._matches(rule)[0].isdisjoint(nodes)

    def shapes(self, rules: list[Rule], nodes: list[str]) -> list[tuple[int | None, ...]]:
        """The static shapes of the input ``x`` of each region one of ``rules`` matches among
        ``nodes`` (each region once, by its root)."""
        from rewriter.ir.static_eval import tensor_shape

        wanted, found = set(nodes), {}
        for rule in rules:
            for m in self._matches(rule)[1]:
                if m.root.name not in found and "x" in m.inputs and wanted & set(m.node_names):
                    found[m.root.name] = m.inputs["x"]
        assert self._g is not None
        return [s for s in (tensor_shape(self._g, x) for x in found.values()) if s is not None]

    def _matches(self, rule: Rule) -> tuple[set[str], list[Match]]:
        if rule.name not in self._covered:
            if self._g is None:
                self._g = GraphIndex(self.model.graph_def)
                for node in self._g:
                    self._by_op.setdefault(node.op, []).append(node)
            found: list[Match] = []
            for op in rule.anchors:
                for node in self._by_op.get(op, ()):
                    m = rule.match(self._g, node)
                    if isinstance(m, Match):
                        found.append(m)
            self._covered[rule.name] = {n for m in found for n in m.node_names}
            self._found[rule.name] = found
        return self._covered[rule.name], self._found[rule.name]


def _no_16x8(model: Model, target: PlanTarget,
             lacking: dict[str, tuple[int, str | None, list[str]]]
             ) -> dict[str, tuple[int, str | None, list[str]]]:
    """{TF op type: (count, reason, nodes)}: the nodes the target runs but has no 16x8 kernel
    for (its ``16x8`` verdict's ``int16`` constraint), of op types not already ``lacking``."""
    out: dict[str, tuple[int, str | None, list[str]]] = {}
    for v in target.check_graph(model, "16x8").verdicts:
        if (not v.supported and v.constraint == "int16" and v.op not in PLUMBING_OPS
                and v.op not in lacking):
            count, reason, nodes = out.get(v.op, (0, f"{v.reason}{FOR_16X8}", []))
            out[v.op] = (count + 1, reason, [*nodes, v.node])
    return out


def no_16x8_kernel(model: Model, target: PlanTarget) -> list[Fix]:
    """The fixes :func:`plan` with ``for_16x8`` adds for nodes the target runs in int8 but has
    no 16x8 kernel for (the exact rules that replace them by ops that have one); [] when none
    applies. ``target`` must run 16x8."""
    extra = plan(model, target, "int8", True, for_16x8=True)
    return [f for f in extra.fixes if f.reason and f.reason.endswith(FOR_16X8)]


def _unsupported(model: Model, target: PlanTarget, quantize: str,
                 approximate: frozenset[str] | set[str] = frozenset()
                 ) -> dict[str, tuple[int, str | None, list[str]]]:
    """{TF op type: (unsupported node count, first reason, node names)} in graph order; the
    nodes in ``approximate`` count too, with reason :data:`ON_PURPOSE`."""
    out: dict[str, tuple[int, str | None, list[str]]] = {}
    for v in target.check_graph(model, quantize).verdicts:
        on_purpose = v.supported and v.node in approximate
        if (not v.supported or on_purpose) and v.op not in PLUMBING_OPS:
            count, reason, nodes = out.get(v.op, (0, ON_PURPOSE if on_purpose else v.reason,
                                                  []))
            out[v.op] = (count + 1, reason, [*nodes, v.node])
    return out


def choose_rules(op: str, target: PlanTarget, quantize: str, exact_only: bool,
                 cache: dict[str, bool] | None = None,
                 exclude: frozenset[str] | set[str] = frozenset(),
                 forms: dict[str, list[Rule]] | None = None) -> tuple[list[Rule], str]:
    """The rules to run for ``op`` (best first), or ([], why none fits).

    Per rule family (``Rule.family``; alternatives such as elu_exact / elu_ramps share one),
    the best exact rule whose ``emits`` the target runs (its ``fused`` target ops instead when
    the converter fuses them for the target's artifact kind); ``forms`` receives each family's
    fitting exact rules in that order, from which :func:`plan` takes the cheapest on the target
    (:func:`rewriter.targets.form_costs.rank`). Families complement each other (fold BN into the
    conv where possible, Mul+Add elsewhere). Only when no exact rule fits: the single best
    approximate one, unless ``exact_only``.
    """

    candidates = [r for r in rules_for_op(op) if r.name not in exclude]
    if not candidates:
        listed = [r.name for r in rules_for_op(op)]
        return [], ("no rule removes this op" if not listed else
                    f"no rule exists for this form of {op}: the rules that remove other forms "
                    f"({', '.join(listed)}) were tried and did not match it")
    cache = {} if cache is None else cache
    missing: list[str] = []
    exact: dict[str, list[Rule]] = {}
    approx: Rule | None = None
    for rule in candidates:
        lacking = _lacking(rule, target, quantize, cache)
        if lacking:
            missing.append(f"{rule.name} emits {', '.join(lacking)}")
        elif rule.exact:
            exact.setdefault(rule.family or rule.name, []).append(rule)
        elif exact_only:
            missing.append(f"{rule.name} is approximate (max abs error "
                           f"{rule.bound.max_abs_error if rule.bound else '?'}) and "
                           "--exact-only refuses it")
        elif approx is None:
            approx = rule
    if exact:
        if forms is not None:
            forms.update(exact)
        return [fitting[0] for fitting in exact.values()], ""
    return ([approx], "") if approx is not None else ([], "; ".join(missing))


def _lacking(rule: Rule, target: PlanTarget, quantize: str, cache: dict[str, bool]) -> list[str]:
    """What the target lacks of the rule's output: its ``fused`` target ops when the converter
    fuses ``emits`` for the target's artifact kind, else its ``emits`` (TF ops)."""
    fused = rule.fused.get(target.artifact)
    if fused is None:
        return sorted(e for e in rule.emits if e not in PLUMBING_OPS
                      and not _runs(cache, "tf", target.tf_op_status, e, quantize))
    return sorted(t for t in fused if not _runs(cache, target.artifact,
                                                target.target_op_status, t, quantize))


def _runs(cache: dict[str, bool], kind: str, status: Callable[[str, str], OpStatus], op: str,
          quantize: str) -> bool:
    """``status(op, quantize).supported``, asked once per (kind, op)."""
    key = f"{kind}:{op}"
    if key not in cache:
        cache[key] = bool(status(op, quantize).supported)
    return cache[key]


def apply(model: Model, the_plan: Plan, import_with_tf: bool = False,
          data: Samples | None = None) -> RewriteResult:
    """Run the plan's rules, one pass each in plan order, to a fixed point."""
    return apply_rules(model, the_plan.rules, import_with_tf=import_with_tf, data=data,
                       focus=the_plan.focus)


#: Rounds of plan -> apply -> re-check in :func:`plan_and_apply`.
MAX_ROUNDS = 4


def plan_and_apply(model: Model, target: PlanTarget, quantize: str, exact_only: bool = False,
                   exclude: frozenset[str] | set[str] = frozenset(),
                   data: Samples | None = None,
                   approximate: frozenset[str] | set[str] = frozenset(),
                   for_16x8: bool = False) -> tuple[Plan, RewriteResult]:
    """Plan, apply, and re-check until the target lacks nothing a rule not yet tried can fix.

    The first round runs the best rules (exact first). An op still unsupported afterwards is
    planned again with the rules already tried excluded: e.g. the converter fuses both a hard
    swish and a GELU from a ``Mul``; the exact hard-swish rule goes first and does not match a
    GELU, so the next round reaches the GELU rules. The returned plan lists the rules that
    fired, in order, with the fixes of every round and the ops that stayed unfixable. ``data``:
    the calibration samples, for rules fitted on the observed range of their input.
    ``approximate``: nodes the target runs, planned on purpose; ``for_16x8``: nodes it runs
    in int8 only, replaced by exact rules where one fits (:func:`plan`).
    """
    tried = set(exclude)
    current = model
    applied: list[Applied] = []
    rejected: list[Reject] = []
    passes_run: list[str] = []
    fixes: list[Fix] = []
    iterations = 0
    first: Plan | None = None
    for round_no in range(1, MAX_ROUNDS + 1):
        p = plan(current, target, quantize, exact_only, exclude=tried, approximate=approximate,
                 for_16x8=for_16x8)
        first = first or p
        if p.empty:
            break
        res = apply(current, p, data=data)
        fired = {a.rule for a in res.applied}
        left = {n.op for n in res.model.graph_def.node}
        for f in p.fixes:  # credit the rule that fired (the best one may not have matched)
            done = [r for r in (f.rule, *f.also) if r in fired]
            if not done and f.op not in left:  # gone inside another rule's match (a prologue)
                done = [r for r in dict.fromkeys(a.rule for a in res.applied)
                        if f.op in get_rule(r).fixes]
            if done:
                rule = get_rule(done[0])
                choice = f.choice and f.choice | {"chosen": rule.name}
                fixes.append(replace(f, rule=rule.name, also=done[1:], exact=rule.exact,
                                     bound=rule.bound, round=round_no, choice=choice))
        applied.extend(res.applied)
        rejected.extend(res.rejected)
        passes_run.extend(res.passes)
        iterations += res.iterations
        tried.update(p.rules)
        current = res.model
    final = plan(current, target, quantize, exact_only, exclude=tried, approximate=approximate)
    order = list(dict.fromkeys(a.rule for a in applied))
    result = RewriteResult(current, applied, rejected, iterations, passes_run)
    assert first is not None
    return Plan(first.target, quantize, exact_only, order, fixes,
                _with_refusals(final.unfixable, rejected)
                + [Unfixable(f.op, f.count, f.reason, "its rules did not match these nodes", f)
                   for f in final.fixes]
                ), result


def _with_refusals(unfixable: list[Unfixable], rejected: list[Reject]) -> list[Unfixable]:
    """Unfixable ops whose rules refused their nodes say why (the rule, node and reason): "a
    rule exists but refused" is what a user can act on."""
    out = []
    for u in unfixable:
        names = {r.name for r in rules_for_op(u.op)}
        said = [f"{r.rule} refused {r.node}: {r.reason}" for r in rejected if r.rule in names]
        out.append(replace(u, why="; ".join(dict.fromkeys(said))) if said else u)
    return out
