"""Read the ops, dtypes, shapes and attributes inside an exported ``.tflite`` or ``.onnx`` file.

The TFLite file is read with the flatbuffer schema shipped in ``ai_edge_litert`` (no interpreter,
no delegates: what is in the file, in execution order). The ONNX file is read with ``onnx`` and
its shape inference. Both give :class:`rewriter.targets.opfacts.OpFacts`, which the op tables judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.errors import UserError
from rewriter.targets.opfacts import OpFacts, TensorFacts


@dataclass
class Artifact:
    """The ops of one exported file, in execution order."""

    path: str
    kind: str  # "tflite" | "onnx"
    ops: list[OpFacts]
    opset: int | None = None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)

    def op_names(self) -> list[str]:
        return [f.op for f in self.ops]

    def histogram(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for f in self.ops:
            counts[f.op] = counts.get(f.op, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def read_artifact(path: str | Path) -> Artifact:
    """Read a ``.tflite`` or ``.onnx`` file (by extension)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such file: {p}")
    if p.suffix == ".tflite":
        return read_tflite(p)
    if p.suffix == ".onnx":
        return read_onnx(p)
    raise UserError(f"{p}: expected a .tflite or .onnx file")


# ----------------------------------------------------------------------------- TFLite
_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
_WEIGHTS_FORMATS = {0: "DEFAULT", 1: "SHUFFLED4x16INT8"}
_REDUCERS = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY",
             "REDUCE_ALL"}


def _enum_names(enum_cls: Any) -> dict[int, str]:
    return {v: k for k, v in vars(enum_cls).items() if not k.startswith("_")}


def read_tflite(path: Path) -> Artifact:
    """Ops of subgraph 0 of a TFLite flatbuffer, with dtypes, shapes and options."""
    from ai_edge_litert import schema_py_generated as schema

    buf = path.read_bytes()
    try:
        model = schema.ModelT.InitFromPackedBuf(buf, 0)
    except Exception as exc:  # flatbuffers raises plain errors on garbage
        raise UserError(f"{path}: not a TFLite flatbuffer ({exc})") from None
    if not model.subgraphs:
        raise UserError(f"{path}: the model has no subgraph")
    op_names = _enum_names(schema.BuiltinOperator)
    types = _enum_names(schema.TensorType)
    sg = model.subgraphs[0]
    ops = [_tflite_op(model, sg, i, op, op_names, types) for i, op in enumerate(sg.operators)]
    for f, op in zip(ops, sg.operators, strict=True):
        f.boundary = ((f.op == "QUANTIZE" and any(t in sg.inputs for t in op.inputs))
                      or (f.op == "DEQUANTIZE" and any(t in sg.outputs for t in op.outputs)))
    _mark_float_islands(sg, ops)
    io = {"inputs": sg.inputs, "outputs": sg.outputs}
    sig = {k: [_tensor_json(sg.tensors[t], types) for t in v] for k, v in io.items()}
    return Artifact(str(path), "tflite", ops, None, sig["inputs"], sig["outputs"])


def tflite_subgraph_names(path: Path) -> list[str]:
    """The name of each subgraph (``subgraph_<i>`` when it has none)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(path.read_bytes(), 0)
    names = []
    for i in range(model.SubgraphsLength()):
        name = model.Subgraphs(i).Name()
        names.append(name.decode() if name else f"subgraph_{i}")
    return names


def read_tflite_tensors(path: Path) -> list[tuple[str, str, list[str]]]:
    """(op, first output tensor's name, input tensors' names) of each op of subgraph 0."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    names = _enum_names(schema.BuiltinOperator)
    sg = model.subgraphs[0]
    out = []
    for op in sg.operators:
        code = model.operatorCodes[op.opcodeIndex]
        kind = names.get(max(int(code.builtinCode), int(code.deprecatedBuiltinCode)), "?")
        outs = [_s(sg.tensors[t].name) for t in (op.outputs if op.outputs is not None else [])]
        ins = [_s(sg.tensors[t].name) for t in (op.inputs if op.inputs is not None else [])
               if t >= 0]
        out.append((kind, outs[0] if outs else "", ins))
    return out


def _mark_float_islands(sg: Any, ops: list[OpFacts]) -> None:
    """Name the float op each mid-graph DEQUANTIZE feeds (or QUANTIZE drains)."""
    producer: dict[int, int] = {}
    consumers: dict[int, list[int]] = {}
    for i, op in enumerate(sg.operators):
        for t in op.outputs if op.outputs is not None else []:
            producer[int(t)] = i
        for t in op.inputs if op.inputs is not None else []:
            consumers.setdefault(int(t), []).append(i)
    for i, (f, op) in enumerate(zip(ops, sg.operators, strict=True)):
        if f.boundary or f.op not in ("QUANTIZE", "DEQUANTIZE") or f.out_dtype == f.dtype:
            continue
        if not any(str(d).startswith("float") for d in (f.dtype, f.out_dtype)):
            continue  # an integer requantisation (int16 <-> int8 in a mixed plan): no float
        if f.op == "DEQUANTIZE":
            near = [j for t in op.outputs for j in consumers.get(int(t), [])]
        else:
            near = [producer[int(t)] for t in op.inputs if int(t) in producer]
        names = [ops[j].op for j in near if j != i and ops[j].op not in ("QUANTIZE",
                                                                        "DEQUANTIZE")]
        if names:
            f.related_op = names[0]
            f.note = f"float island around {names[0]}"
            f.float_island = True
            for j in near:
                if ops[j].op == names[0] and ops[j].dtype == "float32":
                    ops[j].float_island = True
                    ops[j].note = ops[j].note or ("the int8 converter left it in float32, "
                                                  "between DEQUANTIZE and QUANTIZE")


