"""concat(x_0, ..., x_n-1) = concat(concat(x_0..x_9), concat(x_10..x_19), ...), exact.

Concatenating along one axis is associative: the concatenation of consecutive groups of the
operands, concatenated along the same axis, holds the same elements in the same order. TFLite
Micro's CONCATENATION kernel takes at most 10 inputs (``kMaxInputNum`` in its
``concatenation.cc``; the model fails to load otherwise), and a model that stacks many frames,
octaves or heads concatenates more; the rule builds a tree of concatenations of at most
:data:`GROUP` inputs each. Pure data movement, so exact in float; in int8 each inner
concatenation gets its own output scale, and the outer one requantizes its inputs to the common
output scale as the single concatenation did (tests measure the int8 difference).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule

#: Inputs per concatenation after the rewrite (TFLite Micro's limit).
GROUP = 10


class ConcatSplit(Rule):
    """ConcatV2 of more than 10 operands -> a tree of ConcatV2 of at most 10, exact."""

    name = "concat_split"
    anchors = frozenset({"ConcatV2"})
    fixes = frozenset({"ConcatV2"})
    emits = frozenset({"ConcatV2"})
    exact = True
    targeted = True  # only the concatenations the target refuses

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        refs = [r for r in node.input if not r.startswith("^")]
        items, axis = refs[:-1], refs[-1]
        if len(items) <= GROUP:
            return None
        return Match(root=node, nodes=[node], inputs={f"x{i}": r for i, r in enumerate(items)},
                     extra={"items": items, "axis": axis})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        if g.const_value(m.extra["axis"]) is None:
            return Reject("the concatenation axis is not a constant", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        items, depth = list(m.extra["items"]), 0
        while len(items) > GROUP:
            items = [self._concat(g, m, b, items[i:i + GROUP], f"part{depth}_{i // GROUP}")
                     for i in range(0, len(items), GROUP)]
            depth += 1
        return self._concat(g, m, b, items, "joined")

    @staticmethod
    def _concat(g: GraphIndex, m: Match, b: Builder, items: list[str], suffix: str) -> str:
        if len(items) == 1:
            return items[0]
        ref = b.copy_of(m.root, [*items, m.extra["axis"]], suffix)
        g[ref].attr["N"].i = len(items)
        return ref


RULES = (ConcatSplit(),)
