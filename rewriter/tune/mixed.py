"""Mixed precision in one ``.tflite``: chosen ops with int16 activations (16x8) or in float, the
rest int8, quantised by Google's AI Edge Quantizer (``ai-edge-quantizer``) from a float file.

Why this engine. The TFLite converter has one precision per file (``TFLITE_BUILTINS_INT8`` or
``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``); its
``QuantizationDebugger(denylisted_nodes=...)`` can only leave chosen nodes in *float*, which on
Ethos-U is a CPU island (Vela runs no float op). The AI Edge Quantizer (0.10.0, installs next to
TF 2.21 and ai-edge-litert 2.3.0 without changing them) takes a per-op recipe (a regex over the
op's output tensor names) with ``a8w8`` or ``a16w8`` per op, and inserts the int8<->int16
requantising QUANTIZE ops between them. Measured: a Conv-Conv-Dense model with the middle conv
in 16x8 compiles with Vela 5.2 for ethos-u55-128 at 0 CPU ops (the QUANTIZE int8<->int16 runs
on the NPU) and runs in TFLite Micro with the same outputs as in LiteRT
(``tests/test_mixed_precision.py``). Its input/output is integer (no QUANTIZE/DEQUANTIZE on the
CPU), as the job's converter files are: the input int16 when an op reading it is in 16x8, else
int8 (:func:`io_recipe`), each output the type of the op that makes it; or float input and output
(``float_io``, the job's ``--float-io``). Ops it does not quantise stay float (it left LOG float);
:func:`float_ops` lists them so a plan with a float op is judged as a CPU island.

An op is named by its *scope*: its output tensor names joined by ``;`` with a trailing ``;`` (the
quantizer's own key, from Model Explorer); a recipe entry matches exactly that scope.
"""

from __future__ import annotations

import contextlib
import copy
import io
import re
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.tune.flatbuffer_index import Index, op_name
from rewriter.tune.min_max import integer_minimum

#: Precisions a plan can give an op: int8 (the default), ``16x8`` (int16 activations, int8
#: weights), ``float`` (left unquantised: a float island on the host where the target has one).
PRECISIONS = ("int8", "16x8", "float")

_WEIGHTS = {"num_bits": 8, "symmetric": True, "granularity": "CHANNELWISE", "dtype": "INT"}


def _op_config(bits: int) -> dict[str, Any]:
    act = {"num_bits": bits, "symmetric": bits == 16, "granularity": "TENSORWISE", "dtype": "INT"}
    return {"activation_tensor_config": act, "weight_tensor_config": dict(_WEIGHTS),
            "compute_precision": "INTEGER", "explicit_dequantize": False,
            "skip_checks": False, "min_weight_elements": 0}


def recipe(precisions: Mapping[str, str]) -> list[dict[str, Any]]:
    """The quantizer recipe: every op int8, then each scope of ``precisions`` at its precision
    (later entries win in the quantizer's recipe manager)."""
    out = [{"regex": ".*", "operation": "*", "algorithm_key": "min_max_uniform_quantize",
            "op_config": _op_config(8)}]
    for scope, prec in precisions.items():
        if prec not in PRECISIONS:
            raise ValueError(f"precision {prec!r} not one of {PRECISIONS}")
        if prec == "int8":
            continue
        entry = {"regex": "^" + re.escape(scope) + "$", "operation": "*"}
        if prec == "float":
            entry.update(algorithm_key="no_quantize", op_config={})
        else:
            entry.update(algorithm_key="min_max_uniform_quantize", op_config=_op_config(16))
        out.append(entry)
    return out


