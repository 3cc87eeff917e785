"""Shared pattern and builder helpers of the activation rules (ReLU6 ... GELU, Erf).

Private to the activation rule files (the catalogue skips ``_`` modules):

* :func:`flatten_product` walks a product ``c * a * b / d * -e ...`` up from a node and returns
  the scalar constant factor and the non-constant factors, so ``0.5*x*erfc(-x/sqrt2)`` matches
  in any association and operand order TF emits;
* :func:`match_gelu` recognises GELU in its erf, erfc and tanh-approximate forms;
* :func:`reciprocal_small` builds ``1/d`` for ``d >= 1`` as ``rsqrt(d)^2`` (RSQRT and MUL,
  which Vela, TFLite Micro and int8 TFLite have, unlike DIV);
* :func:`erf_tail` builds ``P(t) * exp(-z^2)`` of Abramowitz & Stegun 7.1.26;
* :func:`static_rank` reads a tensor's rank by importing the graph into TensorFlow once per
  graph (cached) for rules whose replacement depends on the rank (PReLU's alpha).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs, parse_input
from rewriter.ir.patterns import same_tensor
from rewriter.rules.base import ADD_OPS, Builder, Match, Reject, Rule, dtype_of, static_value

#: Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1/(1 + p z).
AS_P = 0.3275911
AS_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
SQRT_HALF = math.sqrt(0.5)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBIC = 0.044715
#: Float dtypes the activation rules rewrite.
FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_MAX_PRODUCT_NODES = 12


def float_dtype_reason(node: NodeDef) -> str | None:
    """Why ``node`` is not a float op these rules handle, or None."""
    dt = dtype_of(node)
    if dt is None or dt not in FLOAT_DTYPES:  # (np.dtype("float64") == None is True)
        name = "unknown to numpy (e.g. bfloat16)" if dt is None else str(dt)
        return f"dtype {name} is not a float type (float16/32/64)"
    return None


def close(value: float, want: float, rtol: float = 1e-5) -> bool:
    return abs(value - want) <= rtol * abs(want)


def single_consumer(g: GraphIndex, node: NodeDef) -> bool:
    return len(g.consumers(node.name)) == 1


def scalar_const(g: GraphIndex, ref: str) -> float | None:
    """The value of ``ref`` when it is a constant scalar (through Cast/Identity), else None;
    NaN for a constant that is not a scalar."""
    try:
        found = static_value(g, ref, limit=4)
    except (KeyError, ValueError, TypeError):  # e.g. a Cast to bfloat16, which numpy lacks
        return None
    if found is None:
        return None
    val = found[0]
    return float(val.ravel()[0]) if val.size == 1 else math.nan


def fconst(b: Builder, suffix: str, value: float) -> str:
    """A scalar Const of the builder's float dtype (float64 graphs keep float64 constants)."""
    return b.const(suffix, np.float64(value), dtype=b.dtype)


@dataclass
class Product:
    """``scale * prod(factors)``: the scalar constant and the non-constant factor tensors."""

    scale: float = 1.0
    factors: list[str] = field(default_factory=list)
    nodes: list[NodeDef] = field(default_factory=list)


def flatten_product(g: GraphIndex, node: NodeDef) -> Product | None:
    """``node`` as a product of scalar constants and factors, through Mul, Neg and division by a
    scalar constant. Inner nodes are entered only when ``node`` is their sole consumer. None
    when a non-scalar constant or more than a dozen nodes are met."""
    prod = Product()

    def scalar(ref: str) -> float | None:
        return scalar_const(g, ref)

    def visit(n: NodeDef) -> bool:
        if len(prod.nodes) >= _MAX_PRODUCT_NODES:
            return False
        prod.nodes.append(n)
        ins = data_inputs(n)
        if n.op == "Neg":
            prod.scale = -prod.scale
            return walk(ins[0])
        if n.op in ("RealDiv", "Div"):
            d = scalar(ins[1])
            if d is None or math.isnan(d) or d == 0.0:
                return False
            prod.scale /= d
            return walk(ins[0])
        return walk(ins[0]) and walk(ins[1])

    def walk(ref: str) -> bool:
        c = scalar(ref)
        if c is not None:
            if math.isnan(c):
                return False
            prod.scale *= c
            return True
        src = g.producer(ref)
        idx = parse_input(ref)[1]
        if (src is not None and idx == 0 and src.op in ("Mul", "Neg", "RealDiv", "Div")
                and single_consumer(g, src)):
            return visit(src)
        prod.factors.append(ref)
        return True

    if node.op not in ("Mul", "Neg", "RealDiv", "Div") or not visit(node):
        return None
    return prod


