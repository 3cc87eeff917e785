"""First divergence: where, inside the graph, the rewritten model starts to differ.

Nodes with the same name in the original and the rewritten graph compute the same tensor: rules
rename their output node to the root they replaced, and every node they did not touch keeps its
name. :func:`first_divergence` fetches output 0 of every such float node from both graphs in one
run per sample (``Model.run(feeds, fetches=[...])``), walks them in topological order of the
original, and reports the first whose error leaves its bound, plus the error of every compared
node (for the per-node plot of ``report.html``). Names are compared without the
``PartitionedCall/`` scopes a SavedModel round trip adds (:func:`name_key`), so ``model.keras``
lines up with the ``out/saved_model`` of a job; which rules ran where is read from the job's
``rules_applied`` or, failing that, from the ``_rewriter_rule`` provenance the rewritten graph
carries (:func:`rules_from_provenance`).

Bound of a node with output scale ``s = max|ref|`` (over all samples): the tolerance policy's
(:mod:`rewriter.verify.tolerance`), ``|d| <= EXACT_RTOL * s + B * max(1, s) + EXACT_RTOL *
|ref|`` element-wise, where ``B`` is the sum of the stated max abs errors of the approximate rule
applications upstream of the node (the node itself included): exact rewrites only differ by
float32 rounding.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, node_dtype, parse_input
from rewriter.ir.loops import loop_nodes
from rewriter.ir.model import Model
from rewriter.verify.tolerance import DEFAULT_POLICY, EXACT_RTOL, bound_of

__all__ = ["Divergence", "NodeError", "first_divergence", "name_key", "rules_from_provenance"]

#: Ops whose outputs are not fetched (no value, or not fetchable from outside a loop).
_SKIP_OPS = frozenset({"Const", "Placeholder", "PlaceholderWithDefault", "NoOp", "Assert",
                       "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond",
                       "VarHandleOp", "ReadVariableOp", "StatelessWhile", "While", "If",
                       "StatelessIf", "SaveV2", "RestoreV2"})


@dataclass
class NodeError:
    """The comparison of one node's output 0 in both graphs."""

    index: int  # position among the compared nodes, in topological order of the original
    node: str
    op: str  # op in the original graph
    rewritten_op: str
    max_abs_error: float
    scale: float  # max |ref|
    bound: float  # atol of this node (see the module docstring)
    ok: bool
    rules: list[str] = field(default_factory=list)  # approximate rules upstream (their budget)
    note: str = ""

    @property
    def ratio(self) -> float:
        """max |d| / bound: above 1 means out of bound."""
        if self.bound > 0:
            return self.max_abs_error / self.bound
        return 0.0 if self.max_abs_error == 0 else math.inf

    def to_json(self) -> dict[str, Any]:
        def fin(x: float) -> Any:
            return x if math.isfinite(x) else str(x)

        out = {"index": self.index, "node": self.node, "op": self.op,
               "max_abs_error": fin(self.max_abs_error), "scale": fin(self.scale),
               "bound": fin(self.bound), "ok": self.ok}
        if self.rewritten_op != self.op:
            out["rewritten_op"] = self.rewritten_op
        if self.rules:
            out["rules"] = list(self.rules)
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Divergence:
    """The first node out of bound (None when every compared node is within its bound)."""

    first: NodeError | None
    produced_by: list[dict[str, str]]  # [{rule, root}] nearest rule applications at/above it
    nodes: list[NodeError]
    skipped: int
    samples: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.first is None

    def describe(self) -> str:
        if self.first is None:
            return (f"no divergence: {len(self.nodes)} node(s) compared within their bounds "
                    f"({self.samples} sample(s))")
        f = self.first
        by = ", ".join(f"{p['rule']} at {p['root']}" for p in self.produced_by) or "no rule"
        return (f"first divergence at node {f.node} ({f.op}): max abs error "
                f"{f.max_abs_error:.3g} > bound {f.bound:.3g}; produced by {by}")

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "first": self.first.to_json() if self.first else None,
                "produced_by": list(self.produced_by), "compared": len(self.nodes),
                "skipped": self.skipped, "samples": self.samples,
                "seconds": round(self.seconds, 3), "summary": self.describe(),
                "nodes": [n.to_json() for n in self.nodes]}


