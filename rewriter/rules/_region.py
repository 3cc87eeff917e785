"""Elementwise regions: the largest subgraph around a node that computes ``y = f(x)`` elementwise.

An activation is rarely one op in a frozen graph: Keras 3 ``celu`` is Maximum, Minimum,
RealDiv, Expm1, Mul and AddV2; ``log_sigmoid`` is Neg, Softplus, Neg; ``sparse_plus`` five ops
around two SelectV2. :func:`grow_region` finds, from a seed node, the connected set of
elementwise ops (:data:`ELEMENTWISE`) whose only non-constant input is one tensor ``x`` and whose
only output read outside is the root's output 0; every constant it reads is a scalar (or a splat, e.g. a
folded ``zeros_like``), so the region is one function of one real variable. :class:`RegionFunction` evaluates that function as
the original graph does (the region's nodes copied into a small TF graph, float32, fed a 1-D
grid), so any rule can fit it without knowing which activation it is.

Growth: downwards into consumers whose data inputs all come from the region, ``x`` or scalar
constants; upwards into producers that are elementwise, read only ``x``-derived tensors and
scalars, and whose every consumer is in the region (a tensor also read elsewhere stays the
input). Bounded by :data:`MAX_REGION` nodes; linear in the region's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphDef, GraphIndex, NodeDef, make_node, parse_input

#: TF op types that act elementwise on same-shaped operands (with scalar constants).
ELEMENTWISE = frozenset({
    "Abs", "Neg", "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt", "Square", "Reciprocal",
    "Inv", "Sign", "Sigmoid", "Tanh", "Softplus", "Softsign", "Elu", "Selu", "Relu", "Relu6",
    "LeakyRelu", "Erf", "Erfc", "Sin", "Cos", "Add", "AddV2", "Sub", "Mul", "RealDiv", "Div",
    "DivNoNan", "Maximum", "Minimum", "Pow", "SquaredDifference", "Greater", "GreaterEqual",
    "Less", "LessEqual", "Select", "SelectV2", "Cast", "LogicalAnd", "LogicalOr", "LogicalNot",
    "ClipByValue", "Identity", "ZerosLike", "OnesLike",
})
#: Largest region considered (nodes).
MAX_REGION = 32


@dataclass
class Region:
    """``root`` computes ``f(x)`` elementwise from tensor ``x``; ``nodes`` in graph order."""

    root: NodeDef
    nodes: list[NodeDef]
    x: str


def _data_inputs(node: NodeDef) -> list[str]:
    return [r for r in node.input if not r.startswith("^")]


def _key(ref: str) -> str:
    name, idx, _ = parse_input(ref)
    return f"{name}:{idx}"


def _const_value(g: GraphIndex, ref: str) -> np.ndarray | None:
    """The value of a constant tensor: a Const, or a small constant subgraph (``Fill`` of a
    ``zeros_like``, a Cast of a Const) evaluated with numpy."""
    val = g.const_value(ref)
    if val is not None:
        return val
    from rewriter.rules.base import static_value

    try:
        found = static_value(g, ref, limit=8)
    except (KeyError, ValueError, TypeError):
        return None
    return None if found is None else found[0]


def _is_scalar_const(g: GraphIndex, ref: str) -> bool:
    """A constant with one value: a scalar, or a splat such as a ``zeros_like``."""
    val = _const_value(g, ref)
    return val is not None and val.size >= 1 and bool(np.all(val == val.ravel()[0]))


def _external(g: GraphIndex, names: set[str]) -> set[str]:
    """Non-constant tensors read by the region's nodes and produced outside it."""
    out = set()
    for name in names:
        for ref in _data_inputs(g[name]):
            if parse_input(ref)[0] not in names and not _is_scalar_const(g, ref):
                out.add(_key(ref))
    return out


#: Ops whose output is boolean: never the root of a region (the region's value is a float).
BOOLEAN = frozenset({"Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd", "LogicalOr",
                     "LogicalNot"})


def grow_region(g: GraphIndex, seed: NodeDef, skip_rule: str = "") -> Region | None:
    """The elementwise region around ``seed`` with one input tensor and one output, or None.

    First the whole connected elementwise component (scalar constants only); when that has more
    than one input tensor or output, a cautious growth that keeps one input at every step.
    Nodes created by rule ``skip_rule`` (provenance) are never part of a region, so a rule
    does not fit its own output again."""
    from rewriter.rules.base import RULE_ATTR

    def allowed(node: NodeDef) -> bool:
        return node.op in ELEMENTWISE and all(
            g.producer(r) is not None and (_const_value(g, r) is None or _is_scalar_const(g, r))
            for r in _data_inputs(node)) and not (
            skip_rule and RULE_ATTR in node.attr and node.attr[RULE_ATTR].s.decode() == skip_rule)

    if not allowed(seed):
        return None
    for grow in (_component, _cautious):
        names = grow(g, seed, allowed)
        region = _as_region(g, names) if names else None
        if region is not None:
            return region
    return None


