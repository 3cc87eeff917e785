"""Structural matching over a :class:`~rewriter.ir.graph.GraphIndex`: the helpers every pattern
uses (a producer of a given op, both orders of a commutative op, a constant operand), and the
patterns that both a rule and the converter-fusion prediction need (:func:`find_prelu`).

Rules reach these through :mod:`rewriter.rules.base`; :mod:`rewriter.targets.predict` uses them
directly, so predicting the converter needs no rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs, node_dtype, parse_input
from rewriter.ir.static_eval import static_value

#: Commutative binary ops whose two inputs may appear in either order.
COMMUTATIVE_OPS = frozenset({"Mul", "Add", "AddV2", "Maximum", "Minimum", "SquaredDifference"})
#: The two spellings of addition in TF graphs; match both.
ADD_OPS = frozenset({"Add", "AddV2"})


def dtype_of(node: NodeDef) -> np.dtype | None:
    """The element dtype the node computes in (attr ``T``/``dtype``), or None."""
    return node_dtype(node)


def producer_op(g: GraphIndex, ref: str, ops: str | Iterable[str]) -> NodeDef | None:
    """The producer of ``ref`` when its op is one of ``ops`` (a data edge, output 0), else None."""
    ops = {ops} if isinstance(ops, str) else set(ops)
    name, idx, ctrl = parse_input(ref)
    node = g.nodes.get(name)
    if node is None or ctrl or idx != 0 or node.op not in ops:
        return None
    return node


def commuted(node: NodeDef) -> list[tuple[str, str]]:
    """The (a, b) input orders to try for a binary node: both orders when it is commutative."""
    ins = data_inputs(node)
    if len(ins) != 2:
        return []
    a, b = ins
    return [(a, b), (b, a)] if node.op in COMMUTATIVE_OPS else [(a, b)]


def const_operand(g: GraphIndex, node: NodeDef) -> tuple[str, np.ndarray] | None:
    """For a binary node with exactly one constant input: (the other input, the constant)."""
    for a, c in commuted(node):
        val = g.const_value(c)
        if val is not None and g.const_value(a) is None:
            return a, val
    return None


def same_tensor(a: str, b: str) -> bool:
    """``a`` and ``b`` name the same tensor (``x`` and ``x:0`` do)."""
    na, ia, _ = parse_input(a)
    nb, ib, _ = parse_input(b)
    return na == nb and ia == ib


@dataclass
class Prelu:
    """Keras's PReLU, ``Add(Relu(x), Mul(c, Relu(Neg(x))))`` with a constant ``c`` (= -alpha):
    its nodes (the add first), the input ``x``, ``c`` and the tensor holding it."""

    nodes: list[NodeDef]
    x: str
    neg_alpha: np.ndarray
    alpha_ref: str


def find_prelu(g: GraphIndex, node: NodeDef) -> Prelu | None:
    """The PReLU whose add is ``node``, either order of every commutative op, else None."""
    for pos_ref, neg_ref in commuted(node):
        pos = producer_op(g, pos_ref, "Relu")
        mul = producer_op(g, neg_ref, "Mul")
        if pos is None or mul is None:
            continue
        for relu_ref, c_ref in commuted(mul):
            found = static_value(g, c_ref)
            c = None if found is None else found[0]
            relu = producer_op(g, relu_ref, "Relu")
            neg = relu is not None and producer_op(g, relu.input[0], "Neg")
            if c is None or not neg or not same_tensor(neg.input[0], pos.input[0]):
                continue
            return Prelu([node, pos, mul, relu, neg, *_neg_of_const(g, c_ref)], pos.input[0],
                         np.asarray(c), c_ref)
    return None


def _neg_of_const(g: GraphIndex, ref: str) -> list[NodeDef]:
    """Keras's ``Neg(alpha)``: part of the pattern (the rewrite replaces it) when alone."""
    neg = producer_op(g, ref, "Neg")
    return [neg] if neg is not None and len(g.consumers(neg.name)) == 1 else []
