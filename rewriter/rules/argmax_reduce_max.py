"""Arg-max over the last axis with ops the Edge TPU maps (it has no ARG_MAX): a fused arg-max.

``argmax(x) = N - max_i(rev_i - rev_i * min(m - x_i, d) / d)`` with ``m = max(x)`` over the axis,
``rev = [N, N-1, ..., 1]`` and ``d`` one int8 step of ``m - x`` (its widest row on the calibration
samples, over 255). Ops: REDUCE_MAX, SUB, MINIMUM, MUL, SUB, REDUCE_MAX, SUB, all on the Edge TPU.
The idea is onnx2tf's ``--replace_argmax_to_reducemax_*`` (its float form takes ``d`` = 1e-6,
which an int8 file quantizes to 0: every entry then scores its ``rev`` and the answer is 0).

The bound. In int8, ``m - x`` is a whole number of steps and ``d`` is exactly one, so each entry
scores its ``rev`` at the maximum and 0 elsewhere: the answer is the first index of the int8
maximum, what ARG_MAX answers on the same int8 logits. In float an entry within ``d`` of the
maximum scores a fraction of its larger ``rev``: the first index of the maximum whenever no other
entry is that close, else a value between the close entry's index and the maximum's. Stated as
``max_abs_error`` N - 1 (an index) over the input range [0, spread of a row].

The index comes out as a float tensor (an int8 output in the file) holding 0 .. N-1: read it as
``round(dequantize(q))`` (the job's comparison does); the output's dtype changes from int to
float. Keras 3's -0.0 prologue before the ArgMax (``argmax_signed_zero_fold``, whose ArgMax
the Edge TPU lacks) is taken away with it, exact as that rule states. Only where the arg-max
is read as a model output (a consumer of the integer index would need a CAST, which the Edge
TPU lacks).
"""
from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, data_inputs, tf_dtype
from rewriter.ir.ranges import sample_values
from rewriter.rules.argmax_signed_zero_fold import ArgmaxSignedZeroFold
from rewriter.rules.base import (
    Bound,
    Builder,
    Match,
    Reject,
    Rule,
    dtype_of,
    producer_op,
    static_value,
    tensor_shape,
)

_PROLOGUE = ArgmaxSignedZeroFold()
#: The int8 steps of a full-range tensor: ``d`` is the logits' calibration range over this.
INT8_STEPS = 255.0


class ArgmaxReduceMax(Rule):
    """argmax(x) = N - max(rev - rev * min(max(x) - x, d) / d), d one int8 step of max(x) - x;
    in int8 ARG_MAX's answer on the same logits; in float exact unless an entry is within d."""

    name = "argmax_reduce_max"
    anchors = frozenset({"ArgMax"})
    fixes = frozenset({"ArgMax", *ArgmaxSignedZeroFold.fixes})
    emits = frozenset({"Max", "Sub", "Minimum", "Mul"})
    exact = False
    bound = Bound(float("inf"), (-float("inf"), float("inf")),
                  "application states its own bound")
    needs_range = True
    family = "argmax"
    order = 110  # after argmax_signed_zero_fold where both are planned

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        ins = data_inputs(node)
        axis = static_value(g, ins[1]) if len(ins) == 2 else None
        if axis is None:
            return None
        keras = _PROLOGUE.pattern(g, node)  # Keras 3's -0.0 prologue goes with the ArgMax
        if keras is not None:
            if _PROLOGUE.check(g, keras) is not None:
                return None
            x, nodes = keras.inputs["x"], keras.nodes
        elif producer_op(g, ins[0], "SelectV2") is None:
            x, nodes = ins[0], [node]
        else:
            return None
        return Match(root=node, nodes=nodes, inputs={"x": x},
                     consts={"axis": np.asarray(axis[0]).reshape(-1)})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        node, x = m.root, m.inputs["x"]
        shape = tensor_shape(g, x)
        if shape is None or not shape or shape[-1] is None:
            return Reject(f"input shape {shape} has no static last axis", node.name)
        if int(m.consts["axis"][0]) not in (-1, len(shape) - 1):
            return Reject(f"axis {int(m.consts['axis'][0])} is not the last axis", node.name)
        src = g.producer(x)
        if src is not None and dtype_of(src) not in (None, np.dtype(np.float32)):
            return Reject(f"input dtype {dtype_of(src)} is not float32", node.name)
        readers = [c for c in g.consumers(node.name) if c.op not in ("Identity", "NoOp")]
        if readers:
            return Reject(f"the index is read by {readers[0].op} {readers[0].name}: the float "
                          "index would need a CAST there", node.name)
        xs = sample_values(g, x)
        spread = max((float(np.max(v.max(-1) - v.min(-1))) for v in xs or []), default=0.0)
        if not spread > 0.0:
            return Reject(f"no calibration values for {x} (or rows without spread): d, one "
                          "int8 step of max(x) - x, comes from them", node.name)
        n, step = int(shape[-1]), spread / INT8_STEPS
        m.extra.update(n=n, step=step)
        m.bound = Bound(float(n - 1), (0.0, spread),
                        f"in int8 the arg-max of the file's int8 logits (the first of a tie, as "
                        f"ARG_MAX); in float the first index of the maximum unless another entry "
                        f"is within d = {step:.4g} of it (one int8 step of max(x) - x, whose "
                        f"calibration range is the input range stated), then a value between that "
                        "entry's index and the maximum's")
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        x, n, step = m.inputs["x"], m.extra["n"], m.extra["step"]
        axis = b.const("axis", np.array([-1], np.int32), np.int32)
        top = b.op("Max", [x, axis], "row_max", attrs={"keep_dims": True, "Tidx": np.int32})
        gap = b.op("Minimum", [b.op("Sub", [top, x], "gap"), b.const("step", step)], "clip")
        rev = np.arange(n, 0, -1, dtype=np.float64)
        score = b.op("Sub", [b.const("rev", rev),
                             b.op("Mul", [gap, b.const("rev_per_step", rev / step)], "off")],
                     "score")
        best = b.op("Max", [score, axis], "best", attrs={"keep_dims": False, "Tidx": np.int32})
        for reader in g.consumers(m.root.name):  # the output's Identity now passes a float
            if "T" in reader.attr:
                reader.attr["T"].type = tf_dtype(np.float32)
        return b.op("Sub", [b.const("n", float(n)), best], "index")


RULES = (ArgmaxReduceMax(),)
