"""A matmul of two activations as a broadcast MUL and a sum over the contracted axis: exact.

``C[b, i, j] = sum_k A[b, i, k] * B[b, j, k]`` (any einsum of two operands with one contracted
label, at most one free label per operand, and batch labels) is computed per batch index
(SLICE), as one broadcast product ``P[1, i, j, k] = A[1, i, 1, k] * B[1, 1, j, k]`` (MUL) and a
sum over k with weights 1: a 1x1 CONV_2D when k is the innermost axis of P, else a
DEPTHWISE_CONV_2D whose kernel spans k. The per-batch results are concatenated back
(CONCATENATION).

This is attention (``softmax(Q K^T) V``) on targets without BATCH_MATMUL: the Edge TPU's
documented table has no BATCH_MATMUL, and its tensors may have at most 3 dimensions larger than
1, which is why the product is formed per head ([1, T, S, D]) and not for all heads at once.
P's axes follow both operands' order (a free label before or after k as it is in the operand),
so every Reshape only adds or removes 1s (no data moves; the Edge TPU warns that reshapes
regrouping dimensions might not be mapped). An operand order no layout fits (one would need a
TRANSPOSE) is refused with that reason.

Cost: one SLICE per operand, MUL and reduction per batch index: 2 * H of each for H heads.
int8: every product is rounded to int8 before the sum (BATCH_MATMUL accumulates exact int8
products in int32), and the sum is a convolution so that it requantizes once at its own scale
(a MEAN times K would not: TFLite gives a MEAN's int8 output its input's scale, steps K times
too coarse for the mean). Cosine of int8 vs float, with
``PYTHONPATH=. python benchmarks/attention_edgetpu_int8.py`` (2 heads, q, k, v ~ N(0, 1)):

    T x D    Q K^T: native / this    softmax(S) V: native / this    attention: native / this
    8 x 8    0.99956 / 0.99865       0.99943 / 0.99859              0.99969 / 0.99911
    16 x 16  0.99985 / 0.99962       0.99978 / 0.99911              0.99971 / 0.99861
    32 x 16  0.99983 / 0.99950       0.99968 / 0.99812              0.99939 / 0.99611
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules.base import Builder, Match, Reject, Rule, dtype_of, tensor_shape

BATCH_MATMUL_OPS = frozenset({"BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
#: Batch indices above this would make the graph too large to be worth it; refused.
MAX_SLICES = 64


@dataclass
class Contraction:
    """An einsum of two operands: labels of A, B and the output, and each label's size."""

    a: str
    b: str
    out: str
    sizes: dict[str, int]

    @property
    def batch(self) -> list[str]:
        return [c for c in self.out if c in self.a and c in self.b]

    @property
    def contracted(self) -> list[str]:
        return [c for c in self.a if c in self.b and c not in self.out]

    def free(self, operand: str) -> list[str]:
        other = self.b if operand == self.a else self.a
        return [c for c in operand if c in self.out and c not in other]


def _equation(node: NodeDef, ra: int, rb: int) -> tuple[str, str, str] | None:
    if node.op == "Einsum":
        eq = node.attr["equation"].s.decode().replace(" ", "")
        if "..." in eq or "->" not in eq or eq.count(",") != 1:
            return None
        lhs, out = eq.split("->")
        a, b = lhs.split(",")
        return a, b, out
    if ra != rb or ra < 2:
        return None
    batch = "".join(itertools.islice((c for c in "abcdefghopqrstuvwxyz"), ra - 2))
    adj_x = any(node.attr[k].b for k in ("adj_x",) if k in node.attr)
    adj_y = any(node.attr[k].b for k in ("adj_y",) if k in node.attr)
    return batch + ("km" if adj_x else "mk"), batch + ("nk" if adj_y else "kn"), batch + "mn"


