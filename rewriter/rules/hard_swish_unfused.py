"""HardSwish ``x * relu6(x + 3) / 6`` as ``(x * 1/6) * relu6(x + 3)``, which TFLite leaves unfused.

Same function (the constant moves onto x). TF 2.21's converter fuses ``x * relu6(x+3) / 6``,
``x * relu6(x+3) * (1/6)`` and their min/max spellings into HARD_SWISH, which the Edge TPU lacks
(google-coral/edgetpu#272: MobileNetV3 is cut at its first HARD_SWISH). Scaling x *first* is not
a pattern it knows: the file keeps MUL, MUL and an ADD with a fused RELU6 (float and int8,
checked by the test). Matches every association of the product: Keras 3
``Mul(x, RealDiv(Relu6(AddV2(x, 3)), 6))``, tf_keras ``Mul(x, Mul(Relu6(x + 3), 1/6))``,
``RealDiv(Mul(x, Relu6(x + 3)), 6)``.
"""

from __future__ import annotations

from rewriter.graph import GraphIndex, NodeDef
from rewriter.rules._activation import FloatRule, close, fconst, flatten_product
from rewriter.rules._activation import same_tensor as _same
from rewriter.rules.base import RULE_ATTR, Builder, Match
from rewriter.rules.hard_sigmoid_min_max import relu6_of_x_plus_3


class HardSwishUnfused(FloatRule):
    """x * relu6(x + 3) / 6 = (x/6) * relu6(x + 3), in a form TFLite does not re-fuse, exact."""

    name = "hard_swish_unfused"
    anchors = frozenset({"Mul", "RealDiv", "Div"})
    #: Mul: the graph-level check reports the hard swish's final Mul as the op the converter
    #: turns into HARD_SWISH; RealDiv/Div: the op-type level (no fusion prediction) sees DIV.
    fixes = frozenset({"Mul", "RealDiv", "Div"})
    emits = frozenset({"Mul", "AddV2", "Relu6"})
    exact = True
    order = 90  # before hard_sigmoid_min_max, whose pattern is inside this one

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        if RULE_ATTR in node.attr and node.attr[RULE_ATTR].s.decode() == self.name:
            return None  # our own output has the same shape; leave it
        prod = flatten_product(g, node)
        if prod is None or len(prod.factors) != 2 or not close(prod.scale, 1.0 / 6.0):
            return None
        for x, r in (prod.factors, prod.factors[::-1]):
            found = relu6_of_x_plus_3(g, r)
            if found is not None and _same(found[0], x):
                return Match(root=node, nodes=prod.nodes + found[1], inputs={"x": x})
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x = m.inputs["x"]
        scaled = b.op("Mul", [x, fconst(b, "sixth", 1.0 / 6.0)], "scaled")
        gate = b.op("Relu6", [b.op("AddV2", [x, fconst(b, "three", 3.0)], "plus3")], "relu6")
        return b.op("Mul", [scaled, gate], "out")


RULES = (HardSwishUnfused(),)