def _tensor_json(t: Any, types: dict[int, str]) -> dict[str, Any]:
    out = {"name": _s(t.name), "shape": _shape(t), "dtype": types.get(t.type, "?").lower()}
    q = t.quantization
    if q is not None and q.scale is not None and len(q.scale) == 1:  # per-tensor (I/O)
        out["quantization"] = {"scale": float(q.scale[0]), "zero_point": int(q.zeroPoint[0])}
    return out


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x or "")


def _shape(t: Any) -> tuple[int | None, ...]:
    sig = t.shapeSignature if t.shapeSignature is not None and len(t.shapeSignature) else None
    dims = sig if sig is not None else (t.shape if t.shape is not None else [])
    return tuple(None if int(d) < 0 else int(d) for d in dims)


def _buffer(model: Any, t: Any) -> bytes | None:
    buf = model.buffers[t.buffer] if 0 < t.buffer < len(model.buffers) else None
    if buf is None or buf.data is None or len(buf.data) == 0:
        return None
    return bytes(bytearray(buf.data))


def _buffer_ints(model: Any, t: Any) -> tuple[int, ...] | None:
    data = _buffer(model, t)
    if data is None:
        return None
    dtype = np.int64 if t.type == 4 else np.int32
    return tuple(int(v) for v in np.frombuffer(data, dtype=dtype))


#: TFLite TensorType -> numpy dtype, for counting the non-zero values of constants.
_NP_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_,
             7: np.int16, 9: np.int8, 10: np.float64}


def _tensor_facts(model: Any, t: Any, types: dict[int, str]) -> TensorFacts:
    """Shape and dtype of one tensor; for a constant, how many real values are not zero."""
    dtype = types.get(t.type, "?").lower()
    data = _buffer(model, t)
    if data is None:
        return TensorFacts(_shape(t), dtype)
    nonzero = None
    np_type = _NP_TYPES.get(t.type)
    if np_type is not None and len(data) % np.dtype(np_type).itemsize == 0:
        values = np.frombuffer(data, dtype=np_type).astype(np.float64)
        q = t.quantization
        zp = np.asarray(q.zeroPoint if q is not None and q.zeroPoint is not None else [0])
        if values.size and zp.size in (1, values.size):
            nonzero = int(np.count_nonzero(values - zp.astype(np.float64)))
        elif values.size and q is not None and q.quantizedDimension is not None:
            shape = [int(d) for d in (t.shape if t.shape is not None else [])]
            axis = int(q.quantizedDimension)
            if shape and np.prod(shape) == values.size and shape[axis] == zp.size:
                bshape = [1] * len(shape)
                bshape[axis] = zp.size
                nonzero = int(np.count_nonzero(values.reshape(shape) - zp.reshape(bshape)))
    return TensorFacts(_shape(t), dtype, True, nonzero)


def _batch_axes(axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...] | None:
    """Axes made non-negative against a tensor of ``rank`` dimensions."""
    if axes is None or rank <= 0:
        return None
    return tuple(a + rank if a < 0 else a for a in axes)