def linear_of(g: GraphIndex, ref: str) -> tuple[str, float, list[NodeDef]] | None:
    """``ref`` as ``k * x`` (a product with one factor): (x, k, nodes), else None."""
    node = g.producer(ref)
    if node is None:
        return None
    if node.op not in ("Mul", "Neg", "RealDiv", "Div") or not single_consumer(g, node):
        return None
    prod = flatten_product(g, node)
    if prod is None or len(prod.factors) != 1:
        return None
    return prod.factors[0], prod.scale, prod.nodes


# ------------------------------------------------------------------------------ GELU
def match_gelu(g: GraphIndex, node: NodeDef) -> Match | None:
    """GELU rooted at the final Mul, in one of the forms TF and Keras freeze:

    * ``erfc``: ``0.5 * x * erfc(-x / sqrt2)`` (Keras 3, ``tf.nn.gelu``),
    * ``erf``: ``0.5 * x * (1 + erf(x / sqrt2))`` (TF1 / hand-written / ONNX-style),
    * ``tanh``: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` (``approximate``).

    ``Match.extra["form"]`` names the form; ``Match.inputs["x"]`` is x.
    """
    if node.op != "Mul":
        return None
    prod = flatten_product(g, node)
    if prod is None or len(prod.factors) != 2 or not close(prod.scale, 0.5):
        return None
    for x, other in (prod.factors, prod.factors[::-1]):
        found = _gelu_factor(g, x, other)
        if found is not None:
            form, nodes = found
            return Match(root=node, nodes=prod.nodes + nodes, inputs={"x": x},
                         extra={"form": form})
    return None


def _gelu_factor(g: GraphIndex, x: str, ref: str) -> tuple[str, list[NodeDef]] | None:
    """The erfc(-x/sqrt2) or 1 + erf(x/sqrt2) or 1 + tanh(...) factor of a GELU of ``x``."""
    node = g.producer(ref)
    if node is None or parse_input(ref)[1] != 0:
        return None
    if node.op == "Erfc":
        lin = linear_of(g, node.input[0])
        if lin and same_tensor(lin[0], x) and close(lin[1], -SQRT_HALF):
            return "erfc", [node] + lin[2]
        return None
    if node.op not in ADD_OPS:
        return None
    for one, inner in (node.input[:2], node.input[1::-1]):
        c = scalar_const(g, one)
        fn = g.producer(inner)
        if c is None or not close(c, 1.0) or fn is None:
            continue
        if fn.op == "Erf":
            lin = linear_of(g, fn.input[0])
            if lin and same_tensor(lin[0], x) and close(lin[1], SQRT_HALF):
                return "erf", [node, fn] + lin[2]
        if fn.op == "Tanh":
            arg = _gelu_tanh_argument(g, x, fn.input[0])
            if arg is not None:
                return "tanh", [node, fn] + arg
    return None


def _gelu_tanh_argument(g: GraphIndex, x: str, ref: str) -> list[NodeDef] | None:
    """Nodes of ``sqrt(2/pi) * (x + 0.044715 * x^3)`` (x^3 as Pow(x, 3) or x*x*x)."""
    lin = linear_of(g, ref)
    if lin is None or not close(lin[1], SQRT_2_OVER_PI):
        return None
    add = g.producer(lin[0])
    if add is None or add.op not in ADD_OPS or not single_consumer(g, add):
        return None
    for a, cube in (add.input[:2], add.input[1::-1]):
        if not same_tensor(a, x):
            continue
        cnode = g.producer(cube)
        if cnode is None or not single_consumer(g, cnode):
            continue
        prod = flatten_product(g, cnode) if cnode.op != "Pow" else None
        if prod and close(prod.scale, GELU_TANH_CUBIC) and len(prod.factors) in (1, 3):
            if len(prod.factors) == 3 and all(same_tensor(f, x) for f in prod.factors):
                return lin[2] + [add] + prod.nodes
            pw = _pow3(g, x, prod.factors[0]) if len(prod.factors) == 1 else None
            if pw is not None:
                return lin[2] + [add] + prod.nodes + [pw]
    return None


def _pow3(g: GraphIndex, x: str, ref: str) -> NodeDef | None:
    node = g.producer(ref)
    if node is None or node.op != "Pow" or not single_consumer(g, node):
        return None
    if scalar_const(g, node.input[1]) != 3.0 or not same_tensor(node.input[0], x):
        return None
    return node


