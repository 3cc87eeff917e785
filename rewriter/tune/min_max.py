"""A MINIMUM the AI Edge Quantizer leaves float made integer: the plan's file runs it on the NPU.

Why. The AI Edge Quantizer (0.10.0) has MAXIMUM in its policy but not MINIMUM: every plan leaves
each MINIMUM float between a DEQUANTIZE and a QUANTIZE, 3 CPU ops under Vela. MobileNetV3Large
with its 21 hard swishes unfused (``hard_swish_unfused``: ``x * min(max(x/6 + 1/2, 0), 1)``, as
Ethos-U and the converter have no 16x8 HARD_SWISH) had 63 CPU ops in every plan of
``--accuracy`` (21 x DEQUANTIZE, MINIMUM, QUANTIZE), even the all-int8 one, while the
converter's own int8 and 16x8 files of the same graph have 0: no plan could be delivered on
Ethos-U.

What changes. ``DEQUANTIZE a -> MINIMUM(., c) -> QUANTIZE m`` becomes ``MINIMUM(a', c') -> m``
with every operand at ``m``'s quantisation (its calibrated output range, and type: int8 or
int16 as the op reading it), as the converter writes MINIMUM and as TFLite's integer kernel
(which compares raw integers) and Vela's constraint ("Both Input quantization parameters must
match OFM quantization parameters") need. ``a'``: the producer's own output, requantised to
``m`` by the producer itself when it is an op that requantises anyway (ADD, SUB, MUL, the
convolutions and FULLY_CONNECTED) and nothing else reads it; else the DEQUANTIZE becomes a
QUANTIZE to ``m``. ``c'``: the float constant quantised at ``m`` (a new tensor: one constant is
shared by many MINIMUMs). Other QUANTIZE readers of the float output read ``m``.

Exact but for rounding: clamping and rounding to ``m`` are monotone, and monotone maps commute
with min, so ``min(q(a), q(c)) = q(min(a, c))``; ``a`` is quantised straight at ``m`` (one
rounding, not two: the producer's range was wider, e.g. the hard swish's ``x/6 + 1/2`` up to
1.38 where the gate ``m`` ends at 1). A constant past ``m``'s range saturates at its end, exact
within that range; a file whose int16 ranges are widened afterwards
(:func:`rewriter.tune.headroom.widen_int16`) then reads the constant at that end, not at its own
value (MobileNetV3Large: every gate's calibrated range ends at 1, the constant, so none does).
"""

from __future__ import annotations

import copy
from collections.abc import Collection
from typing import Any

import numpy as np

from rewriter.tune.flatbuffer_index import Index

#: Producers whose output scale is theirs to choose (they requantise their accumulator), so
#: writing straight at the MINIMUM's quantisation costs nothing.
_REQUANTISING = ("ADD", "SUB", "MUL", "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


def integer_minimum(data: bytes, keep: Collection[str] = ()) -> bytes:
    """``data`` with each float MINIMUM between DEQUANTIZE(s) and QUANTIZE(s) made integer
    (module docstring); ``data`` itself when there is none. ``keep``: scopes the plan put in
    float, left alone."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    ix = Index.of(model)
    sub, code, constant, made_by, readers = ix.sub, ix.code, ix.constant, ix.made_by, ix.readers
    integer = (fb.TensorType.INT8, fb.TensorType.INT16)
    drop: list[Any] = []
    for op in sub.operators:
        if code(op) != "MINIMUM" or fu.get_op_scope(op, sub.tensors) in keep:
            continue
        out = op.outputs[0]
        after = readers.get(out, [])
        if (sub.tensors[out].type != fb.TensorType.FLOAT32 or out in ix.graph_io or not after
                or not all(code(r) == "QUANTIZE" for r in after)):
            continue
        fed = [t for t in op.inputs if not constant(t)]
        deqs = [made_by.get(t) for t in fed]
        if not fed or not all(d is not None and code(d) == "DEQUANTIZE"
                              and sub.tensors[d.inputs[0]].type in integer for d in deqs):
            continue
        if not all(ix.only_read_by(t, op) for t in fed):
            continue  # a dequantised input something else reads as float
        first = after[0]
        m = sub.tensors[first.outputs[0]]
        if (m.type not in integer or first.outputs[0] in ix.graph_io
                or m.quantization is None or len(m.quantization.scale) != 1):
            continue
        for k, t in enumerate(op.inputs):
            if constant(t):
                op.inputs[k] = _constant_at(model, sub, t, m)
                continue
            deq = made_by[t]
            a = deq.inputs[0]
            producer = made_by.get(a)
            if (ix.only_read_by(a, deq) and producer is not None and code(producer) in _REQUANTISING
                    and sub.tensors[a].type == m.type):
                sub.tensors[a].quantization = copy.deepcopy(m.quantization)
                op.inputs[k] = a
                drop.append(deq)
            else:  # requantise to m (a QUANTIZE where the DEQUANTIZE was)
                deq.opcodeIndex = first.opcodeIndex
                deq.builtinOptionsType, deq.builtinOptions = 0, None
                sub.tensors[t].type = m.type
                sub.tensors[t].quantization = copy.deepcopy(m.quantization)
        op.outputs[0] = first.outputs[0]
        drop.append(first)
        for r in after[1:]:
            r.inputs[0] = first.outputs[0]
    if not drop:
        return data
    sub.operators = [op for op in sub.operators if all(op is not d for d in drop)]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _constant_at(model: Any, sub: Any, t: int, like: Any) -> int:
    """A new constant tensor: float constant ``t`` quantised at ``like``'s type and
    quantisation (saturating at its ends); its index."""
    from tensorflow.lite.python import schema_py_generated as fb

    src = sub.tensors[t]
    values = np.frombuffer(bytes(bytearray(model.buffers[src.buffer].data)), np.float32)
    q = like.quantization
    scale, zero = float(q.scale[0]), int(q.zeroPoint[0]) if q.zeroPoint is not None else 0
    dtype = np.int8 if like.type == fb.TensorType.INT8 else np.int16
    info = np.iinfo(dtype)
    ints = np.clip(np.rint(values / scale) + zero, info.min, info.max).astype(dtype)
    buf = fb.BufferT()
    buf.data = np.frombuffer(ints.tobytes(), np.uint8)
    model.buffers.append(buf)
    new = fb.TensorT()
    new.name = (src.name or b"") + (b"_int8" if dtype is np.int8 else b"_int16")
    new.shape = copy.copy(src.shape)
    new.shapeSignature = copy.copy(src.shapeSignature)
    new.type, new.buffer = like.type, len(model.buffers) - 1
    new.quantization = copy.deepcopy(q)
    sub.tensors.append(new)
    return len(sub.tensors) - 1