class MatMulAsMulReduce(Rule):
    """A @ B of two activations = sum_k A[.., i, 1, k] * B[.., 1, j, k] per batch index, exact."""

    name = "matmul_as_mul_reduce"
    anchors = BATCH_MATMUL_OPS | {"Einsum"}
    fixes = BATCH_MATMUL_OPS | {"Einsum"}
    emits = frozenset({"Slice", "Reshape", "Mul", "Conv2D", "DepthwiseConv2dNative",
                       "ConcatV2"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = [r for r in node.input if not r.startswith("^")]
        if len(ins) != 2 or any(g.const_value(r) is not None for r in ins):
            return None
        return Match(root=node, nodes=[node], inputs={"a": ins[0], "b": ins[1]})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node = m.root
        if dtype_of(node) != np.dtype(np.float32):
            return Reject(f"dtype {dtype_of(node)} is not float32", node.name)
        sa, sb = tensor_shape(g, m.inputs["a"]), tensor_shape(g, m.inputs["b"])
        if sa is None or sb is None or any(d is None for d in (*sa, *sb)):
            return Reject(f"operand shapes {sa} and {sb} are not static", node.name)
        labels = _equation(node, len(sa), len(sb))
        if labels is None:
            return Reject("the equation is not a two-operand einsum without ellipsis",
                          node.name)
        a, b, out = labels
        sizes: dict[str, int] = {}
        for lab, shape in ((a, sa), (b, sb)):
            if len(lab) != len(shape) or len(set(lab)) != len(lab):
                return Reject(f"labels {lab!r} do not fit shape {list(shape)}", node.name)
            for c, d in zip(lab, shape, strict=True):
                if sizes.setdefault(c, int(d)) != int(d):
                    return Reject(f"label {c!r} has sizes {sizes[c]} and {d} (broadcast)",
                                  node.name)
        spec = Contraction(a, b, out, sizes)
        why = _unsupported_shape(spec)
        if why:
            return Reject(why, node.name)
        layout = _layout(spec)
        if layout is None:
            return Reject(f"{a},{b}->{out}: no product layout keeps both operands' axis order "
                          "(it would need a TRANSPOSE)", node.name)
        m.extra["spec"], m.extra["layout"] = spec, layout
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        spec, layout = m.extra["spec"], m.extra["layout"]
        big = [c for c in spec.batch if spec.sizes[c] > 1]
        results = {}
        for idx in itertools.product(*(range(spec.sizes[c]) for c in big)):
            at = dict(zip(big, idx, strict=True))
            tag = "_".join(f"{c}{i}" for c, i in at.items()) or "all"
            a4 = _part(b, m.inputs["a"], spec.a, spec, layout, at, f"a_{tag}")
            b4 = _part(b, m.inputs["b"], spec.b, spec, layout, at, f"b_{tag}")
            r = _sum_over(b, b.op("Mul", [a4, b4], f"product_{tag}"), spec, layout, tag)
            shape = [1 if c in spec.batch else spec.sizes[c] for c in spec.out]
            results[idx] = b.op("Reshape", [r, b.const(f"out_shape_{tag}", shape, np.int32)],
                                f"result_{tag}", attrs={"Tshape": np.int32})
        return _assemble(b, results, big, spec, ())


def _unsupported_shape(spec: Contraction) -> str | None:
    eq = f"{spec.a},{spec.b}->{spec.out}"
    only_one = [c for c in (*spec.a, *spec.b) if c not in spec.out
                and (c in spec.a) != (c in spec.b)]
    if only_one or any(c not in spec.a + spec.b for c in spec.out):
        return f"{eq}: a label summed over one operand only"
    if len(spec.contracted) != 1:
        return f"{eq}: {len(spec.contracted)} contracted labels, not 1"
    if len(spec.free(spec.a)) > 1 or len(spec.free(spec.b)) > 1:
        return f"{eq}: more than one free label in an operand"
    n = int(np.prod([spec.sizes[c] for c in spec.batch])) if spec.batch else 1
    if n > MAX_SLICES:
        return f"{eq}: {n} batch indices, more than {MAX_SLICES}"
    return None


def _layout(spec: Contraction) -> list[str | None] | None:
    """P's three axes: the free labels in output order and k where both operands' own axis
    order is kept (None marks an operand with no free label)."""
    free = [c for c in spec.out if c not in spec.batch]
    f1, f2 = (free + [None, None])[:2]
    k = spec.contracted[0]
    for layout in ([f1, f2, k], [f1, k, f2], [k, f1, f2]):
        if all(_keeps_order(op, spec, layout) for op in (spec.a, spec.b)):
            return layout
    return None


def _keeps_order(operand: str, spec: Contraction, layout: list[str | None]) -> bool:
    own = [c for c in operand if c not in spec.batch]
    return [c for c in layout if c in own] == own


def _part(b: Builder, x: str, labels: str, spec: Contraction, layout: list[str | None],
          at: dict[str, int], suffix: str) -> str:
    """The operand's slice at batch index ``at``, seen as [1, P0, P1, P2] (1s added only)."""
    if any(c in at for c in labels):
        begin = [at.get(c, 0) for c in labels]
        size = [1 if c in at else spec.sizes[c] for c in labels]
        x = b.op("Slice", [x, b.const(f"{suffix}_begin", begin, np.int32),
                           b.const(f"{suffix}_size", size, np.int32)], suffix,
                 attrs={"Index": np.int32})
    shape = [1] + [spec.sizes[c] if c is not None and c in labels else 1 for c in layout]
    return b.op("Reshape", [x, b.const(f"{suffix}_shape", shape, np.int32)], f"{suffix}_4d",
                attrs={"Tshape": np.int32})


def _sum_over(b: Builder, prod: str, spec: Contraction, layout: list[str | None],
              tag: str) -> str:
    """Sum of P over k with weights 1: a 1x1 CONV_2D when k is the innermost axis, else a
    DEPTHWISE_CONV_2D whose kernel spans k (both accumulate in int32 and requantize once; a
    MEAN would not do: TFLite gives its int8 output its input's scale, 1/K too coarse)."""
    k = spec.contracted[0]
    size, axis = spec.sizes[k], layout.index(k) + 1
    attrs = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
             "dilations": [1, 1, 1, 1]}
    if axis == 3:
        return b.op("Conv2D", [prod, b.const(f"ones_{tag}", np.ones((1, 1, size, 1)))],
                    f"sum_{tag}", attrs=attrs)
    depth = spec.sizes[layout[2]] if layout[2] is not None else 1  # P's innermost axis
    kernel = np.ones((size, 1, depth, 1) if axis == 1 else (1, size, depth, 1))
    return b.op("DepthwiseConv2dNative", [prod, b.const(f"ones_{tag}", kernel)], f"sum_{tag}",
                attrs=attrs)


def _assemble(b: Builder, results: dict, big: list[str], spec: Contraction,
              prefix: tuple[int, ...]) -> str:
    """Concatenate the per-index results along each batch axis, outermost label first."""
    if len(prefix) == len(big):
        return results[prefix]
    c = big[len(prefix)]
    parts = [_assemble(b, results, big, spec, (*prefix, i)) for i in range(spec.sizes[c])]
    axis = b.const(f"concat_axis_{c}_{len(prefix)}", spec.out.index(c), np.int32)
    return b.op("ConcatV2", [*parts, axis], f"concat_{c}_{'_'.join(map(str, prefix)) or 'all'}",
                attrs={"N": len(parts), "Tidx": np.int32})


RULES = (MatMulAsMulReduce(),)