def io_recipe(precisions: Mapping[str, str], ops: Sequence[Op], inputs: Collection[str],
              float_io: bool = False) -> list[dict[str, Any]]:
    """The recipe entries for the graph's input and output (the quantizer's virtual ``INPUT``
    and ``OUTPUT`` ops, one for all inputs, one for all outputs), after :func:`recipe`'s.

    Integer I/O: the input is int16 when an op reading a graph input (``inputs``: their tensor
    names) is in 16x8, so that op reads the sample at 16 bits; else int8 (the recipe's default).
    The quantizer's own default quantises the input as int8 whatever reads it, and a 16x8 first
    op then reads it through an int8 -> int16 QUANTIZE: the input keeps 256 levels (MobileNetV2
    64x64 all in 16x8, LiteRT, 32 held-back images: cosine 0.9780 against the converter's int16-
    input 16x8 file's 0.9885, benchmarks/results/precision_bounds.md). Outputs need no entry:
    each already has the type of the op making it. With several inputs, one int16 input makes
    them all int16 (one virtual op); an int8 op reading one gets it through a QUANTIZE int16 ->
    int8, which requantises the same calibrated range.

    ``float_io``: float input and output (the quantizer adds the QUANTIZE at the input; the
    DEQUANTIZE at an int16 output it omits, :func:`dequantize_outputs` adds it)."""
    if float_io:
        return [{"regex": ".*", "operation": key, "algorithm_key": "no_quantize", "op_config": {}}
                for key in ("INPUT", "OUTPUT")]
    wide = any(precisions.get(op.scope) == "16x8" and set(op.inputs) & set(inputs)
               for op in ops)
    if not wide:
        return []
    return [{"regex": ".*", "operation": "INPUT", "algorithm_key": "min_max_uniform_quantize",
             "op_config": _op_config(16)}]


@dataclass(frozen=True)
class Op:
    """One operator of the float file: its index, builtin name and scope."""

    index: int
    op: str
    scope: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...]


def ops_of(data: bytes) -> list[Op]:
    """The operators of a ``.tflite`` (subgraph 0) with their scopes, in execution order."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    sub = model.subgraphs[0]

    def tname(i: int) -> str:
        n = sub.tensors[i].name
        return n.decode() if isinstance(n, bytes) else str(n)

    out = []
    for k, op in enumerate(sub.operators):
        code = model.operatorCodes[op.opcodeIndex]
        builtin = str(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)))
        out.append(Op(k, op_name(model, op, builtin), fu.get_op_scope(op, sub.tensors),
                      tuple(tname(i) for i in op.outputs if i >= 0),
                      tuple(tname(i) for i in op.inputs if i >= 0)))
    return out


def graph_inputs(data: bytes) -> list[str]:
    """The names of a ``.tflite``'s graph input tensors (subgraph 0)."""
    from tensorflow.lite.python import schema_py_generated as fb

    sub = fb.Model.GetRootAs(data, 0).Subgraphs(0)
    return [sub.Tensors(sub.Inputs(i)).Name().decode() for i in range(sub.InputsLength())]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The AI Edge Quantizer's own output (tqdm bars on stderr, model sizes on stdout) dropped:
    a job tries tens of plans, and stdout is the report under --json. Its errors still raise."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


