"""Keras 3 HardSigmoid ``relu6(x + 3) / 6`` as ``min(relu(x/6 + 0.5), 1)``: exact.

``relu6(x + 3)/6 = clip((x + 3)/6, 0, 1) = clip(x/6 + 1/2, 0, 1)``. Keras 3 freezes
``RealDiv(Relu6(AddV2(x, 3)), 6)``; DIV is missing on the Edge TPU and Ethos-U55. Not to be
confused with the Keras 2 / ONNX HardSigmoid ``clip(0.2 x + 0.5, 0, 1)``, a different function
(slope 0.2, saturating at |x| = 2.5, not 3), which this rule does not match (its frozen form
has no Relu6 and no division). The clip is spelt with RELU and MINIMUM, not RELU6, so that
``x * hard_sigmoid(x)`` cannot be fused into HARD_SWISH by the converter (checked: MUL, ADD,
MINIMUM remain).
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import (
    FloatRule,
    close,
    fconst,
    flatten_product,
    scalar_const,
)
from rewriter.rules.base import ADD_OPS, Builder, Match


def relu6_of_x_plus_3(g: GraphIndex, ref: str) -> tuple[str, list[NodeDef]] | None:
    """``ref`` as ``Relu6(x + 3)``: (x, [relu6, add]) or None."""
    relu6 = g.producer(ref)
    if relu6 is None or relu6.op != "Relu6":
        return None
    add = g.producer(relu6.input[0])
    if add is None or add.op not in ADD_OPS:
        return None
    for x, c in (add.input[:2], add.input[1::-1]):
        val = scalar_const(g, c)
        if val is not None and close(val, 3.0) and scalar_const(g, x) is None:
            return x, [relu6, add]
    return None


class HardSigmoidMinMax(FloatRule):
    """relu6(x + 3) / 6 = min(relu(x/6 + 1/2), 1) (Keras 3 hard_sigmoid), exact."""

    name = "hard_sigmoid_min_max"
    anchors = frozenset({"RealDiv", "Div"})
    fixes = frozenset({"RealDiv", "Div"})
    emits = frozenset({"Mul", "AddV2", "Relu", "Minimum"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        prod = flatten_product(g, node)
        if prod is None or len(prod.factors) != 1 or not close(prod.scale, 1.0 / 6.0):
            return None
        found = relu6_of_x_plus_3(g, prod.factors[0])
        if found is None:
            return None
        return Match(root=node, nodes=prod.nodes + found[1], inputs={"x": found[0]})

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        y = b.op("Mul", [m.inputs["x"], fconst(b, "sixth", 1.0 / 6.0)], "scaled")
        y = b.op("Relu", [b.op("AddV2", [y, fconst(b, "half", 0.5)], "shifted")], "relu")
        return b.op("Minimum", [y, fconst(b, "one", 1.0)], "out")


RULES = (HardSigmoidMinMax(),)
