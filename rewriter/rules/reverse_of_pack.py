"""reverse(pack(x_0, ..., x_n-1), axis) = pack(x_n-1, ..., x_0), exact.

Reversing a tensor along the axis it was packed on is packing the same tensors in the other
order; a Transpose in between only moves that axis. A Keras ``Bidirectional`` layer with
``return_sequences=True`` reverses its backward half in time (``ReverseV2``), and once rule
``while_unroll`` has unrolled the loop that half is a ``Pack`` of the steps: the Edge TPU has no
REVERSE_V2, but it has PACK and TRANSPOSE. Pure data movement, so exact.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.rules.base import Builder, Match, Reject, Rule, static_value, tensor_shape

_THROUGH = frozenset({"Identity", "Snapshot", "Transpose"})


class ReverseOfPack(Rule):
    """ReverseV2 along the packed axis of a Pack (through Transposes) -> Pack reversed, exact."""

    name = "reverse_of_pack"
    anchors = frozenset({"ReverseV2"})
    fixes = frozenset({"ReverseV2"})
    emits = frozenset({"Pack", "Transpose"})
    exact = True

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        shape = tensor_shape(g, node.input[0])
        axes = static_value(g, node.input[1])
        if shape is None or axes is None:
            return None
        rank = len(shape)
        reversed_axes = {int(a) % rank for a in np.ravel(axes[0])}
        if len(reversed_axes) != 1:
            return None
        axis = reversed_axes.pop()
        chain: list[NodeDef] = []  # Transposes between the Pack and the ReverseV2, top first
        ref = node.input[0]
        for _ in range(8):
            producer = g.producer(ref)
            if producer is None or parse_input(ref)[1] != 0:
                return None
            if producer.op == "Pack":
                if producer.attr["axis"].i % rank != axis:
                    return None
                return Match(root=node, nodes=[node], inputs={"pack": producer.name},
                             extra={"pack": producer, "chain": chain[::-1]})
            if producer.op not in _THROUGH:
                return None
            if producer.op == "Transpose":
                perm = static_value(g, producer.input[1])
                if perm is None:
                    return None
                axis = int(np.ravel(perm[0])[axis])  # output axis -> the input axis it holds
                chain.append(producer)
            ref = producer.input[0]
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        pack: NodeDef = m.extra["pack"]
        items = [r for r in pack.input if not r.startswith("^")]
        out = b.copy_of(pack, items[::-1], "pack_reversed")
        for i, transpose in enumerate(m.extra["chain"]):
            out = b.copy_of(transpose, [out, transpose.input[1]], f"transpose_{i}")
        return out


RULES = (ReverseOfPack(),)