def _tflite_op(model: Any, sg: Any, i: int, op: Any, names: dict[int, str],
               types: dict[int, str]) -> OpFacts:
    code = model.operatorCodes[op.opcodeIndex]
    builtin = max(int(code.builtinCode), int(code.deprecatedBuiltinCode))
    name = names.get(builtin, f"BUILTIN_{builtin}")
    custom = name == "CUSTOM"
    if custom:
        name = _s(code.customCode)
    ins = [sg.tensors[t] for t in (op.inputs if op.inputs is not None else []) if t >= 0]
    outs = [sg.tensors[t] for t in (op.outputs if op.outputs is not None else [])]
    first_out = _s(outs[0].name) if outs else f"op{i}"
    f = OpFacts(node=f"#{i} {first_out}", op=name, custom=custom,
                dtype=types.get(ins[0].type, "?").lower() if ins else None,
                out_dtype=types.get(outs[0].type, "?").lower() if outs else None,
                input_shape=_shape(ins[0]) if ins else None,
                output_shape=_shape(outs[0]) if outs else None,
                version=int(code.version),
                inputs=tuple(_tensor_facts(model, t, types) for t in ins),
                outputs=tuple(_tensor_facts(model, t, types) for t in outs))
    _options(f, op.builtinOptions)
    if name in ("CONV_2D", "DEPTHWISE_CONV_2D") and len(ins) > 1:
        w = _shape(ins[1])
        if len(w) == 4:
            f.kernel = (w[1], w[2])
    rank = len(f.input_shape or ())
    if name in _REDUCERS and len(ins) > 1:
        f.axes = _batch_axes(_buffer_ints(model, ins[1]), rank)
    if name == "SPLIT" and len(ins) > 1:
        f.input_shape = _shape(ins[1])  # input 0 is the axis: the data is input 1
        f.dtype = types.get(ins[1].type, "?").lower()
        f.axes = _batch_axes(_buffer_ints(model, ins[0]), len(f.input_shape))
    if name in ("PAD", "PADV2", "MIRROR_PAD") and len(ins) > 1:
        pads = _buffer_ints(model, ins[1])
        if pads is not None:
            f.axes = tuple(d for d in range(len(pads) // 2) if pads[2 * d] or pads[2 * d + 1])
    if name == "PACK" and op.builtinOptions is not None:
        f.axes = _batch_axes((int(op.builtinOptions.axis),), len(f.output_shape or ()))
    if name == "STRIDED_SLICE" and len(ins) > 3:
        f.slice_strides = _buffer_ints(model, ins[3])
    return f


def _options(f: OpFacts, opt: Any) -> None:
    if opt is None:
        return
    if hasattr(opt, "strideH"):
        f.strides = (int(opt.strideH), int(opt.strideW))
    if hasattr(opt, "filterHeight"):
        f.kernel = (int(opt.filterHeight), int(opt.filterWidth))
    if hasattr(opt, "dilationHFactor"):
        f.dilation = (int(opt.dilationHFactor), int(opt.dilationWFactor))
    if hasattr(opt, "padding"):
        f.padding = {0: "SAME", 1: "VALID"}.get(int(opt.padding))
    if hasattr(opt, "fusedActivationFunction"):
        f.fused_activation = _ACTIVATIONS.get(int(opt.fusedActivationFunction), "?")
    if hasattr(opt, "weightsFormat"):
        f.options["weights_format"] = _WEIGHTS_FORMATS.get(int(opt.weightsFormat), "?")
    if hasattr(opt, "ellipsisMask"):
        f.options["ellipsis_mask"] = int(opt.ellipsisMask)
        f.options["new_axis_mask"] = int(opt.newAxisMask)


# ----------------------------------------------------------------------------- ONNX
_ONNX_TYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64",
               9: "bool", 10: "float16", 11: "float64", 16: "bfloat16"}


def read_onnx(path: Path) -> Artifact:
    """Nodes of an ONNX graph, with dtypes and shapes from ONNX shape inference."""
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as exc:
        raise UserError(f"{path}: not an ONNX model ({exc})") from None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # unknown ops (e.g. Erfc) stop inference; keep what the file declares
        pass
    g = model.graph
    infos = {v.name: v for v in [*g.input, *g.output, *g.value_info]}
    consts = {i.name for i in g.initializer}
    ops = []
    for i, node in enumerate(g.node):
        f = OpFacts(node=node.name or f"#{i}", op=node.op_type,
                    custom=node.domain not in ("", "ai.onnx"))
        data = [x for x in node.input if x and x not in consts]
        if data and data[0] in infos:
            f.dtype, f.input_shape = _onnx_type(infos[data[0]])
        if node.output and node.output[0] in infos:
            f.out_dtype, f.output_shape = _onnx_type(infos[node.output[0]])
        _onnx_attrs(f, node)
        ops.append(f)
    sig_in = [_onnx_io(v) for v in g.input if v.name not in consts]
    return Artifact(str(path), "onnx", ops, opset, sig_in, [_onnx_io(v) for v in g.output])


def _onnx_type(info: Any) -> tuple[str | None, tuple[int | None, ...] | None]:
    tt = info.type.tensor_type
    dtype = _ONNX_TYPES.get(tt.elem_type)
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)


def _onnx_io(info: Any) -> dict[str, Any]:
    dtype, shape = _onnx_type(info)
    return {"name": info.name, "shape": list(shape or ()), "dtype": dtype}


def _onnx_attrs(f: OpFacts, node: Any) -> None:
    attrs = {a.name: a for a in node.attribute}
    if "strides" in attrs and len(attrs["strides"].ints) == 2:
        f.strides = tuple(int(v) for v in attrs["strides"].ints)
    if "kernel_shape" in attrs and len(attrs["kernel_shape"].ints) == 2:
        f.kernel = tuple(int(v) for v in attrs["kernel_shape"].ints)
    if "dilations" in attrs and len(attrs["dilations"].ints) == 2:
        f.dilation = tuple(int(v) for v in attrs["dilations"].ints)
    if "axes" in attrs:
        f.axes = tuple(int(v) for v in attrs["axes"].ints)
