"""Converter prediction: the target ops a TF graph will become, with their facts.

:func:`graph_facts` walks the frozen graph in execution order and says, per node, which target
ops the converter will emit (the lowering table), which nodes it folds away (constant
subgraphs, bias/batch norm/activation folded into the preceding conv) and which patterns it
fuses into one op (hard swish, GELU, L2 normalisation), with dtypes after quantisation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from rewriter.targets.opfacts import OpFacts, Shape, TensorFacts
from rewriter.targets.tables import lowering

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model


class LoweringTarget(Protocol):
    """What the prediction needs of a target (:class:`rewriter.targets.Target` has it): its
    artifact kind and the target ops the converter emits for a TF op."""

    artifact: str

    def lower(self, tf_op: str) -> list[str] | None: ...

_BATCH_MATMULS = ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
_STATEFUL = {"RandomUniform", "RandomStandardNormal", "Placeholder", "PlaceholderWithDefault",
             "VarHandleOp", "ReadVariableOp", "VariableV2"}


def graph_facts(model: Model, target: LoweringTarget, quantize: str) -> list[OpFacts]:
    """Facts for every op the converter will emit for ``model``, in execution order.

    Nodes the converter removes (constant subgraphs, bias/batch-norm/activation folded into the
    preceding conv) get one fact with ``op == ""`` and a note saying why.
    """
    from rewriter.ir.graph import GraphIndex, data_inputs
    from rewriter.ir.loops import loop_members
    from rewriter.ir.model import PLUMBING_OPS

    index = GraphIndex(model.graph_def)
    shapes = _infer_shapes(model)
    consts = _constant_nodes(index)
    tflite = target.artifact == "tflite"
    folded = _folded_into_producer(index, consts) if tflite else {}
    fused = _converter_fusions(index, consts) if tflite else {}
    if tflite:
        fused.update(_l2norm_fusions(index, consts, shapes))
    prelu = _prelu_fusions(index, shapes, fused) if tflite else {}
    in_loops = loop_members(index)  # a while loop is one op to the converter: WHILE
    out: list[OpFacts] = []
    for node in index.topological_order():
        if node.op in PLUMBING_OPS or node.op == "Const" or node.name in consts:
            continue
        if node.name in in_loops:
            if node.op == "LoopCond":
                out.extend(_loop_facts(node.name, target, quantize))
            continue
        if node.name in folded:
            out.append(OpFacts(node.name, "", source_op=node.op,
                               note=f"folded into {folded[node.name]} by the converter"))
            continue
        if fused.get(node.name, ("", ""))[1]:
            out.append(OpFacts(node.name, "", source_op=node.op, note=fused[node.name][1]))
            continue
        base = _node_facts(index, node, shapes, consts)
        lowered = target.lower(node.op)
        if node.name in fused:
            lowered = [fused[node.name][0]]
            if node.name in prelu:  # PRELU(x, alpha): its operands are x and the alpha
                base.inputs = tuple(_tensor_facts(index, r, shapes, r != prelu[node.name][0])
                                    for r in prelu[node.name])
                base.input_shape = base.inputs[0].shape
        elif tflite and node.op in ("StatefulPartitionedCall", "PartitionedCall"):
            lowered = _call_lowering(index, node, target)
            live = [r for r in data_inputs(node) if r.split(":")[0] not in consts]
            if live:
                base.input_shape = shapes.get(_tensor_name(live[0]))
        elif tflite and node.op in ("RealDiv", "Div") and _const_input(node, consts, 1):
            lowered = ["MUL"]
        elif tflite and node.op in (*_BATCH_MATMULS, "Einsum") and _const_input(node, consts, 1):
            lowered = ["FULLY_CONNECTED"]  # constant weights: the converter emits an FC
        elif tflite and node.op == "SelectV2" and _select_v1(node, consts, shapes):
            lowered = ["SELECT"]  # TF 2.21: no constant operand, equal shapes (ELU(alpha))
        if lowered is None:
            base.op, base.custom = f"Flex{node.op}", True
            if target.artifact == "onnx":
                base.op, base.custom = node.op, False
            out.append(base)
            continue
        if target.artifact == "tflite" and node.op in ("FusedBatchNorm", "FusedBatchNormV3"):
            lowered = _batch_norm_lowering(node)
        if quantize == "int8" and tflite and node.op in ("Select", "SelectV2"):
            base.blocked = _quantizer_blocked(index, node)
        for t in lowered:
            f = OpFacts(**{**base.__dict__, "op": t})
            f.dtype = f.out_dtype = tf_level_dtype(t, base.dtype, quantize, target.artifact)
            mark_float_island(f, quantize, target.artifact)
            if tflite and node.op == "Cast":
                _cast_to_float(node, f, quantize)
            out.append(f)
    return out


def _cast_to_float(node: Any, f: OpFacts, quantize: str) -> None:
    """A Cast from an integer or bool tensor to float32 stays float32 in a quantized file: the
    converter has no quantized CAST into a float type, so it writes CAST -> float32 -> QUANTIZE
    (ThresholdedReLU's ``x * cast(x > theta)``), a float island on a target that refuses one."""
    from rewriter.ir.graph import node_dtype

    src, dst = node_dtype(node, ("SrcT",)), node_dtype(node, ("DstT",))
    if quantize not in ("int8", "16x8") or src is None or dst is None:
        return
    if dst.kind == "f" and src.kind != "f":
        f.dtype = f.out_dtype = "float32"
        f.note = (f"the TFLite converter keeps a CAST from {src.name} to float32 in float32 in a "
                  f"{quantize} file, CAST -> QUANTIZE")
        f.float_island = True


def _loop_facts(node: str, target: LoweringTarget, quantize: str) -> list[OpFacts]:
    """The facts of one while loop (named by its LoopCond): the converter's lowering of
    ``While``, or a Flex op when the target kind has none."""
    lowered = target.lower("While")
    if lowered is None:
        return [OpFacts(node, "FlexWhile" if target.artifact == "tflite" else "While",
                        source_op="While", custom=target.artifact == "tflite")]
    note = ("the TFLite converter cannot quantize a loop: TF 2.21's int8 calibration crashes "
            "on WHILE" if quantize == "int8" and target.artifact == "tflite" else None)
    return [OpFacts(node, t, source_op="While", note=note,
                    dtype=tf_level_dtype(t, "float32", quantize, target.artifact))
            for t in lowered]


def _quantizer_blocked(index: Any, node: Any) -> str | None:
    """Why the int8 converter cannot make this Select: a constant branch beyond what the
    quantizer survives (:data:`rewriter.defaults.QUANTIZER_MAX_ABS`; an attention mask's
    value)."""
    from rewriter.defaults import QUANTIZER_MAX_ABS as MAX_ABS
    from rewriter.ir.graph import data_inputs

    for ref in data_inputs(node)[1:]:
        value = index.const_value(ref)
        if value is None or value.dtype.kind != "f" or not value.size:
            continue
        if not np.all(np.abs(value) <= MAX_ABS):
            return (f"{node.op}: its constant {ref.split(':')[0]} holds "
                    f"{float(np.max(np.abs(value))):.3g}, beyond {MAX_ABS:.0e}: the int8 "
                    "quantizer crashes on it (an attention mask's value)")
        if not np.all(np.abs(value) < MASK_FLATTENS):
            return (f"{node.op}: its constant {ref.split(':')[0]} holds "
                    f"{float(np.max(np.abs(value))):.3g}: where it is selected, the int8 scale of "
                    "the output is that value / 127 and every other value quantizes to 0 (a mask "
                    "before a softmax: uniform rows)")
    return None


#: A Select's constant branch from which its int8 output flattens (a mask value such as -1e9:
#: ``softmax(where(h > 0.5, h, -1e9))`` measured cosine 0.46 in LiteRT on tflm).
MASK_FLATTENS = 1e6


def _select_v1(node: Any, consts: set[str], shapes: dict[str, Shape]) -> bool:
    """Whether the converter emits SELECT (not SELECT_V2) for this SelectV2: seen with TF 2.21
    when no operand is constant and all three have the same static shape."""
    from rewriter.ir.graph import parse_input

    data = [r for r in node.input if not r.startswith("^")]
    if len(data) != 3 or any(parse_input(r)[0] in consts for r in data):
        return False
    found = [shapes.get(_tensor_name(r)) for r in data]
    return found[0] is not None and all(s == found[0] for s in found)


#: What the converter emits for a training-mode FusedBatchNorm (tf_keras LayerNormalization's
#: fused path): the batch statistics computed in the graph (measured, TF 2.21).
_TRAINING_BN = ["MEAN", "SQUARED_DIFFERENCE", "MEAN", "ADD", "RSQRT", "MUL", "MUL", "SUB", "ADD"]


def _batch_norm_lowering(node: Any) -> list[str]:
    """Inference batch norm: a MUL and an ADD; training mode (batch statistics): the moments."""
    if not node.attr["is_training"].b:
        return ["MUL", "ADD"]
    nchw = node.attr["data_format"].s.decode().startswith("NC")
    return ["TRANSPOSE", *_TRAINING_BN, "TRANSPOSE"] if nchw else list(_TRAINING_BN)


def _const_input(node: Any, consts: set[str], i: int) -> bool:
    from rewriter.ir.graph import data_inputs, parse_input

    data = data_inputs(node)
    return len(data) > i and parse_input(data[i])[0] in consts


def _converter_fusions(index: Any, consts: set[str]) -> dict[str, tuple[str, str]]:
    """Patterns the TFLite converter fuses into one op: node -> (op, "") for the fused op, and
    node -> ("", note) for the nodes it absorbs. Today: hard swish, x * relu6(x + 3) / 6."""
    from rewriter.ir.graph import data_inputs, parse_input

    out: dict[str, tuple[str, str]] = {}

    def live_inputs(node: Any) -> list[str]:
        return [parse_input(r)[0] for r in data_inputs(node)
                if parse_input(r)[0] not in consts]

    def single(name: str, op: tuple[str, ...]) -> Any:
        node = index.nodes.get(name)
        if node is None or node.op not in op or len(index.consumers(name)) != 1:
            return None
        return node

    for node in index:
        if node.op != "Mul":
            continue
        live = live_inputs(node)
        if len(live) != 2:
            continue
        for x, y in (live, live[::-1]):
            scale = single(y, ("RealDiv", "Mul"))
            if scale is not None and len(live_inputs(scale)) == 1:
                relu6 = single(live_inputs(scale)[0], ("Relu6",))
                head, absorbed = node, [scale]
            else:  # (x * relu6(x + 3)) / 6
                relu6 = single(y, ("Relu6",))
                after = index.consumers(node.name)
                head = after[0] if len(after) == 1 else None
                if head is None or head.op not in ("RealDiv", "Mul") or len(live_inputs(head)) != 1:
                    continue
                absorbed = [node]
            add = relu6 and single(live_inputs(relu6)[0], ("AddV2", "Add"))
            if add and live_inputs(add) == [x]:
                note = f"fused into HARD_SWISH at {head.name} by the converter"
                out[head.name] = ("HARD_SWISH", "")
                for n in (*absorbed, relu6, add):
                    out[n.name] = ("", note)
                break
    _gelu_fusions(index, live_inputs, single, out)
    return out


def _gelu_fusions(index: Any, live_inputs: Callable[[Any], list[str]],
                  single: Callable[..., Any], out: dict[str, tuple[str, str]]) -> None:
    """Keras 3 GELU, 0.5x * erfc(-x / sqrt 2): the converter emits one GELU op."""
    for erfc in list(index):
        if erfc.op != "Erfc" or len(live_inputs(erfc)) != 1:
            continue
        scale = single(live_inputs(erfc)[0], ("Mul", "RealDiv"))
        neg = scale and len(live_inputs(scale)) == 1 and single(live_inputs(scale)[0], ("Neg",))
        after = index.consumers(erfc.name)
        if not neg or len(after) != 1 or after[0].op != "Mul":
            continue
        head, x = after[0], live_inputs(neg)[0]
        others = [n for n in live_inputs(head) if n != erfc.name]
        half = single(others[0], ("Mul",)) if len(others) == 1 else None
        if half is None or live_inputs(half) != [x]:
            continue
        note = f"fused into GELU at {head.name} by the converter"
        out[head.name] = ("GELU", "")
        for n in (half, neg, scale, erfc):
            out[n.name] = ("", note)


def _prelu_fusions(index: Any, shapes: dict[str, Shape], out: dict[str, tuple[str, str]]
                   ) -> dict[str, tuple[str, str]]:
    """Keras PReLU, ``relu(x) + (-alpha) * relu(-x)`` with alpha of rank(x) - 1: the converter
    emits one PRELU (TF 2.21; a scalar or full-rank alpha stays RELU/NEG/MUL/ADD). Marks the
    fusion in ``out`` and returns {head: (x, alpha)} for the PRELU's operand facts."""
    from rewriter.ir.patterns import find_prelu

    found: dict[str, tuple[str, str]] = {}
    for node in list(index):
        m = find_prelu(index, node) if node.op in ("AddV2", "Add") else None
        x_shape = m and shapes.get(_tensor_name(m.x))
        if not m or x_shape is None or m.neg_alpha.ndim != len(x_shape) - 1:
            continue
        if any(len(index.consumers(n.name)) != 1 for n in m.nodes[1:]):
            continue
        note = f"fused into PRELU at {node.name} by the converter"
        out[node.name] = ("PRELU", "")
        for n in m.nodes[1:]:
            out[n.name] = ("", note)
        found[node.name] = (m.x, m.alpha_ref)
    return found


#: The converter fuses ``max(sum(x^2), eps)`` / ``sum(x^2) + eps`` only for eps below this
#: (measured with TF 2.21: 9e-4 and 1e-4 fuse, 1e-3 and 1e-2 do not).
L2_FUSION_EPS_BELOW = 1e-3


def _l2norm_fusions(index: Any, consts: set[str], shapes: dict[str, Shape]
                    ) -> dict[str, tuple[str, str]]:
    """``tf.math.l2_normalize`` over the last axis, ``x * rsqrt(max(sum(x^2, -1, keepdims),
    eps))`` (the max optional): the converter emits one L2_NORMALIZATION at the Mul."""
    from rewriter.ir.graph import data_inputs, parse_input

    out: dict[str, tuple[str, str]] = {}

    def live(node: Any) -> list[str]:
        return [r for r in data_inputs(node) if parse_input(r)[0] not in consts]

    def single(ref: str, ops: tuple[str, ...]) -> Any:
        node = index.nodes.get(parse_input(ref)[0])
        if node is None or node.op not in ops or len(index.consumers(node.name)) != 1:
            return None
        return node if len(live(node)) == 1 else None

    for rsqrt in list(index):
        if rsqrt.op != "Rsqrt" or len(live(rsqrt)) != 1:
            continue
        after = index.consumers(rsqrt.name)
        head = after[0] if len(after) == 1 and after[0].op == "Mul" else None
        clamp = single(live(rsqrt)[0], ("Maximum", "AddV2", "Add"))
        total = single(live(clamp)[0] if clamp else live(rsqrt)[0], ("Sum",))
        square = total and single(live(total)[0], ("Square",))
        if head is None or not square or not total.attr["keep_dims"].b:
            continue
        x = live(square)[0]
        others = [r for r in live(head) if parse_input(r)[0] != rsqrt.name]
        if others != [x] or not _last_axis_only(index, total, shapes.get(_tensor_name(x))):
            continue
        if clamp is not None and not _small_const(index, clamp):
            continue
        note = f"fused into L2_NORMALIZATION at {head.name} by the converter"
        out[head.name] = ("L2_NORMALIZATION", "")
        for n in (square, total, clamp, rsqrt):
            if n is not None:
                out[n.name] = ("", note)
    return out


def _last_axis_only(index: Any, reduce: Any, shape: Shape | None) -> bool:
    axes = index.const_value(reduce.input[1])
    if axes is None or shape is None:
        return False
    rank = len(shape)
    return [int(a) % rank for a in axes.reshape(-1)] == [rank - 1]


def _small_const(index: Any, node: Any) -> bool:
    from rewriter.ir.graph import data_inputs

    vals = [index.const_value(r) for r in data_inputs(node)]
    eps = [v for v in vals if v is not None]
    return len(eps) == 1 and eps[0].size == 1 and 0 <= float(eps[0].reshape(-1)[0]) \
        < L2_FUSION_EPS_BELOW


def _call_lowering(index: Any, node: Any, target: LoweringTarget) -> list[str] | None:
    """Ops emitted for a function call node (the converter inlines the function body)."""
    from rewriter.ir.model import PLUMBING_OPS

    name = node.attr["f"].func.name
    fn = next((f for f in index.library.function if f.signature.name == name), None)
    if fn is None:
        return None
    ops: list[str] = []
    for body in fn.node_def:
        if body.op in PLUMBING_OPS or body.op == "Const":
            continue
        lowered = target.lower(body.op)
        if lowered is None:
            return None
        ops += lowered
    return ops


def _infer_shapes(model: Model) -> dict[str, Shape]:
    """Static shapes of every tensor (``"node:i"``), with the signature's input shapes.

    TensorFlow infers them from a copy of the graph whose weights are placeholders of their
    shape (:func:`rewriter.ir.model.shape_only`): no value of a float weight decides a shape, and
    the weights are not copied twice more (the copy, TensorFlow's graph)."""
    import tensorflow as tf

    from rewriter.ir.model import shape_only

    gd = shape_only(model.graph_def)
    by_node = {spec.node: spec for spec in model.inputs}
    for node in gd.node:
        spec = by_node.get(node.name)
        if spec is not None and node.op == "Placeholder":
            shape = node.attr["shape"].shape
            del shape.dim[:]
            for d in spec.shape:
                shape.dim.add().size = -1 if d is None else int(d)
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(gd, name="")
    shapes: dict[str, Shape] = {}
    for op in graph.get_operations():
        for i, t in enumerate(op.outputs):
            dims = t.shape.as_list() if t.shape.rank is not None else None
            shapes[f"{op.name}:{i}"] = tuple(dims) if dims is not None else None
    return shapes


def _constant_nodes(index: Any) -> set[str]:
    """Nodes whose value is a constant: the converter folds them away."""
    from rewriter.ir.graph import data_inputs, parse_input

    consts: set[str] = set()
    for node in index.topological_order():
        if node.op == "Const":
            consts.add(node.name)
            continue
        data = [parse_input(r)[0] for r in data_inputs(node)]
        if data and node.op not in _STATEFUL and all(d in consts for d in data):
            consts.add(node.name)
    return consts


def _folded_into_producer(index: Any, consts: set[str]) -> dict[str, str]:
    """Nodes the TFLite converter folds into a preceding conv/matmul: node -> that producer."""
    from rewriter.ir.graph import data_inputs, parse_input

    low = lowering()["tflite_int8"]
    foldable, producers = set(low["fold_into_producer"]), set(low["producers"])
    root: dict[str, str] = {}
    activated: set[str] = set()
    for node in index.topological_order():
        if node.op in producers:
            root[node.name] = node.name
            continue
        if node.op not in foldable:
            continue
        data = [parse_input(r)[0] for r in data_inputs(node)]
        live = [d for d in data if d not in consts]
        if len(live) != 1:
            continue
        src = index.skip_identity(live[0])
        if src is None or src.name not in root or len(index.consumers(src.name)) != 1:
            continue
        r = root[src.name]
        if r in activated:
            continue
        if node.op in ("Relu", "Relu6"):
            activated.add(r)
        elif node.op in ("Sub",) and data[0] in consts:
            continue
        root[node.name] = r
    return {n: r for n, r in root.items() if n != r}


def _node_facts(index: Any, node: Any, shapes: dict[str, Shape], consts: set[str]) -> OpFacts:
    from rewriter.ir.graph import data_inputs, node_dtype, parse_input

    data = data_inputs(node)
    in_shape = shapes.get(_tensor_name(data[0])) if data else None
    dt = node_dtype(node)
    f = OpFacts(node.name, node.op, source_op=node.op,
                dtype=dt.name if dt is not None else None, input_shape=in_shape,
                output_shape=shapes.get(f"{node.name}:0"))
    operands = data[:-1] if node.op == "ConcatV2" else data  # ConcatV2's last input: the axis
    f.inputs = tuple(_tensor_facts(index, r, shapes, parse_input(r)[0] in consts)
                     for r in operands)
    f.outputs = (TensorFacts(f.output_shape),)
    attrs = node.attr
    if "strides" in attrs and len(attrs["strides"].list.i) == 4 and node.op != "StridedSlice":
        s = attrs["strides"].list.i
        f.strides = (int(s[1]), int(s[2]))
    if "dilations" in attrs and len(attrs["dilations"].list.i) == 4:
        d = attrs["dilations"].list.i
        f.dilation = (int(d[1]), int(d[2]))
    if "padding" in attrs:
        f.padding = attrs["padding"].s.decode()
    if "ksize" in attrs and len(attrs["ksize"].list.i) == 4:
        k = attrs["ksize"].list.i
        f.kernel = (int(k[1]), int(k[2]))
    elif node.op in ("Conv2D", "DepthwiseConv2dNative") and len(data) > 1:
        w = shapes.get(_tensor_name(data[1]))
        if w and len(w) == 4 and w[0] is not None:
            f.kernel = (int(w[0]), int(w[1]))
    _axis_facts(index, node, data, shapes, f)
    if "align_corners" in attrs:  # resizes: judged by Vela's scale constraint
        f.options["align_corners"] = bool(attrs["align_corners"].b)
    if node.op == "StridedSlice":
        st = index.const_value(data[3]) if len(data) > 3 else None
        if st is not None:
            f.slice_strides = tuple(int(s) for s in st.reshape(-1))
        f.options["ellipsis_mask"] = int(attrs["ellipsis_mask"].i)
        f.options["new_axis_mask"] = int(attrs["new_axis_mask"].i)
    return f


def _tensor_facts(index: Any, ref: str, shapes: dict[str, Shape], const: bool) -> TensorFacts:
    shape = shapes.get(_tensor_name(ref))
    if not const:
        return TensorFacts(shape)
    value = index.const_value(ref)
    return TensorFacts(shape, None, True,
                       None if value is None else int(np.count_nonzero(value)))


def _axis_facts(index: Any, node: Any, data: list[str], shapes: dict[str, Shape],
                f: OpFacts) -> None:
    """The axes an op reduces, splits, packs or pads along (non-negative once known)."""
    def absolute(values: Any, shape: Shape | None) -> tuple[int, ...] | None:
        if values is None or shape is None:
            return None
        rank = len(shape)
        return tuple(int(a) + rank if int(a) < 0 else int(a) for a in values.reshape(-1))

    op = node.op
    if op in ("Mean", "Sum", "Max", "Min", "Prod") and len(data) > 1:
        f.axes = absolute(index.const_value(data[1]), f.input_shape)
    elif op in ("Split", "SplitV"):
        x, axis = (data[1], data[0]) if op == "Split" else (data[0], data[2])
        f.input_shape = shapes.get(_tensor_name(x))
        f.axes = absolute(index.const_value(axis), f.input_shape)
    elif op in ("Pad", "PadV2", "MirrorPad") and len(data) > 1:
        pads = index.const_value(data[1])
        if pads is not None:
            f.axes = tuple(int(d) for d in np.flatnonzero(np.any(pads.reshape(-1, 2), axis=1)))
    elif op == "Pack":
        f.axes = absolute(np.asarray([node.attr["axis"].i]), f.output_shape)


def _tensor_name(ref: str) -> str:
    name, _, idx = ref.partition(":")
    return f"{name}:{idx or 0}"


# ----------------------------------------------------------------------------- dtypes
def _float_ops_in_int8() -> set[str]:
    return set(lowering()["tflite_int8"]["float_ops"])


def tf_level_dtype(target_op: str, tf_dtype: str | None, quantize: str, artifact: str) -> str:
    """The dtype a target op will compute in after conversion with ``quantize``."""
    tf_dtype = tf_dtype or "float32"
    if artifact == "onnx" or quantize not in ("int8", "16x8") or tf_dtype != "float32":
        return tf_dtype
    if quantize == "16x8":
        return "int16"
    return "float32" if target_op in _float_ops_in_int8() else "int8"


def mark_float_island(facts: OpFacts, quantize: str, artifact: str) -> OpFacts:
    """Note (and flag) a target op the converter will leave in float32 in a full-int8 file."""
    facts.note = float_note(facts.op, quantize, artifact)
    facts.float_island = facts.note is not None
    return facts


def float_note(target_op: str, quantize: str, artifact: str) -> str | None:
    """Why a target op stays in float32 in a full-int8 file, or None."""
    if artifact == "tflite" and quantize == "int8" and target_op in _float_ops_in_int8():
        return ("the TFLite converter keeps it in float32 in full-int8 conversion, "
                "DEQUANTIZE -> op -> QUANTIZE")
    return None
