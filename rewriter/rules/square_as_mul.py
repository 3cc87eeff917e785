"""Square (and ``pow(x, 2)``) as ``x * x``: exact, so the int8 converter quantizes it.

The TFLite converter (TF 2.21) leaves ``SQUARE`` in float32 in full-int8 conversion
(``DEQUANTIZE -> SQUARE -> QUANTIZE``: a power spectrum ``|X|^2`` in an audio front end, the
variance of a hand-written norm), while ``MUL`` of a tensor by itself is quantized (measured:
``tf.math.pow(x, 2)``, which the converter already turns into MUL, has the same int8 error).
``Pow(x, 2)`` is matched too, so the graph-level prediction (POW, which Ethos-U and the Edge TPU
lack) agrees with the file the converter writes.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import UnaryFloatRule, scalar_const
from rewriter.rules.base import ADD_OPS, Builder, Match, Reject


class SquareAsMul(UnaryFloatRule):
    """square(x) = x * x, exact."""

    name = "square_as_mul"
    anchors = frozenset({"Square", "Pow"})
    fixes = frozenset({"Square", "Pow"})
    emits = frozenset({"Mul"})
    exact = True
    order = 120  # after the rules that take this op as part of a larger pattern (LayerNorm, GELU)
    family = "square"

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        if node.op == "Pow" and scalar_const(g, node.input[1]) != 2.0:
            return None  # another exponent: not a square
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reject = super().check(g, m)
        if reject is None and _feeds_l2_norm(g, m.root):
            return Reject("the square is part of x * rsqrt(sum(x^2)), which the converter fuses "
                          "into L2_NORMALIZATION", m.root.name)
        return reject

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        return b.op("Mul", [x, x], "out")


def _feeds_l2_norm(g: GraphIndex, node: NodeDef) -> bool:
    """``node`` -> Sum -> (Maximum/Add with eps) -> Rsqrt: the L2-normalization form the TFLite
    converter fuses (and that ``layernorm_l2norm`` emits on purpose)."""
    users = g.consumers(node.name)
    if len(users) != 1 or users[0].op != "Sum":
        return False
    nxt = g.consumers(users[0].name)
    if len(nxt) == 1 and (nxt[0].op == "Maximum" or nxt[0].op in ADD_OPS):
        nxt = g.consumers(nxt[0].name)
    return len(nxt) == 1 and nxt[0].op == "Rsqrt"


RULES = (SquareAsMul(),)
