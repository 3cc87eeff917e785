"""The square of a square root cancels: ``square(layout(sqrt(x)))`` becomes ``layout(x)``.

A spectrogram front end takes a magnitude ``sqrt(re^2 + im^2)`` and then, for a power or
decibel scale, squares it again (Basic Pitch's CQT: ``Sqrt -> Transpose -> Square -> +eps -> Log``
and a per-example min/max normalisation of that log). Neither SQRT nor SQUARE is an int8
accelerator op; fitting the square root with ramps leaves an absolute error near 0 that the log
then magnifies without limit (Basic Pitch: 7.0 after ``Log``, 30 at its per-clip ``Min``).
Cancelling the pair removes both ops and the error: ``sqrt(x)^2 == x`` for every ``x >= 0``, up
to float32 rounding of the two roundings removed (at most 2 ulp); where ``x < 0`` the original is
NaN. Layout ops between the two (Transpose, Reshape, Identity, ExpandDims, Squeeze) are applied
to ``x`` instead, in the same order. Exact.

Matched only when nothing else reads the square root or the layout ops (a consumer that only
asks a shape, ``Shape``/``Size``/``Rank``, reads the replacement instead: same shape).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.rules._activation import FloatRule, scalar_const
from rewriter.rules.base import Builder, Match, Reject

#: Ops that only move elements, so they commute with an elementwise function.
LAYOUT = frozenset({"Transpose", "Reshape", "Identity", "ExpandDims", "Squeeze"})
#: Consumers that read only the shape of a tensor.
SHAPE_ONLY = frozenset({"Shape", "Size", "Rank"})


class SquareOfSqrt(FloatRule):
    """square(layout(sqrt(x))) = layout(x) for x >= 0, exact."""

    name = "square_of_sqrt"
    anchors = frozenset({"Square", "Pow"})
    fixes = frozenset({"Square", "Pow", "Sqrt"})
    emits = frozenset({"Transpose", "Reshape"})  # the layout ops it re-applies to x, if any
    exact = True
    order = 110  # before square_as_mul (120), which would take the square alone
    family = "square_of_sqrt"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        if node.op == "Pow" and scalar_const(g, node.input[1]) != 2.0:
            return None
        chain: list[NodeDef] = []
        ref = node.input[0]
        while True:
            name, port, ctrl = parse_input(ref)
            prev = g.nodes.get(name)
            if prev is None or port != 0 or ctrl:
                return None
            if prev.op == "Sqrt":
                break
            if prev.op not in LAYOUT:
                return None
            chain.append(prev)
            ref = prev.input[0]
        chain.reverse()  # sqrt's consumer first
        return Match(root=node, nodes=[prev, *chain, node], inputs={"x": prev.input[0]},
                     extra={"sqrt": prev, "chain": chain})

    def _safe_to_replace(self, g: GraphIndex, m: Match) -> Reject | None:
        """The generic check, except that a reader of only the shape of the square root or of a
        layout op (a ``Shape`` the target runs, so nothing folded it) is allowed: :meth:`rewrite`
        points it at the replacement, which has the same shape."""
        inside = {n.name for n in m.nodes}
        for node in m.nodes[:-1]:  # the square root and the layout ops (the root is last)
            for user in g.consumers(node.name):
                if user.name not in inside and user.op not in SHAPE_ONLY:
                    return Reject(f"{node.op} {node.name} is also read by {user.name}, "
                                  "outside the pattern: the square root is still needed",
                                  node.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        out, outs = m.inputs["x"], []
        for node in m.extra["chain"]:
            out = b.copy_of(node, [out, *node.input[1:]], node.op.lower())
            outs.append(out)
        # what else reads a removed node only asks its shape: the replacement has the same one
        for node, repl in zip([m.extra["sqrt"], *m.extra["chain"]], [m.inputs["x"], *outs],
                              strict=True):
            g.redirect(node.name, repl)
        return out


RULES = (SquareOfSqrt(),)