class MixedQuantizer:
    """Quantise one float ``.tflite`` under many plans; calibrated once.

    ``calibration``: samples keyed by the float file's signature input names.
    ``int16_reduce_max``: the target runs REDUCE_MAX on int16 (:func:`integer_reduce_max`).
    ``float_io``: float input and output, else integer (:func:`io_recipe`).
    """

    def __init__(self, float_tflite: bytes, calibration: Sequence[Mapping[str, np.ndarray]],
                 signature: str = "serving_default", int16_reduce_max: bool = False,
                 float_io: bool = False) -> None:
        from ai_edge_quantizer import calibrator, quantizer
        from ai_edge_quantizer.utils import qsv_utils

        self._tmp = tempfile.TemporaryDirectory(prefix="rewriter-mixed-")
        self.float_path = Path(self._tmp.name) / "float.tflite"
        self.float_path.write_bytes(float_tflite)
        self.ops = ops_of(float_tflite)
        self.inputs = graph_inputs(float_tflite)
        self.float_io = float_io
        self.int16_reduce_max = int16_reduce_max
        self._q = quantizer.Quantizer(str(self.float_path))
        self._q.load_quantization_recipe(recipe({}))
        # Min/max over every sample, as the TFLite converter calibrates (the quantizer's default
        # is a moving average of per-sample ranges, 0.95 smoothing, which narrows them: outputs
        # of held-back inputs were clipped at half their value on the test model).
        calib = calibrator.Calibrator(float_tflite, num_threads=1,
                                      qsv_update_func=qsv_utils.min_max_update)
        with quiet():
            calib.calibrate({signature: [dict(s) for s in calibration]},
                            self._q._recipe_manager)
        self._stats = calib.get_model_qsvs()

    def build(self, precisions: Mapping[str, str], inline: bool = True,
              quantizer_io: bool = False) -> bytes:
        """The ``.tflite`` of a plan: ``precisions`` maps op scopes to ``16x8``/``float``; every
        other op int8; integer input/output, int16 where a 16x8 op reads or makes it, or float
        (``float_io``, :func:`io_recipe`). Its constants are inside the flatbuffer
        (:func:`inline_buffers`), so TFLite Micro runs it, and a REDUCE_MAX the quantizer left
        float is integer (:func:`integer_reduce_max`), its int16 ADD/SUB computed with their
        calibrated scales (:func:`general_int16_add`), a MINIMUM it left float integer
        (:func:`rewriter.tune.min_max.integer_minimum`); ``inline=False`` gives the quantizer's
        own bytes (large buffers stored by offset, REDUCE_MAX and MINIMUM float, no DEQUANTIZE after an
        int16 output with ``float_io``), for diagnosis;
        ``quantizer_io=True`` the quantizer's own input and output (int8 input), for comparison."""
        io = [] if quantizer_io else io_recipe(precisions, self.ops, self.inputs, self.float_io)
        self._q.load_quantization_recipe(recipe(precisions) + io)
        with quiet():  # its progress bars and model sizes, once per plan tried
            data = bytes(self._q.quantize(self._stats).quantized_model)
        if not inline:
            return data
        # inlined first: the object API that rewrites the file drops offset-stored buffers
        data = inline_buffers(data)
        if self.float_io and not quantizer_io:
            data = dequantize_outputs(data)
        floats = {s for s, p in precisions.items() if p == "float"}
        data = integer_minimum(general_int16_add(data), floats)
        return integer_reduce_max(data, floats, self.int16_reduce_max)

    def close(self) -> None:
        self._tmp.cleanup()


