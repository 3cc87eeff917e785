"""Keras's negative-index wrap of an embedding lookup removed where the ids are non-negative.

Keras 3 ``Embedding`` (and ``keras.ops.take``) computes ``where(i < 0, i + n, i)`` on its integer
ids before the GATHER, so that ``-1`` means the last row. In a TFLite file that is LESS, ADD and
SELECT on int32: TFLite Micro has no SELECT kernel (the file does not load), Vela leaves the three
to the CPU, and the Edge TPU cuts the graph at the first. For ids in ``[0, n)`` the wrap is the
identity, so the rewrite returns ``i`` itself: exact on every id ``>= 0``.

When it applies (the assumption, stated per application): the ids are unsigned, or every id the
job's calibration samples give is ``>= 0`` (the samples are the user's data: ids a tokenizer
produces are row numbers ``0 .. n-1``). It is refused when a sample holds a negative id or when
there are no samples to look at. A negative id after the rewrite is no longer wrapped: TF's and
TFLite's GATHER (TFLite Micro's too) fail the invocation with an out-of-range index, ONNX's Gather
wraps it as Keras did. Nothing is computed differently for ids in ``[0, n)``.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs
from rewriter.ir.patterns import same_tensor
from rewriter.ir.ranges import has_samples, sample_values
from rewriter.rules.base import (
    ADD_OPS,
    Builder,
    Match,
    Reject,
    Rule,
    commuted,
    dtype_of,
    producer_op,
    static_value,
)


def _scalar(g: GraphIndex, ref: str) -> int | None:
    found = static_value(g, ref)
    if found is None or np.size(found[0]) != 1:
        return None
    return int(np.ravel(found[0])[0])


class GatherIndexWrap(Rule):
    """where(i < 0, i + n, i) = i for ids i >= 0 (Keras's index wrap), exact on ids >= 0."""

    name = "gather_index_wrap"
    anchors = frozenset({"Select", "SelectV2"})
    fixes = frozenset({"Less", "Select", "SelectV2", "AddV2", "Add"})
    emits = frozenset({"Identity"})
    exact = True
    family = "index_wrap"
    order = 20

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = data_inputs(node)
        if len(ins) != 3:
            return None
        cond, wrapped, ids = ins
        less = producer_op(g, cond, "Less")
        add = producer_op(g, wrapped, ADD_OPS)
        if less is None or add is None or len(data_inputs(less)) != 2:
            return None
        x, zero = data_inputs(less)
        if not same_tensor(x, ids) or _scalar(g, zero) != 0:
            return None
        for a, c in commuted(add):
            n = _scalar(g, c)
            if same_tensor(a, ids) and n is not None and n > 0:
                return Match(root=node, nodes=[node, less, add], inputs={"ids": ids},
                             extra={"n": n})
        return None

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        dt = dtype_of(m.root)
        if dt is None or dt.kind not in "iu":
            return Reject(f"dtype {dt} is not an integer (not an index wrap)", m.root.name)
        if dt.kind == "u":
            return None
        if not has_samples(g):
            return Reject("no calibration samples show the ids are >= 0 (the wrap is the "
                          "identity only on ids >= 0)", m.root.name)
        values = sample_values(g, m.inputs["ids"]) or []
        low = min((int(np.min(v)) for v in values if np.size(v)), default=None)
        if low is None:
            return Reject("the calibration samples give no ids", m.root.name)
        if low < 0:
            return Reject(f"the calibration samples hold id {low} < 0, which the wrap maps to "
                          f"row {low + m.extra['n']}: kept", m.root.name)
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        return b.op("Identity", [m.inputs["ids"]], "ids", dtype=dtype_of(m.root))


RULES = (GatherIndexWrap(),)