def _component(g: GraphIndex, seed: NodeDef, allowed) -> set[str] | None:
    """Every allowed node connected to ``seed`` through data edges (None past MAX_REGION)."""
    names, stack = {seed.name}, [seed]
    while stack:
        node = stack.pop()
        near = [g.producer(r) for r in _data_inputs(node) if parse_input(r)[1] == 0]
        near += list(g.consumers(node.name))
        for other in near:
            if other is not None and other.name not in names and allowed(other):
                names.add(other.name)
                stack.append(other)
                if len(names) > MAX_REGION:
                    return None
    return names


def _cautious(g: GraphIndex, seed: NodeDef, allowed) -> set[str] | None:
    """Grow from ``seed`` only while the region keeps a single input tensor."""
    names = {seed.name}
    changed = True
    while changed and len(names) <= MAX_REGION:
        changed = False
        for name in list(names):
            for ref in _data_inputs(g[name]):
                p = g.producer(ref)
                if (p is None or p.name in names or not allowed(p)
                        or parse_input(ref)[1] != 0
                        or any(c.name not in names for c in g.consumers(p.name))):
                    continue
                if len(_external(g, names | {p.name})) == 1:
                    names.add(p.name)
                    changed = True
        ext = _external(g, names)
        for name in list(names):
            for c in g.consumers(name):
                if c.name in names or not allowed(c):
                    continue
                if _external(g, names | {c.name}) <= ext and len(ext) == 1:
                    names.add(c.name)
                    changed = True
    return names if len(names) <= MAX_REGION else None


def _as_region(g: GraphIndex, names: set[str]) -> Region | None:
    """``names`` as a Region: one input tensor, one node read outside (output 0 only), whose
    value is not boolean; else None."""
    ext = _external(g, names)
    if len(ext) != 1:
        return None
    leaving = [n for n in names if any(c.name not in names for c in g.consumers(n))
               or not g.consumers(n)]
    if len(leaving) != 1 or g[leaving[0]].op in BOOLEAN:
        return None
    root = g[leaving[0]]
    for c in g.consumers(root.name):
        if c.name not in names and any(parse_input(r)[0] == root.name and parse_input(r)[1] != 0
                                       for r in _data_inputs(c)):
            return None
    order = [n.name for n in g if n.name in names]
    return Region(root, [g[n] for n in order], ext.pop())


class RegionFunction:
    """The region as a numpy function of a 1-D float array, run by TensorFlow in float32."""

    def __init__(self, g: GraphIndex, region: Region) -> None:
        self.region = region
        self._graph_def = _region_graph(g, region)
        self._fn: Any = None

    @property
    def ops(self) -> list[str]:
        return [n.op for n in self.region.nodes]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self._fn is None:
            self._fn = _concrete(self._graph_def, self.region.root.name)
        import tensorflow as tf

        flat = np.asarray(x, np.float32).ravel()
        y = self._fn(tf.constant(flat))
        y = np.asarray(y[0] if isinstance(y, (list, tuple)) else y, np.float64)
        return y.reshape(np.shape(x))


def _region_graph(g: GraphIndex, region: Region) -> GraphDef:
    """The region's nodes and scalar constants, reading a Placeholder ``region_x`` [n]."""
    gd = GraphDef()
    gd.node.append(make_node("Placeholder", "region_x", [], {"dtype": np.float32,
                                                             "shape": _unknown_1d()},
                             dtype_attr=None))
    names = {n.name for n in region.nodes}
    consts: set[str] = set()
    for node in region.nodes:
        new = gd.node.add()
        new.CopyFrom(node)
        del new.input[:]
        for key in [k for k in new.attr if k.startswith("_")]:  # _output_shapes, provenance
            del new.attr[key]
        for ref in _data_inputs(node):
            src = parse_input(ref)[0]
            if src in names:
                new.input.append(ref)
            elif _key(ref) == region.x:
                new.input.append("region_x")
            else:  # a scalar constant: copied as a scalar so it broadcasts over the grid
                value = _const_value(g, ref)
                cname = f"region_const/{src}"
                if cname not in consts:
                    consts.add(cname)
                    from rewriter.ir.graph import make_const

                    gd.node.append(make_const(cname, np.asarray(value).ravel()[:1].reshape(())))
                new.input.append(cname)
    return gd


def _unknown_1d() -> Any:
    from tensorflow.core.framework import tensor_shape_pb2

    shape = tensor_shape_pb2.TensorShapeProto()
    shape.dim.add(size=-1)
    return _shape_attr(shape)


def _shape_attr(shape: Any) -> Any:
    from tensorflow.core.framework import attr_value_pb2

    av = attr_value_pb2.AttrValue()
    av.shape.CopyFrom(shape)
    return av


def _concrete(graph_def: GraphDef, output: str) -> Any:
    import tensorflow as tf

    def _import() -> None:
        tf.compat.v1.import_graph_def(graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    graph = wrapped.graph
    return wrapped.prune(feeds=[graph.as_graph_element("region_x:0")],
                         fetches=[graph.as_graph_element(f"{output}:0")])
