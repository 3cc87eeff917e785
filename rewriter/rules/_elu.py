"""Recognising ELU (shared by the ELU rules): TF's ``Elu`` (alpha = 1) and Keras 3's
``ELU(alpha)``, frozen as ``SelectV2(Greater(x, 0), Elu(x), alpha * Elu(x))``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Match, Rule, const_operand, producer_op, static_value

SELECT_OPS = frozenset({"SelectV2", "Select"})
ELU_ANCHORS = frozenset({"Elu"}) | SELECT_OPS


@dataclass
class Elu:
    """``alpha * (exp(x) - 1)`` for x <= 0, ``x`` above."""

    x: str
    alpha: float
    nodes: list[NodeDef]


def match_elu(g: GraphIndex, node: NodeDef) -> Elu | None:
    """The ELU rooted at ``node`` (an Elu, or the Select of an ELU with alpha), or None."""
    if node.op == "Elu":
        if any(_alpha_select(g, c) is not None for c in g.consumers(node.name)
               if c.op in SELECT_OPS):
            return None  # the Select around it is the root of the whole ELU(alpha)
        return Elu(node.input[0], 1.0, [node])
    if node.op in SELECT_OPS:
        return _alpha_select(g, node)
    return None


def _alpha_select(g: GraphIndex, sel: NodeDef) -> Elu | None:
    if len(sel.input) < 3:
        return None
    cond, t, e = sel.input[:3]
    greater = producer_op(g, cond, "Greater")
    elu = producer_op(g, t, "Elu")
    mul = producer_op(g, e, "Mul")
    if greater is None or elu is None or mul is None:
        return None
    zero = static_value(g, greater.input[1])
    scaled = const_operand(g, mul)
    if (greater.input[0] != elu.input[0] or zero is None or np.any(zero[0] != 0)
            or scaled is None or scaled[0] != t or scaled[1].size != 1):
        return None
    return Elu(elu.input[0], float(np.ravel(scaled[1])[0]), [sel, greater, mul, elu])


class EluRule(Rule):
    """The shared match of the ELU rules: TF's ``Elu`` or Keras' Select form with its alpha."""

    anchors = ELU_ANCHORS
    fixes = frozenset({"Elu", "SelectV2", "Greater"})
    family = "elu"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        elu = match_elu(g, node)
        if elu is None:
            return None
        return Match(root=node, nodes=elu.nodes, inputs={"x": elu.x}, extra={"alpha": elu.alpha})
