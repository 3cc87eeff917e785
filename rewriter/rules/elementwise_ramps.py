"""Any elementwise function of one tensor, as a sum of clamped ramps fitted on its input's range.

The generic fallback for activations and float islands a target cannot run in int8: the
elementwise region around an unsupported node (:mod:`rewriter.rules._region`: e.g. SELU's
Greater/Exp/Select, Keras 3 ``celu``'s Maximum/Minimum/RealDiv/Expm1, ``log_sigmoid``'s
Neg/Softplus/Neg, a Mish's Softplus/Tanh/Mul) is evaluated as the original graph computes it,
fitted on the range its input takes on the calibration data, and rebuilt with CONV_2D, RELU6,
RESHAPE, RELU, MUL and ADD (:mod:`rewriter.rules._unary`), which the Edge TPU, Ethos-U (Vela)
and TFLite Micro all run in int8. Approximate: each application states its bound, the largest
``|fit - f|`` over the fitted range (the observed range widened by 10%), e.g. "14 ramps fitted
to Greater/Exp/Mul/SelectV2 on [-3.2, 4.1], the range of conv/BiasAdd:0 over 32 calibration
samples: max abs error 3.1e-3". A discontinuous function (``threshold``, ``hard_shrink``) is
fitted with one ramp 2e-6 of the fitted range wide across each jump (``_unary.JUMP_WIDTH``), so
its bound is about the jump itself, met only by inputs within that width of the threshold; the
ramp's int8 requantisation multiplier is about 3.3e3, below the 2^15 the kernels take.

The rule is *targeted*: it starts only from the nodes the plan found unsupported, since every
elementwise op would otherwise be a candidate. Exact rules for the same ops come first.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._region import ELEMENTWISE, RegionFunction, grow_region
from rewriter.rules._unary import RampRule, UnaryFunction
from rewriter.rules.base import Match, Reject, tensor_shape

#: Ops that are never the reason a target fails (plumbing), so never a seed. A Cast can be: a
#: Cast from bool to float32 stays float in an int8 file (``x * cast(x > t)``, ThresholdedReLU),
#: a float island TFLite Micro refuses (``rewriter.targets.predict._cast_to_float``).
_NOT_SEEDS = frozenset({"Identity"})


class ElementwiseRamps(RampRule):
    """f(x) ~= a*x + (c-a)*relu(x) + sum_k (dv_k/6) relu6(6 (x - t_k)/w_k) + v_0, fitted."""

    name = "elementwise_ramps"
    anchors = ELEMENTWISE - _NOT_SEEDS
    fixes = ELEMENTWISE - _NOT_SEEDS
    targeted = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        region = grow_region(g, node, skip_rule=self.name)
        if region is None:
            return None
        return Match(root=region.root, nodes=region.nodes, inputs={"x": region.x},
                     extra={"region": region})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        shape_in, shape_out = tensor_shape(g, m.inputs["x"]), tensor_shape(g, m.root.name)
        if shape_in != shape_out:  # a splat constant broadcast the input to a larger shape
            return Reject(f"output shape {shape_out} differs from input shape {shape_in}",
                          m.root.name)
        return super().check(g, m)

    def function(self, g: GraphIndex, m: Match) -> UnaryFunction:
        fn = RegionFunction(g, m.extra["region"])
        name = "/".join(dict.fromkeys(op for op in fn.ops if op != "Identity"))
        return UnaryFunction(name, fn, None, None)


RULES = (ElementwiseRamps(),)