_CALL_PREFIX = re.compile(r"^(?:(?:Stateful)?PartitionedCall(?:_\d+)?/)+")


def name_key(name: str) -> str:
    """A node's name without the ``PartitionedCall/`` scopes a SavedModel round trip adds, so
    the graph of ``out/saved_model`` lines up with the original's."""
    return _CALL_PREFIX.sub("", name)


def _comparable(node: NodeDef, other: Mapping[str, NodeDef]) -> bool:
    twin = other.get(name_key(node.name))
    if node.op in _SKIP_OPS or twin is None or twin.op in ("Placeholder", "NoOp"):
        return False
    dt = node_dtype(node)
    return dt is not None and dt.kind == "f"


def rules_from_provenance(rewritten: Model, original: Model) -> list[dict[str, Any]]:
    """The rule applications recorded in ``rewritten`` itself: a node carrying
    ``_rewriter_rule`` whose name also exists in ``original`` is a replaced root (rules rename
    their output node to the root). Exactness and bound come from the rule catalogue."""
    from rewriter.rules import all_rules
    from rewriter.rules.base import RULE_ATTR

    known = {r.name: r for r in all_rules()}
    names = {name_key(n.name) for n in original.graph_def.node}
    apps = []
    for node in rewritten.graph_def.node:
        if RULE_ATTR not in node.attr or name_key(node.name) not in names:
            continue
        rule = node.attr[RULE_ATTR].s.decode()
        r = known.get(rule)
        apps.append({"rule": rule, "root": name_key(node.name),
                     "exact": r.exact if r else False,
                     "bound": r.bound.to_json() if r and r.bound else None})
    return apps


def _upstream(order: Sequence[NodeDef], roots: Mapping[str, list[int]]) -> dict[str, frozenset]:
    """For every node, the indices of the rule applications rooted at it or above it."""
    up: dict[str, frozenset] = {}
    empty: frozenset = frozenset()
    for node in order:
        acc = set(roots.get(name_key(node.name), ()))
        for ref in node.input:
            src = parse_input(ref)[0]
            acc |= up.get(src, empty)
        up[node.name] = frozenset(acc) if acc else empty
    return up


def _applications(rules_applied: Sequence[Any]) -> list[dict[str, Any]]:
    """Flatten ``rules_applied`` given per application (:class:`~rewriter.rules.base.Applied`,
    or its JSON {rule, root, ...}) or per rule as the report has it ({rule, roots: [...],
    exact, bound})."""
    apps = []
    for a in rules_applied:
        if not isinstance(a, Mapping):
            a = a.to_json()
        roots = a["roots"] if "roots" in a else [a["root"]]
        for r in roots:
            apps.append({"rule": a["rule"], "root": r, "exact": a.get("exact", True),
                         "bound": a.get("bound")})
    return apps


def _budget(app: Mapping[str, Any]) -> float:
    return bound_of(app) or 0.0


@dataclass
class _Stats:
    """What one node's comparison needs, accumulated sample by sample (so only one sample's
    tensors are held at a time): max |d|, max |ref|, max (|d| - rtol |ref|), and flags."""

    err: float = 0.0
    scale: float = 0.0
    needed: float = 0.0  # the smallest atol that passes at rtol = EXACT_RTOL
    nonfinite: bool = False
    shape: bool = False

    def add(self, ref: np.ndarray, test: np.ndarray) -> None:
        if np.shape(ref) != np.shape(test):
            self.shape = True
            return
        r = np.asarray(ref, np.float64).ravel()
        t = np.asarray(test, np.float64).ravel()
        fin = np.isfinite(r) & np.isfinite(t)
        if not np.all(fin | (r == t) | (np.isnan(r) & np.isnan(t))):
            self.nonfinite = True
        rf, d = r[fin], np.abs(t[fin] - r[fin])
        self.err = max(self.err, float(d.max(initial=0.0)))
        self.scale = max(self.scale, float(np.abs(rf).max(initial=0.0)))
        self.needed = max(self.needed, float((d - EXACT_RTOL * np.abs(rf)).max(initial=0.0)))

    def verdict(self, budget: float) -> tuple[float, float, float, bool, str]:
        """(max abs error, scale, bound, ok, note) given the upstream approximation budget."""
        if self.shape:
            return math.inf, self.scale, 0.0, False, "shape differs"
        atol = DEFAULT_POLICY.tensor_atol(self.scale, budget)
        ok = not self.nonfinite and self.needed <= atol
        return self.err, self.scale, atol, ok, "NaN/Inf differ" if self.nonfinite else ""


