"""The rule base class: how a rewrite rule finds a subgraph, refuses it, and replaces it.

How to write a rule
===================

A rule is one file ``rewriter/rules/<what_it_does>.py`` holding a :class:`Rule` subclass and a
module-level ``RULES = (MyRule(),)``; the catalogue (``rewriter.rules``) discovers every module of
the package that has ``RULES``, so adding a file is all the registration there is. A rule reads
best in four parts, in this order::

    class EluExact(Rule):
        '''ELU(x) = relu(x) + (exp(x - relu(x)) - 1), exact.     <- the identity, first line

        TF's ``Elu`` op has alpha = 1 (Keras wraps other alphas in a Select).
        '''

        name = "elu_exact"                 # unique, snake_case, = the file name where possible
        anchors = frozenset({"Elu"})       # op types of the ROOT node (see below)
        fixes = frozenset({"Elu"})         # TF op types the rule removes
        emits = frozenset({"Relu", "Sub", "Exp", "AddV2"})   # TF op types it creates
        exact = True                       # or: exact = False; bound = Bound(2e-3, (-16, 0))
        family = "elu"                     # alternatives share a family (see fixes/emits below)

        def pattern(self, g, node):        # 1. structure only: Match, or None (not this shape)
            return Match(root=node, nodes=[node], inputs={"x": node.input[0]})

        def check(self, g, m):             # 2. refuse a structural match, with a reason + node
            if dtype_of(m.root) != np.float32:
                return Reject(f"dtype {dtype_of(m.root)} is not float32", m.root.name)
            return None

        def rewrite(self, g, m, b):        # 3. build the replacement; return its output tensor
            x = m.inputs["x"]
            pos = b.op("Relu", [x], "pos_part")
            neg = b.op("Sub", [x, pos], "neg_part")           # min(x, 0), int8-safe (see below)
            em1 = b.op("AddV2", [b.op("Exp", [neg], "exp"), b.const("minus_one", -1.0)], "em1")
            return b.op("AddV2", [pos, em1], "out")

    RULES = (EluExact(),)                  # 4. registration

The parts
---------

* **Root and anchors.** Every pattern is matched from its *root*: the node whose output 0 is the
  output of the whole subgraph (for Conv->BiasAdd->BN it is the BN). The engine visits only the
  nodes whose ``op`` is in ``anchors`` (a dict lookup per node, so matching stays linear in graph
  size) and calls :meth:`Rule.match` on each. A pattern then walks *upwards* from the root through
  ``g.producer(ref)`` (see the helpers below); it must never scan the graph.
* **pattern(g, node) -> Match | None.** (A pattern may also return a Reject directly when
  the reason is found while matching.) Structure only: op types, which inputs are Const (use
  :func:`const_operand` / :func:`commuted` so ``Mul(a, b)`` and ``Mul(b, a)`` both match; Add and
  AddV2 are the same op for matching, see :data:`ADD_OPS`). Return ``None`` when the subgraph is
  simply not this shape: that is silent. Put in ``Match.nodes`` every node the rewrite replaces
  (root included); put in ``Match.inputs`` the tensors entering the subgraph, and in
  ``Match.consts`` the constant values you will need (numpy arrays from ``g.const_value(ref)``).
  Consts feeding the subgraph are *not* listed in ``nodes``: the engine deletes whatever the
  rewrite leaves unused.
* **check(g, m) -> Reject | None.** The pattern matched but the rule refuses it: wrong dtype,
  non-const weights, a producer with other consumers, an unsupported attribute... Return
  ``Reject(reason, node_name)``; the reason is shown to users ("check" and "report"), so write it
  as a sentence about the observed value: ``"epsilon input is not a constant"``. Before your
  check, :meth:`Rule.match` already refuses matches whose inner nodes (all but the root) are read
  by nodes outside the match, or whose root's outputs other than 0 are read.
* **rewrite(g, m, b) -> str.** Build the replacement with the :class:`Builder` ``b`` only:
  ``b.const(suffix, value)`` (computed in float64 by you, stored float32 by default) and
  ``b.op(op_type, inputs, suffix, attrs=...)``; both return tensor refs (``"name"`` or
  ``"name:1"``) to feed into further ``b.op`` calls. Return the tensor that replaces the root's
  output 0. Do not mutate ``m.nodes``; the engine redirects the root's consumers, deletes the
  matched nodes and dead consts, and renames your output node to the root's name (so signature
  outputs and downstream names survive). New nodes are named ``<root>/<rule>/<suffix>`` and carry
  the attribute ``_rewriter_rule = <rule name>`` (provenance, :data:`RULE_ATTR`).
* **int8.** Replacements should survive full-int8 conversion (check with
  :func:`rewriter.testing.int8_tflite`). Two traps measured: the converter leaves some ops
  in float (ELU, NEG: ``DEQUANTIZE -> op -> QUANTIZE``), and MINIMUM/MAXIMUM share one
  quantization scale between input and output, so ``Minimum(x, 0)`` on a tensor ``x`` that
  other ops also read clips x to [lo, 0] for all of them (int8 ELU error 1.0); write
  ``x - relu(x)`` instead.
* **Exactness.** ``exact = True`` means the replacement computes the same function up to float32
  rounding (tests hold it to 1e-5 relative). Otherwise ``exact = False`` and
  ``bound = Bound(max_abs_error, (lo, hi))``: the largest |new - old| over inputs in [lo, hi]
  (measured in float64 over a dense grid, stated in the docstring, enforced by the test).
  A rule fitted to the data (:mod:`rewriter.rules._unary`: a function fitted on the range its
  input takes on the calibration samples, :func:`rewriter.ir.ranges.observed_range`) sets
  ``Match.bound`` in its check: each application then states its own bound and range.
* **fixes / emits / family.** The planner picks a rule for an op the target lacks when the op is
  in ``fixes`` and every op in ``emits`` is supported by the target: per ``family`` (rules that
  are alternatives for one another, e.g. ``family = "elu"`` for elu_exact and elu_ramps) the
  best exact one; an approximate rule (smallest bound first) only when no exact rule fits. Keep
  ``emits`` complete: an op missing from it could slip past the op table. ``priority`` orders
  equally exact rules, ``order`` the application when several are planned. When the converter
  fuses what a rule emits into ops the target has (``emits`` holds Rsqrt, the artifact holds
  L2_NORMALIZATION), declare them in ``fused = {"tflite": frozenset({...})}``: the planner then
  checks those target ops for targets exporting that kind.

Helpers for patterns (all O(pattern size), never a graph scan)
-------------------------------------------------------------

* ``g.producer(ref)``, ``g.consumers(name)``, ``g.const_value(ref)`` (:class:`GraphIndex`);
* :func:`producer_op` (producer of a data edge if its op is one of ``ops``), :func:`commuted`
  (input orders to try), :func:`const_operand` (the non-constant input and the constant of a
  binary node), :func:`dtype_of`;
* :func:`static_value` evaluates a constant subgraph with numpy (Identity, Reshape, Rsqrt, Mul,
  Shape of a static tensor, StridedSlice, Pack, Fill, ...) and names the nodes it went through:
  use it for weights that are not a bare Const (Keras 3 biases are Reshape/Squeeze of one);
* :func:`tensor_shape` gives a tensor's static shape from TF's shape inference (cached per graph).

Testing a rule (``tests/rules/test_<rule>.py``)
-----------------------------------------------

Use :mod:`rewriter.testing`: build a tiny model with :func:`~rewriter.testing.
model_from_function` (a ``tf.function`` frozen to a GraphDef), apply with
:func:`~rewriter.testing.apply_rules`, and assert three things: (1) it fires (op types
after, ``op_types(model)``), (2) a case where it must not fire with its reason
(``result.rejected``), (3) the numbers: :func:`~rewriter.testing.assert_close_rel` at 1e-5
for exact rules over dense samples of the domain, or max abs error <= ``rule.bound.max_abs_error``
over ``rule.bound.input_range``. ``tests/rules/test_elu_exact.py`` is the worked example.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rewriter.ir.graph import (
    GraphIndex,
    NodeDef,
    make_const,
    make_node,
    parse_input,
    tf_dtype,
)
from rewriter.ir.patterns import (
    ADD_OPS,
    COMMUTATIVE_OPS,
    commuted,
    const_operand,
    dtype_of,
    producer_op,
)
from rewriter.ir.static_eval import _norm_ref, static_value, tensor_shape

__all__ = ["ADD_OPS", "COMMUTATIVE_OPS", "RULE_ATTR", "Applied", "Bound", "Builder", "Match",
           "Reject", "Rule", "commuted", "const_operand", "dtype_of",
           "producer_op", "static_value", "tensor_shape"]

#: Node attribute that records which rule created a node (provenance).
RULE_ATTR = "_rewriter_rule"



@dataclass(frozen=True)
class Bound:
    """An error bound: ``max |new - old| <= max_abs_error`` for inputs in ``input_range``.

    Use ``float("inf")`` ends for "every real"; JSON writes them as null.
    """

    max_abs_error: float
    input_range: tuple[float, float]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        lo, hi = (None if abs(v) == float("inf") else v for v in self.input_range)
        out: dict[str, Any] = {"max_abs_error": self.max_abs_error, "input_range": [lo, hi]}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Match:
    """A structural match: ``root`` (whose output 0 is replaced), every node the rewrite replaces,
    the tensors entering the subgraph, and captured constant values.

    ``outputs`` lists further tensors of matched nodes that nodes outside the match read (a
    subgraph with several results, e.g. a while loop's exits); a rule that sets it returns a
    ``{old tensor: new tensor}`` dict from :meth:`Rule.rewrite` covering each of them.
    ``bound``, when a rule's check sets it, is this match's own error bound (a fit on the
    data's range), stated instead of the rule's nominal one.
    """

    root: NodeDef
    nodes: list[NodeDef]
    inputs: dict[str, str] = field(default_factory=dict)
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    bound: Bound | None = None

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in self.nodes]


@dataclass(frozen=True)
class Reject:
    """A refused match: why (a sentence about the observed value) and which node caused it."""

    reason: str
    node: str
    rule: str = ""

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "node": self.node, "reason": self.reason}


@dataclass
class Applied:
    """One application of a rule: the nodes it matched (replaced) and the nodes it created."""

    rule: str
    root: str
    matched: list[str]
    created: list[str]
    exact: bool
    bound: Bound | None

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "root": self.root, "nodes": list(self.matched),
                "created": list(self.created), "exact": self.exact,
                "bound": self.bound.to_json() if self.bound else None}


def _fast_const(name: str, arr: np.ndarray) -> NodeDef:
    """A Const node with ``tensor_content`` bytes (what ``make_const`` builds, without TF's
    slower ``make_tensor_proto``); falls back to ``make_const`` for types it does not map."""
    try:
        enum = tf_dtype(arr.dtype)
    except KeyError:
        return make_const(name, arr)
    node = NodeDef(name=name, op="Const")
    node.attr["dtype"].type = enum
    tensor = node.attr["value"].tensor
    tensor.dtype = enum
    for d in arr.shape:
        tensor.tensor_shape.dim.add(size=int(d))
    tensor.tensor_content = np.ascontiguousarray(arr).tobytes()
    return node


class Builder:
    """Creates the replacement's nodes, named ``<scope>/<rule>/<suffix>``, with provenance."""

    def __init__(self, g: GraphIndex, rule: str, scope: str, dtype: Any = np.float32) -> None:
        self.g = g
        self.rule = rule
        self.scope = scope
        self.dtype = np.dtype(dtype)
        self.created: list[str] = []

    def _name(self, suffix: str) -> str:
        return self.g.unique_name(f"{self.scope}/{self.rule}/{suffix}")

    def _add(self, node: NodeDef) -> str:
        node.attr[RULE_ATTR].s = self.rule.encode()
        self.g.add(node)
        self.created.append(node.name)
        return node.name

    def const(self, suffix: str, value: Any, dtype: Any = None) -> str:
        """A new Const holding ``value`` (cast to ``dtype``, default the builder's float type)."""
        arr = np.asarray(value)
        arr = arr.astype(self.dtype if dtype is None else np.dtype(dtype))
        return self._add(_fast_const(self._name(suffix), arr))

    def op(self, op: str, inputs: Sequence[str], suffix: str | None = None,
           attrs: Mapping[str, Any] | None = None, dtype: Any = "same",
           dtype_attr: str | None = "T") -> str:
        """A new ``op`` node reading ``inputs``; returns its output-0 tensor ref.

        ``dtype="same"`` uses the builder's dtype for attr ``T``; pass ``dtype_attr=None`` for ops
        without a ``T`` attr, and other attrs (e.g. ``strides``, ``padding``) in ``attrs``.
        """
        dt = self.dtype if isinstance(dtype, str) and dtype == "same" else dtype
        node = make_node(op, self._name(suffix or op.lower()), inputs, attrs, dt, dtype_attr)
        return self._add(node)

    def copy_of(self, node: NodeDef, inputs: Sequence[str], suffix: str) -> str:
        """A copy of ``node`` (same op and attrs) reading ``inputs``: e.g. a conv with new weights."""
        new = NodeDef()
        new.CopyFrom(node)
        new.name = self._name(suffix)
        del new.input[:]
        new.input.extend(inputs)
        return self._add(new)


class Rule:
    """Base class of every rewrite rule; see the module docstring for how to write one."""

    name: ClassVar[str] = ""
    anchors: ClassVar[frozenset[str]] = frozenset()
    fixes: ClassVar[frozenset[str]] = frozenset()
    emits: ClassVar[frozenset[str]] = frozenset()
    exact: ClassVar[bool] = True
    bound: ClassVar[Bound | None] = None
    #: Among rules equally exact, lower is preferred (e.g. fold before mul+add).
    priority: ClassVar[int] = 0
    #: Application order when several rules are planned (lower runs first).
    order: ClassVar[int] = 100
    #: Rules of one family are alternatives (the planner takes the best that fits); rules of
    #: different families complement each other. Empty = a family of its own.
    family: ClassVar[str] = ""
    #: Per artifact kind ("tflite"/"onnx"), the target ops ``emits`` becomes after conversion
    #: when the converter fuses it (e.g. Square/Sum/Maximum/Rsqrt/Mul -> L2_NORMALIZATION). For
    #: a target of that kind the planner checks these ops instead of ``emits``.
    fused: ClassVar[dict[str, frozenset[str]]] = {}
    #: True when the rule reads the observed range of its input (``rewriter.ir.ranges``): the pass
    #: manager then measures the inputs of its anchors on the calibration samples.
    needs_range: ClassVar[bool] = False
    #: True for generic rules (any elementwise function): they rewrite only the nodes the plan
    #: found unsupported (``Plan.focus``), else they would rewrite what the target runs too.
    targeted: ClassVar[bool] = False

    # ----------------------------------------------------------- to override
    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        raise NotImplementedError

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str | dict[str, str]:
        raise NotImplementedError

    # ------------------------------------------------------------- provided
    @property
    def summary(self) -> str:
        """The identity: first line of the class docstring."""
        return (self.__doc__ or "").strip().splitlines()[0] if self.__doc__ else self.name

    def sort_key(self) -> tuple[int, float, int, str]:
        """Exact rules first, then by bound, priority, name (the planner's preference order)."""
        err = 0.0 if self.exact else (self.bound.max_abs_error if self.bound else float("inf"))
        return (0 if self.exact else 1, err, self.priority, self.name)

    def match(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        """pattern, then the generic safety checks, then :meth:`check`."""
        if node.op not in self.anchors:
            return None
        m = self.pattern(g, node)
        if m is None:
            return None
        if isinstance(m, Reject):
            return Reject(m.reason, m.node, self.name)
        reject = self._safe_to_replace(g, m)
        if reject is None:
            reject = self.check(g, m)
        if reject is not None:
            return Reject(reject.reason, reject.node, self.name)
        return m

    def _safe_to_replace(self, g: GraphIndex, m: Match) -> Reject | None:
        inside = {n.name for n in m.nodes}
        if m.outputs:
            return _outputs_cover_reads(g, m, inside)
        for user in g.consumers(m.root.name):
            for ref in user.input:
                src, idx, ctrl = parse_input(ref)
                if src == m.root.name and idx != 0 and not ctrl:
                    return Reject(f"output {idx} of {m.root.name} is read by {user.name}",
                                  m.root.name)
        for node in m.nodes:
            if node.name == m.root.name:
                continue
            for user in g.consumers(node.name):
                if user.name not in inside:
                    return Reject(f"{node.op} {node.name} is also read by {user.name}, "
                                  "outside the pattern", node.name)
        return None

    def apply(self, g: GraphIndex, m: Match, protected: Iterable[str] = ()) -> Applied:
        """Rewrite ``m`` in ``g``: build, redirect, delete what became dead, keep the root name."""
        dt = dtype_of(m.root) or np.dtype(np.float32)
        b = Builder(g, self.name, m.root.name, dt if dt.kind == "f" else np.float32)
        out = self.rewrite(g, m, b)
        matched = m.node_names
        root = m.root.name
        if isinstance(out, dict):
            return self._apply_many(g, m, b, out, set(protected))
        g.redirect(root, out)
        _move_control_edges(g, root, out)
        _remove_dead(g, matched, set(protected) - {root})
        out_node, out_idx, _ = parse_input(out)
        if root not in g and out_node in b.created and out_idx == 0:
            g.rename(out_node, root)
            b.created[b.created.index(out_node)] = root
        elif root not in g and root in set(protected):
            b.created.append(b.op("Identity", [out], "keep_name"))
            g.rename(b.created[-1], root)
            b.created[-1] = root
        return Applied(self.name, root, matched, list(b.created), self.exact,
                       m.bound if m.bound is not None else self.bound)

    def _apply_many(self, g: GraphIndex, m: Match, b: Builder, out: dict[str, str],
                    protected: set[str]) -> Applied:
        """Apply a multi-output rewrite: redirect every read tensor, delete the matched nodes
        (all of them: a loop's nodes read each other in a cycle, so none ever looks unread),
        and give each replacement the name of the node it replaced."""
        given = {_norm_ref(k) for k in out}
        missing = [t for t in m.outputs if _norm_ref(t) not in given]
        if missing:
            raise ValueError(f"rewrite returned no replacement for {', '.join(missing)}")
        matched = set(m.node_names)
        for old, new in out.items():
            g.redirect(old, new)
            if _norm_ref(old).endswith(":0"):
                g.redirect(parse_input(old)[0], new)
        firsts = list(dict.fromkeys(parse_input(v)[0] for v in out.values()))
        feeders: list[str] = []
        for name in m.node_names:
            if name not in g:
                continue
            for user in g.consumers(name):  # outside control dependents wait for the results
                if user.name not in matched and f"^{name}" in user.input:
                    refs = [r for r in user.input if r != f"^{name}"]
                    if user.op != "NoOp":
                        refs.extend(f"^{f}" for f in firsts if f"^{f}" not in refs)
                    g.set_inputs(user, refs)
            feeders.extend(parse_input(r)[0] for r in g[name].input)
            g.remove(name)
        _remove_dead(g, [f for f in feeders if f not in matched], protected)
        for old, new in out.items():
            old_node, old_idx, _ = parse_input(old)
            new_node, new_idx, _ = parse_input(new)
            if old_idx != 0 or old_node in g:
                continue
            if new_idx == 0 and new_node in b.created:
                g.rename(new_node, old_node)
                b.created[b.created.index(new_node)] = old_node
            elif old_node in protected:
                keep = b.op("Identity", [new], "keep_name")
                g.rename(keep, old_node)
                b.created[-1] = old_node
        return Applied(self.name, m.root.name, m.node_names, list(b.created), self.exact,
                       self.bound)


def _outputs_cover_reads(g: GraphIndex, m: Match, inside: set[str]) -> Reject | None:
    """A multi-output match is safe when every data read from outside is in ``m.outputs``."""
    allowed = {_norm_ref(t) for t in m.outputs}
    for node in m.nodes:
        for user in g.consumers(node.name):
            if user.name in inside:
                continue
            for ref in user.input:
                src, idx, ctrl = parse_input(ref)
                if src == node.name and not ctrl and f"{src}:{idx}" not in allowed:
                    return Reject(f"{node.op} {node.name} output {idx} is also read by "
                                  f"{user.name}, outside the pattern", node.name)
    return None


def _move_control_edges(g: GraphIndex, old: str, new_ref: str) -> None:
    """Control dependents of ``old`` now depend on the node producing ``new_ref``."""
    new_node = parse_input(new_ref)[0]
    for user in g.consumers(old):
        refs = list(user.input)
        if f"^{old}" in refs:
            refs = [f"^{new_node}" if r == f"^{old}" else r for r in refs]
            g.set_inputs(user, list(dict.fromkeys(refs)))


def _remove_dead(g: GraphIndex, names: Iterable[str], protected: set[str]) -> None:
    """Delete ``names`` that nothing reads any more, then every producer that this orphaned.

    A node read only through control edges of ``NoOp`` nodes (the frozen-graph "read all
    variables" NoOp) counts as unread; those control edges are dropped with it.
    """
    stack = list(dict.fromkeys(names))
    while stack:
        name = stack.pop()
        if name not in g or name in protected or g[name].op in _NEVER_DEAD:
            continue
        users = g.consumers(name)
        if any(u.op != "NoOp" or f"^{name}" not in u.input for u in users):
            continue
        for u in users:
            g.set_inputs(u, [r for r in u.input if r != f"^{name}"])
        feeders = [parse_input(r)[0] for r in g[name].input]
        g.remove(name)
        stack.extend(f for f in feeders if f in g)


#: Producers never deleted as dead code (graph inputs).
_NEVER_DEAD = frozenset({"Placeholder", "PlaceholderWithDefault"})