def general_int16_add(data: bytes) -> bytes:
    """The file with each int16 ADD and SUB marked ``pot_scale_int16 = false``, as the TFLite
    converter's 16x8 files mark them; ``data`` itself when none is left true.

    Why. The AI Edge Quantizer (0.10.0) leaves the schema's default, true: where the ADD's scales
    are all powers of two (within ``CheckedLog2``'s tolerance, as a range of exactly [-1, 1] or
    [0, 2] gives), LiteRT then takes its power-of-two int16 path (``kernels/add.cc``), which
    refuses an input scale above the output's: MobileNetV3Large's Rescaling ADD ([0, 2] -> [-1,
    1]) with every op in 16x8 did not load ("add.cc:228 data->input1_shift <= 0 was not true"),
    and every plan of ``--accuracy`` with that ADD promoted failed on ethos-u55-128. With false,
    LiteRT takes its general int16 path, the converter's, as TFLite Micro and Vela do whatever the
    flag. Exact: the flag selects the kernel, no tensor or scale changes."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    sub = model.subgraphs[0]
    kinds = {fb.BuiltinOperator.ADD: (fb.BuiltinOptions.AddOptions, fb.AddOptionsT),
             fb.BuiltinOperator.SUB: (fb.BuiltinOptions.SubOptions, fb.SubOptionsT)}
    changed = False
    for op in sub.operators:
        c = model.operatorCodes[op.opcodeIndex]
        kind = kinds.get(max(int(c.builtinCode), int(c.deprecatedBuiltinCode)))
        if kind is None or sub.tensors[op.outputs[0]].type != fb.TensorType.INT16:
            continue
        if op.builtinOptions is None:
            op.builtinOptionsType, op.builtinOptions = kind[0], kind[1]()
        if op.builtinOptions.potScaleInt16:
            op.builtinOptions.potScaleInt16 = False
            changed = True
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)) if changed else data


def dequantize_outputs(data: bytes) -> bytes:
    """The file with a DEQUANTIZE to float after each integer graph output (the output then is
    the DEQUANTIZE's float tensor, under the old name); ``data`` itself when every output is
    float. Why: the AI Edge Quantizer (0.10.0) given float output (``no_quantize`` on its
    ``OUTPUT``) adds the DEQUANTIZE after an int8 output but leaves an int16 one int16. Exact:
    the DEQUANTIZE is the runtime's own ``(q - zero_point) * scale``, what the caller of an
    integer output computes."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    sub = model.subgraphs[0]
    todo = [k for k, t in enumerate(sub.outputs)
            if sub.tensors[t].type in (fb.TensorType.INT8, fb.TensorType.INT16)]
    if not todo:
        return data
    code = next((i for i, c in enumerate(model.operatorCodes)
                 if max(int(c.builtinCode), int(c.deprecatedBuiltinCode))
                 == fb.BuiltinOperator.DEQUANTIZE), None)
    if code is None:
        c = fb.OperatorCodeT()
        c.builtinCode = c.deprecatedBuiltinCode = fb.BuiltinOperator.DEQUANTIZE
        c.version = 1
        model.operatorCodes.append(c)
        code = len(model.operatorCodes) - 1
    moved = {}
    for k in todo:
        src = sub.tensors[sub.outputs[k]]
        empty = fb.BufferT()
        model.buffers.append(empty)
        out = fb.TensorT()
        out.name, src.name = src.name, (src.name or b"") + b"_int"
        out.shape, out.shapeSignature = copy.copy(src.shape), copy.copy(src.shapeSignature)
        out.type, out.buffer = fb.TensorType.FLOAT32, len(model.buffers) - 1
        sub.tensors.append(out)
        op = fb.OperatorT()
        op.opcodeIndex, op.inputs = code, [sub.outputs[k]]
        op.outputs = [len(sub.tensors) - 1]
        sub.operators.append(op)
        moved[sub.outputs[k]] = len(sub.tensors) - 1
        sub.outputs[k] = len(sub.tensors) - 1
    for sig in model.signatureDefs or []:
        for t in sig.outputs or []:
            t.tensorIndex = moved.get(t.tensorIndex, t.tensorIndex)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def integer_reduce_max(data: bytes, keep: Collection[str] = (), int16: bool = False) -> bytes:
    """The file with each float REDUCE_MAX the quantizer left between a DEQUANTIZE and QUANTIZEs
    made integer: REDUCE_MAX reads the DEQUANTIZE's integer input, writes a tensor with that
    input's type and quantisation, and the QUANTIZEs requantise it (the DEQUANTIZE goes when
    nothing else reads it); ``data`` itself when there is none. ``keep``: scopes the plan put in
    float, left alone. An int16 input (its producer in 16x8) is read as int16 only when ``int16``
    (the target has an int16 REDUCE_MAX: Vela does, TFLite Micro's takes float32 and int8 only);
    else the DEQUANTIZE becomes a QUANTIZE int16 -> int8 at the REDUCE_MAX's output range
    (:func:`_narrow`) and the REDUCE_MAX runs in int8 (it stayed float: a float island that the
    tflm table refuses, 3 unsupported ops in Basic Pitch's delivered plan).

    Why. The AI Edge Quantizer (0.10.0) has no REDUCE_MAX in its policy: every plan leaves it
    float with a DEQUANTIZE before it and a QUANTIZE after, 3 CPU ops under Vela (Basic Pitch's
    ``normalized_log/Max``: every plan of ``--accuracy`` had ``cpu_ops 3`` and none could be
    delivered on Ethos-U, whose own int8 file runs REDUCE_MAX on the NPU). Exact: dequantising
    is monotone increasing (scale > 0), so the max of the integers dequantises to the max of the
    dequantised values; only the QUANTIZE's requantisation (integer instead of float arithmetic)
    may round one step apart."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    ix = Index.of(model)
    sub, code, made_by, readers = ix.sub, ix.code, ix.made_by, ix.readers
    drop, changed = [], False
    for op in sub.operators:
        if code(op) != "REDUCE_MAX" or fu.get_op_scope(op, sub.tensors) in keep:
            continue
        src, out = op.inputs[0], op.outputs[0]
        deq = made_by.get(src)
        if (deq is None or code(deq) != "DEQUANTIZE"
                or sub.tensors[out].type != fb.TensorType.FLOAT32 or out in ix.graph_io
                or not all(code(r) == "QUANTIZE" for r in readers.get(out, []))):
            continue
        a = deq.inputs[0]
        if (sub.tensors[a].type == fb.TensorType.INT16 and not int16 and ix.only_read_by(src, op)
                and readers.get(out)):
            _narrow(deq, sub.tensors[src], op, sub.tensors[out],
                    sub.tensors[readers[out][0].outputs[0]], readers[out][0].opcodeIndex)
            changed = True
            continue
        if sub.tensors[a].type not in ((fb.TensorType.INT8, fb.TensorType.INT16) if int16
                                       else (fb.TensorType.INT8,)):
            continue
        t = sub.tensors[out]
        t.type = sub.tensors[a].type
        t.quantization = copy.deepcopy(sub.tensors[a].quantization)
        op.inputs[0] = a
        changed = True
        if ix.only_read_by(src, op):
            drop.append(deq)
    if not changed:
        return data
    sub.operators = [op for op in sub.operators if all(op is not d for d in drop)]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _narrow(deq: Any, src: Any, op: Any, out: Any, read: Any, quantize: int) -> None:
    """REDUCE_MAX ``op`` in int8 where its input is int16 and the target has no int16 one: the
    DEQUANTIZE ``deq`` (int16 -> float ``src``) becomes a QUANTIZE (opcode index ``quantize``)
    to int8 at the quantisation of ``read`` (the first QUANTIZE after the max: its calibrated
    output range; derived symmetric from it when that is int16), and ``out`` takes it too.
    Exact but for rounding: clamping and rounding are monotone, so the max of the int8 values is
    the int8 of the max; the QUANTIZEs after it requantise int8."""
    from tensorflow.lite.python import schema_py_generated as fb

    q = copy.deepcopy(read.quantization)
    if read.type == fb.TensorType.INT16:  # symmetric int16 -> the same range in int8
        q.scale = [float(v) * 32767.0 / 127.0 for v in q.scale]
        q.zeroPoint = [0 for _ in q.scale]
    deq.opcodeIndex = quantize
    deq.builtinOptionsType, deq.builtinOptions = 0, None
    for t in (src, out):
        t.type, t.quantization = fb.TensorType.INT8, copy.deepcopy(q)


#: Alignment of constant data in the flatbuffer (the schema's ``force_align: 16`` on
#: ``Buffer.data``, which the TFLite converter honours and Python's object API does not).
_ALIGN = 16


def offset_buffers(data: bytes) -> int:
    """How many buffers of a ``.tflite`` keep their bytes after the flatbuffer (``Buffer.offset`` /
    ``size``, the >2 GB model form) instead of in ``Buffer.data``."""
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.Model.GetRootAs(data, 0)
    return sum(model.Buffers(i).Offset() > 1 for i in range(model.BuffersLength()))


def inline_buffers(data: bytes) -> bytes:
    """The same model with every constant's bytes inside the flatbuffer (``Buffer.data``, 16-byte
    aligned), none stored by offset; ``data`` itself when no buffer is.

    Why. The AI Edge Quantizer (0.10.0, ``model_modifier._serialize_model``) writes every buffer
    of 1 KiB or more after the flatbuffer, addressed by ``Buffer.offset``/``size``, once those
    buffers total 256 KiB. LiteRT reads that form; TFLite Micro does not: its allocator
    (``micro_allocator.cc`` ``GetFlatbufferTensorBuffer``) looks only at ``Buffer.data``, so
    every such weight and bias becomes an arena tensor nothing writes (read as zeros here). The
    model then computes on zeros, and with 1000 classes the int8 SOFTMAX aborts: its
    ``TFLITE_CHECK`` on the reciprocal's exponent (``reference/softmax.h``) fails once the row's
    sum of exp reaches 512, as 512 tied logits do. Vela 5.2's compiler reads the form (the same
    command file from both forms). Exact: the bytes are copied; LiteRT gives bit-identical
    outputs on both forms (``tests/test_mixed_precision.py``)."""
    if not offset_buffers(data):
        return data
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    class _Aligned(fb.BufferT):
        def Pack(self, builder: Any) -> int:  # noqa: N802 (the flatbuffers API's name)
            vec = None
            if self.data is not None:
                raw = bytes(self.data)
                builder.StartVector(1, len(raw), _ALIGN)
                builder.head -= len(raw)
                builder.Bytes[builder.head:builder.head + len(raw)] = raw
                vec = builder.EndVector()
            fb.BufferStart(builder)
            if vec is not None:
                fb.BufferAddData(builder, vec)
            return fb.BufferEnd(builder)

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    buffers = []
    for buf in model.buffers:
        new = _Aligned()
        if buf.offset > 1:
            new.data = data[buf.offset:buf.offset + buf.size]
        elif buf.data is not None:
            new.data = np.asarray(buf.data, np.uint8).tobytes()
        buffers.append(new)
    model.buffers = buffers
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def tensor_dtypes(data: bytes) -> dict[str, int]:
    """Count of activation tensors by dtype name in a ``.tflite`` (constants excluded)."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    names = {v: k for k, v in vars(fb.TensorType).items() if not k.startswith("_")}
    sub = model.subgraphs[0]
    counts: dict[str, int] = {}
    for t in sub.tensors:
        buf = model.buffers[t.buffer] if t.buffer < len(model.buffers) else None
        if buf is not None and buf.data is not None and len(buf.data):
            continue
        name = names.get(t.type, str(t.type)).lower()
        counts[name] = counts.get(name, 0) + 1
    return counts


