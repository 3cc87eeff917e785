"""Post-conversion repairs of a full-int8 ``.tflite``, each exact and measured on a real model.

:func:`int8_output_moves`: the TFLite converter (TF 2.21) sometimes leaves a pure data-movement
op in float right before a graph output, ``int8 T -> DEQUANTIZE -> RESHAPE (float32) -> output``,
even with int8 input/output requested. Measured on the trained Basic Pitch model the
``basic-pitch`` wheel ships (``models/third_party/basic_pitch_nmp``): its ``note`` posteriorgram
is a sigmoid that feeds both the ``note`` output's RESHAPE and, requantised, the concatenation of
the onset branch; the output RESHAPE is left in float and the output is float32, so the Edge
TPU's compiler cuts the graph at the DEQUANTIZE and Vela runs both ops on the CPU. The converter
also undoes graph-level workarounds (a reshape moved before the sigmoid is moved back). A RESHAPE
(or SQUEEZE, EXPAND_DIMS) moves values without changing them, so reading ``T`` directly and
giving the output ``T``'s scale and zero point is the same tensor: the dequantised int8 output
equals the float output of the original file bit for bit (``tests/test_tflite_fixups.py``).
"""

from __future__ import annotations

from typing import Any

#: TFLite builtin ops that move values without changing them (same scale in, same scale out).
MOVES = frozenset({"RESHAPE", "SQUEEZE", "EXPAND_DIMS"})


def int8_output_moves(data: bytes) -> tuple[bytes, list[str]]:
    """``data`` with every float output move of an int8 tensor made int8 (see the module
    docstring); the names of the outputs repaired ([] and ``data`` unchanged when none)."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    names = {i: flatbuffer_utils.opcode_to_name(model, i) for i in range(len(model.operatorCodes))}
    repaired: list[str] = []
    for sub in model.subgraphs:
        producer = {t: op for op in sub.operators for t in op.outputs}
        readers: dict[int, int] = {}
        for op in sub.operators:
            for t in op.inputs:
                if t >= 0:
                    readers[t] = readers.get(t, 0) + 1
        dead: list[Any] = []
        for out in list(sub.outputs):
            move = producer.get(out)
            if move is None or names[move.opcodeIndex] not in MOVES:
                continue
            if sub.tensors[out].type != fb.TensorType.FLOAT32 or readers.get(out):
                continue
            deq = producer.get(move.inputs[0])
            if deq is None or names[deq.opcodeIndex] != "DEQUANTIZE":
                continue
            source = sub.tensors[deq.inputs[0]]
            if source.type not in (fb.TensorType.INT8, fb.TensorType.UINT8):
                continue
            move.inputs[0] = deq.inputs[0]
            tensor = sub.tensors[out]
            tensor.type = source.type
            tensor.quantization = _copy_quantization(source.quantization)
            readers[deq.outputs[0]] -= 1
            if readers[deq.outputs[0]] == 0 and deq.outputs[0] not in sub.outputs:
                dead.append(deq)
            repaired.append(_name(tensor))
        for op in dead:
            sub.operators.remove(op)
    if not repaired:
        return data, []
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), repaired


def _copy_quantization(q: Any) -> Any:
    from tensorflow.lite.python import schema_py_generated as fb

    new = fb.QuantizationParametersT()
    new.scale = list(q.scale) if q.scale is not None else None
    new.zeroPoint = list(q.zeroPoint) if q.zeroPoint is not None else None
    new.min = list(q.min) if q.min is not None else None
    new.max = list(q.max) if q.max is not None else None
    new.quantizedDimension = q.quantizedDimension
    return new


def _name(tensor: Any) -> str:
    name = tensor.name
    return name.decode() if isinstance(name, bytes) else str(name)
