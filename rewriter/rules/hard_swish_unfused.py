"""HardSwish ``x * relu6(x + 3) / 6`` as ``x * min(max(x/6 + 1/2, 0), 1)``, which TFLite leaves
unfused.

Same function (relu6(x+3)/6 = clip(x/6 + 1/2, 0, 1)). TF 2.21's converter fuses
``x * relu6(x+3) / 6``, ``x * relu6(x+3) * (1/6)`` and ``x * (relu6(x+3) * (1/6))`` into
HARD_SWISH, which the Edge TPU lacks (google-coral/edgetpu#272: MobileNetV3 is cut at its first
HARD_SWISH). The clip written with min/max on ``x/6 + 1/2`` is not a pattern it knows: the file
keeps ADD (with the max fused as its ReLU), MINIMUM and MUL, float and int8 (checked by the test).
Of the unfused spellings this one quantizes best: the gate lives in [0, 1] at full int8
resolution. Measured on an 8-layer conv / hard-swish stack in full int8 (1 - cosine vs float):
HARD_SWISH kernel 1.0e-4, this form 1.5e-4, ``(x/6) * relu6(x+3)`` 2.9e-4. Matches every
association of the product: Keras 3 ``Mul(x, RealDiv(Relu6(AddV2(x, 3)), 6))``, tf_keras
``Mul(x, Mul(Relu6(x + 3), 1/6))``, ``RealDiv(Mul(x, Relu6(x + 3)), 6)``.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import FloatRule, close, fconst, flatten_product
from rewriter.rules._activation import same_tensor as _same
from rewriter.rules.base import RULE_ATTR, Builder, Match
from rewriter.rules.hard_sigmoid_min_max import relu6_of_x_plus_3


class HardSwishUnfused(FloatRule):
    """x * relu6(x + 3) / 6 = x * min(max(x/6 + 1/2, 0), 1), a form TFLite does not re-fuse, exact."""

    name = "hard_swish_unfused"
    anchors = frozenset({"Mul", "RealDiv", "Div"})
    #: Mul: the graph-level check reports the hard swish's final Mul as the op the converter
    #: turns into HARD_SWISH; RealDiv/Div: the op-type level (no fusion prediction) sees DIV.
    fixes = frozenset({"Mul", "RealDiv", "Div"})
    emits = frozenset({"Mul", "AddV2", "Maximum", "Minimum"})
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
        t = b.op("AddV2", [b.op("Mul", [x, fconst(b, "sixth", 1.0 / 6.0)], "scaled"),
                           fconst(b, "half", 0.5)], "shifted")
        gate = b.op("Minimum", [b.op("Maximum", [t, fconst(b, "zero", 0.0)], "floor"),
                                fconst(b, "one", 1.0)], "gate")
        return b.op("Mul", [x, gate], "out")


RULES = (HardSwishUnfused(),)
