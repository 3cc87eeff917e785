"""Headroom for int16 activations: every int16 activation range of a quantised ``.tflite``
widened by one factor, in place.

Why. A 16x8 file's activation ranges are the min/max seen on the calibration samples; an input
beyond them saturates. int8 needs those tight ranges (every bit counts); int16 has 15 bits, so
a range twice as wide costs one bit of 15 and leaves room for inputs the calibration did not
see. Measured on keras ResNet50 64x64 (``benchmarks/mixed_precision.py``'s build; 64
calibration, 32 held-back images): the converter's 16x8 file 0.7229 in LiteRT, because two
held-back images with a peaked softmax (one at 0.77) go past the calibrated ranges of up to 22
values per tensor in the last blocks (the logits reach 12 where the range ends at 8.03): 0.6411
and 0.8181 for those two, against 0.9992 and 0.9557 with float activations; with every int16
range widened 2x, 0.9630 (the float-activation bound with those weights is 0.9636).

What changes. Each int16 tensor with one scale and no constant data (an activation) gets
``scale * factor`` (zero point 0 kept: symmetric), except the outputs of SOFTMAX, LOGISTIC and
TANH, whose int16 kernels fix the output scale. Because every activation scale moves by the same
factor, the ratios between tensors that some kernels require equal stay equal; each CONV_2D /
DEPTHWISE_CONV_2D / FULLY_CONNECTED whose input was widened gets its bias (scale ``s_in * s_w``)
rescaled: its scales times ``factor``, its integers divided by ``factor`` and rounded (the
bias is int64 in 16x8: at most half a step of the new scale lost); so does an int16 constant
input of an op whose kernel needs its inputs at its output's scale (MINIMUM, MAXIMUM, e.g. the
unfused hard swish's ``min(gate, 1)``: left alone, the 1 would read as ``factor``). Kernels compute their
requantisation multipliers from these scales at prepare time, so the file computes the same
function with coarser int16 steps. Only the scale values and bias integers are rewritten, in
the flatbuffer's own bytes; int8 tensors and every other byte are left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The factor the plan search tries (one bit of int16's 15).
FACTOR = 2.0
_FIXED_OUTPUT = ("SOFTMAX", "LOGISTIC", "TANH")
_BIASED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")
#: Ops whose int16 kernels need every input at the output's quantisation (MINIMUM/MAXIMUM
#: compare raw integers): a constant input is requantised with them.
_SAME_SCALE = ("MINIMUM", "MAXIMUM", "CONCATENATION", "PACK")


def _vector(table: Any, slot: int, dtype: Any, data: bytearray) -> np.ndarray | None:
    """A writable view of a table's vector field (``slot``: its vtable offset) in ``data``."""
    o = table._tab.Offset(slot)
    if not o:
        return None
    return np.frombuffer(data, dtype, table._tab.VectorLen(o), table._tab.Vector(o))


def widen_int16(data: bytes, factor: float = FACTOR) -> bytes:
    """``data`` with its int16 activation ranges widened ``factor`` times (module docstring);
    ``data`` itself when it has no int16 activation."""
    from tensorflow.lite.python import schema_py_generated as fb

    out = bytearray(data)
    model = fb.Model.GetRootAs(out, 0)
    sub = model.Subgraphs(0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}

    def op_name(op: Any) -> str:
        code = model.OperatorCodes(op.OpcodeIndex())
        return names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")

    def constant(t: Any) -> bool:
        buf = model.Buffers(t.Buffer())
        return buf.DataLength() > 0 or buf.Offset() > 1

    ops = [sub.Operators(k) for k in range(sub.OperatorsLength())]
    fixed = {op.Outputs(0) for op in ops if op_name(op) in _FIXED_OUTPUT}
    widened: set[int] = set()
    seen: set[int] = set()  # scale vectors already scaled (a vector two tensors share)
    for i in range(sub.TensorsLength()):
        t = sub.Tensors(i)
        q = t.Quantization()
        if (t.Type() != fb.TensorType.INT16 or q is None or q.ScaleLength() != 1 or i in fixed
                or constant(t) or np.any(q.ZeroPointAsNumpy() != 0)):
            continue
        scale = _vector(q, 8, np.float32, out)  # QuantizationParameters.scale
        if scale is None:
            continue
        at = q._tab.Vector(q._tab.Offset(8))
        if at not in seen:
            scale *= np.float32(factor)
            seen.add(at)
        widened.add(i)
    if not widened:
        return data
    for op in ops:  # a same-scale op's int16 constant moves with the activations it meets
        if op_name(op) not in _SAME_SCALE or op.Outputs(0) not in widened:
            continue
        for k in range(op.InputsLength()):
            t = sub.Tensors(op.Inputs(k)) if op.Inputs(k) >= 0 else None
            q = t.Quantization() if t is not None else None
            if (t is None or t.Type() != fb.TensorType.INT16 or not constant(t) or q is None
                    or q.ScaleLength() != 1 or np.any(q.ZeroPointAsNumpy() != 0)):
                continue
            _rescale(model, t, q, np.int16, factor, out, seen)
    for op in ops:
        if (op_name(op) not in _BIASED or op.InputsLength() < 3 or op.Inputs(2) < 0
                or op.Inputs(0) not in widened):
            continue
        bt = sub.Tensors(op.Inputs(2))
        dtype = {fb.TensorType.INT32: np.int32, fb.TensorType.INT64: np.int64}.get(bt.Type())
        bq = bt.Quantization()
        buf = model.Buffers(bt.Buffer())
        if dtype is None or bq is None or not (buf.DataLength() or buf.Offset() > 1):
            continue
        _rescale(model, bt, bq, dtype, factor, out, seen)
    return bytes(out)


def _rescale(model: Any, t: Any, q: Any, dtype: Any, factor: float, data: bytearray,
             seen: set[int]) -> None:
    """Constant tensor ``t`` (quantisation ``q``) at ``factor`` times its scale, same values:
    its scales times ``factor``, its integers divided by ``factor`` and rounded, in ``data``;
    nothing when its scale vector is in ``seen`` (a vector two tensors share, already done)."""
    at = q._tab.Vector(q._tab.Offset(8))
    if at in seen:
        return
    seen.add(at)
    _vector(q, 8, np.float32, data)[:] *= np.float32(factor)
    values = _buffer(model, t, dtype, data)
    values[:] = np.rint(values / factor).astype(dtype)


def _buffer(model: Any, t: Any, dtype: Any, data: bytearray) -> np.ndarray:
    """A writable view of constant tensor ``t``'s values in ``data`` (in ``Buffer.data`` or
    stored after the flatbuffer)."""
    buf = model.Buffers(t.Buffer())
    if buf.Offset() > 1:  # stored after the flatbuffer
        start, size = buf.Offset(), buf.Size()
    else:
        start, size = buf._tab.Vector(buf._tab.Offset(4)), buf.DataLength()
    return np.frombuffer(data, dtype, size // np.dtype(dtype).itemsize, start)