# ------------------------------------------------------------------------------ builders
def reciprocal_small(b: Builder, d: str, suffix: str) -> str:
    """``1/d`` for ``d >= 1`` as ``rsqrt(d) * rsqrt(d)`` (no DIV, no SQUARE)."""
    r = b.op("Rsqrt", [d], f"{suffix}_rsqrt")
    return b.op("Mul", [r, r], f"{suffix}_recip")


def erf_tail(b: Builder, abs_x: str, sq_x: str, z_scale: float) -> str:
    """``P(t) * exp(-z^2)`` of A&S 7.1.26 for ``z = z_scale * |x|``, given ``|x|`` and ``x*x``.

    ``t = 1 / (1 + p z)`` as :func:`reciprocal_small`; ``P`` by Horner's rule.
    """
    d = b.op("AddV2", [b.op("Mul", [abs_x, fconst(b, "p", AS_P * z_scale)], "pz"),
                       fconst(b, "one_d", 1.0)], "den")
    t = reciprocal_small(b, d, "t")
    h = b.op("Mul", [t, fconst(b, "a5", AS_A[4])], "h4")
    for k in (3, 2, 1, 0):
        h = b.op("AddV2", [h, fconst(b, f"a{k + 1}", AS_A[k])], f"h{k}_add")
        h = b.op("Mul", [h, t], f"h{k}")
    e = b.op("Exp", [b.op("Mul", [sq_x, fconst(b, "minus_z2", -z_scale * z_scale)], "mz2")],
             "exp")
    return b.op("Mul", [h, e], "tail")


def as_erf_float64(z: np.ndarray) -> np.ndarray:
    """The A&S 7.1.26 erf in float64 numpy (the same formula the rules build)."""
    z = np.asarray(z, np.float64)
    t = 1.0 / (1.0 + AS_P * np.abs(z))
    poly = t * (AS_A[0] + t * (AS_A[1] + t * (AS_A[2] + t * (AS_A[3] + t * AS_A[4]))))
    return np.sign(z) * (1.0 - poly * np.exp(-z * z))


# ------------------------------------------------------------------------------ shapes
_RANKS: weakref.WeakKeyDictionary[GraphIndex, dict[str, int | None]] = (
    weakref.WeakKeyDictionary())


def static_rank(g: GraphIndex, ref: str) -> int | None:
    """The static rank of tensor ``ref``, or None when TensorFlow cannot infer it.

    The whole graph is imported into TensorFlow once and the ranks cached per graph; a tensor
    created after that (by another rewrite) triggers one re-import.
    """
    name, idx, _ = parse_input(ref)
    key = f"{name}:{idx}"
    cache = _RANKS.get(g)
    if cache is None or key not in cache:
        cache = _import_ranks(g)
        _RANKS[g] = cache
    return cache.get(key)


def _import_ranks(g: GraphIndex) -> dict[str, int | None]:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(g.to_graph_def(), name="")
    return {t.name: t.shape.rank for op in graph.get_operations() for t in op.outputs}


class FloatRule(Rule):
    """A rule that refuses matches whose root does not compute in float (the shared check)."""

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        reason = float_dtype_reason(m.root)
        return Reject(reason, m.root.name) if reason else None


class UnaryFloatRule(FloatRule):
    """A rule replacing one unary op node (``anchors`` == the op); its input is ``x``.

    Targeted: in a plan it rewrites only the nodes the target was found to lack, never one the
    target runs (a Keras 3 GELU's ``Neg`` is absorbed into the converter's GELU, which Ethos-U
    runs; rewriting it broke that fusion and cost ConvNeXtTiny 64 ms of erf polynomial on the
    NPU, 165.9 ms instead of 101).
    """

    targeted = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        return Match(root=node, nodes=[node], inputs={"x": node.input[0]})


class GeluErfFormRule(FloatRule):
    """The shared match of the rules replacing an erf/erfc-form GELU (Keras 3 emits erfc).

    ``Mul`` is in ``fixes`` because the graph-level check reports a Keras 3 GELU as its final
    Mul, which the converter turns into GELU (the Erfc is absorbed into it).
    """

    anchors = frozenset({"Mul"})
    fixes = frozenset({"Erfc", "Erf", "Mul"})
    family = "gelu"
    order = 90  # before erf_poly, which would otherwise take the Erf(c) out of the GELU

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        m = match_gelu(g, node)
        return m if m is not None and m.extra["form"] in ("erf", "erfc") else None