def _compare_tensors(original: Model, rewritten: Model,
                     samples: Sequence[Mapping[str, np.ndarray]],
                     pairs: list[tuple[str, str]]) -> list[_Stats]:
    """Per (original tensor, rewritten tensor) pair, stats over the samples (one TF run per
    sample and graph, fetching every tensor at once)."""
    stats = [_Stats() for _ in pairs]
    if not pairs:
        return stats
    ta, tb = [p[0] for p in pairs], [p[1] for p in pairs]
    for s in samples:
        ra, rb = original.run(s, fetches=ta), rewritten.run(s, fetches=tb)
        for st, a, b in zip(stats, ta, tb, strict=True):
            st.add(ra[a], rb[b])
    return stats


def first_divergence(original: Model, rewritten: Model,
                     samples: Sequence[Mapping[str, np.ndarray]],
                     rules_applied: Sequence[Any] | None = None,
                     max_samples: int = 4) -> Divergence:
    """Compare intermediate tensors of ``original`` and ``rewritten`` through the name map.

    ``rules_applied`` is ``RewriteResult.applied`` or the report's ``rules_applied``; None reads
    them from the rewritten graph's provenance (:func:`rules_from_provenance`). Names are
    matched after :func:`name_key`. At most ``max_samples`` samples are used, one at a time
    (each run fetches every compared tensor of both graphs at once).
    """
    start = time.perf_counter()
    samples = list(samples)[:max_samples]
    if rules_applied is None:
        rules_applied = rules_from_provenance(rewritten, original)
    g = GraphIndex(original.graph_def)
    order = g.topological_order()
    other = {name_key(n.name): n for n in rewritten.graph_def.node}
    inside = loop_nodes(g) | loop_nodes(GraphIndex(rewritten.graph_def))  # not fetchable
    compared = [n for n in order if _comparable(n, other) and n.name not in inside
                and other[name_key(n.name)].name not in inside]
    skipped = sum(1 for n in order if n.op not in _SKIP_OPS) - len(compared)
    apps = _applications(rules_applied)
    roots: dict[str, list[int]] = {}
    for k, a in enumerate(apps):
        roots.setdefault(name_key(a["root"]), []).append(k)
    up = _upstream(order, roots)
    pairs = [(f"{n.name}:0", f"{other[name_key(n.name)].name}:0") for n in compared]
    stats = _compare_tensors(original, rewritten, samples, pairs)
    errors: list[NodeError] = []
    for i, node in enumerate(compared):
        ups = sorted(up.get(node.name, ()))
        budget = float(sum(_budget(apps[k]) for k in ups))
        err, scale, bound, ok, note = stats[i].verdict(budget)
        approx = sorted({apps[k]["rule"] for k in ups if not apps[k]["exact"]})
        errors.append(NodeError(i, node.name, node.op, other[name_key(node.name)].op, err,
                                scale, bound, ok, approx, note))
    first = next((e for e in errors if not e.ok), None)
    produced = _producers(g, first.node, roots, apps) if first else []
    return Divergence(first, produced, errors, skipped, len(samples),
                      time.perf_counter() - start)


def _producers(g: GraphIndex, name: str, roots: Mapping[str, list[int]],
               apps: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The rule applications rooted at ``name``, else the nearest ones above it (BFS)."""
    seen, frontier = {name}, [name]
    while frontier:
        hits = [apps[k] for n in frontier for k in roots.get(name_key(n), ())]
        if hits:
            return [{"rule": a["rule"], "root": a["root"]} for a in hits]
        nxt = []
        for n in frontier:
            for ref in g[n].input if n in g else ():
                src = parse_input(ref)[0]
                if src not in seen:
                    seen.add(src)
                    nxt.append(src)
        frontier = nxt
    return []
