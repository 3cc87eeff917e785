"""Keras 3's ``argmax`` prologue folded away: ``argmax(where(x == 0 and signbit(x), -tiny, x))``
is ``argmax(x)`` but for a signed-zero tie, exact for finite inputs otherwise.

Keras 3 (TF backend) maps ``-0.0`` to ``-float32.tiny`` before ``tf.argmax`` so that ``-0.0``
ranks below ``+0.0``: ``Equal(x, 0)``, ``Bitcast`` to int32, ``BitwiseAnd`` with the sign bit,
``Less(., 0)``, ``LogicalAnd``, ``SelectV2``. None of those six runs on the Edge TPU or the
Ethos-U55 (Bitcast and BitwiseAnd have no TFLite builtin at all). The select changes only
``-0.0`` entries, to ``-1.18e-38``, which is below every positive value and above every negative
normal one, as ``-0.0`` is: so the arg-max is the same index unless the row's maximum is 0 held by a
``-0.0`` before a ``+0.0`` (then Keras answers the ``+0.0`` and ``argmax(x)`` the first zero) or a
negative subnormal competes with ``-0.0``. Those two are the whole statement; an int8 file has no
signed zero at all.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.rules.base import Builder, Match, Reject, Rule, producer_op, static_value

_COND_OPS = ("Equal", "Bitcast", "BitwiseAnd", "Less", "LogicalAnd")


def _cond_nodes(g: GraphIndex, ref: str, x: str, out: list[NodeDef]) -> bool:
    """Whether ``ref`` is computed from ``x`` and constants through the prologue's ops only."""
    if ref == x or static_value(g, ref) is not None:
        return True
    node = producer_op(g, ref, _COND_OPS)
    if node is None or len(out) > 8:
        return False
    out.append(node)
    return all(_cond_nodes(g, r, x, out) for r in data_inputs(node))


class ArgmaxSignedZeroFold(Rule):
    """argmax(where(x is -0.0, -tiny, x)) = argmax(x) (Keras 3's prologue), exact but for a
    signed-zero tie."""

    name = "argmax_signed_zero_fold"
    anchors = frozenset({"ArgMax"})
    fixes = frozenset({"SelectV2", "Equal", "Bitcast", "BitwiseAnd", "Less", "LogicalAnd"})
    emits = frozenset({"ArgMax"})
    exact = True
    family = "argmax_prologue"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        select = producer_op(g, node.input[0], "SelectV2")
        if select is None:
            return None
        cond, t, x = data_inputs(select)
        tiny = static_value(g, t)
        if tiny is None or static_value(g, x) is not None:
            return None
        inner: list[NodeDef] = []
        if not _cond_nodes(g, cond, x, inner) or "Bitcast" not in {n.op for n in inner}:
            return None
        return Match(root=node, nodes=[node, select, *inner],
                     inputs={"x": x, "axis": data_inputs(node)[1]},
                     consts={"tiny": np.asarray(tiny[0], np.float64)})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        tiny = m.consts["tiny"]
        if tiny.size != 1 or not (-np.finfo(np.float32).tiny <= float(tiny) <= 0.0):
            return Reject(f"the select's constant {float(np.max(tiny)):.4g} is not -0.0's "
                          "stand-in (0 > v >= -float32.tiny)", m.nodes[1].name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return b.copy_of(m.root, [m.inputs["x"], m.inputs["axis"]], "argmax")


RULES = (ArgmaxSignedZeroFold(),)