def float_ops(data: bytes) -> list[str]:
    """The ops of a quantised file that compute in float (a float input or output that is not a
    graph input/output's QUANTIZE/DEQUANTIZE pair end)."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    sub = model.subgraphs[0]
    out = []
    for op in sub.operators:
        name = op_name(model, op)
        if name in ("QUANTIZE", "DEQUANTIZE"):
            continue
        if any(sub.tensors[i].type == fb.TensorType.FLOAT32 for i in op.outputs if i >= 0):
            out.append(name)
    return out


#: Weight operand (input 1) and its per-channel axis, for the ops whose weights int8 quantises
#: per channel (the TFLite converter's and the quantizer's scheme).
_WEIGHT_AXIS = {"CONV_2D": 0, "FULLY_CONNECTED": 0, "DEPTHWISE_CONV_2D": 3}


def int8_weights_only(data: bytes) -> tuple[bytes, int]:
    """The float ``.tflite`` with its conv/dense weights rounded to int8, symmetric per output
    channel (scale = the channel's max |w| / 127), activations left float; and how many weight
    tensors were rounded. Every int8 and 16x8 plan has these weights (Ethos-U and TFLite Micro
    run int8 weights only), so this file's accuracy bounds what any activation precision can
    reach: it is the ceiling the search reports when no plan meets the target."""
    from tensorflow.lite.python import schema_py_generated as fb
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(data))
    sub = model.subgraphs[0]
    done: set[int] = set()
    for op in sub.operators:
        axis = _WEIGHT_AXIS.get(op_name(model, op))
        if axis is None or len(op.inputs) < 2 or op.inputs[1] < 0 or op.inputs[1] in done:
            continue
        tensor = sub.tensors[op.inputs[1]]
        buf = model.buffers[tensor.buffer]
        if tensor.type != fb.TensorType.FLOAT32 or buf.data is None or not len(buf.data):
            continue
        w = np.frombuffer(bytes(bytearray(buf.data)), np.float32).reshape(tensor.shape)
        scale = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != axis),
                              keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        rounded = (np.clip(np.round(w / scale), -127, 127) * scale).astype(np.float32)
        buf.data = np.frombuffer(rounded.tobytes(), np.uint8)
        done.add(op.inputs[1])
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model)), len(done)
