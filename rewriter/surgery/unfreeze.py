"""Turn a frozen ``.pb`` back into a trainable SavedModel (seed 004: "re-train a frozen model").

The weight ``Const`` nodes become ``tf.Variable``s: by default those feeding a weight input of a
conv / matmul / bias / normalisation op (directly or through ``Identity`` reads), plus every
float const read through an ``Identity`` (the trace a frozen variable leaves); ``weights=`` names
them explicitly (names or ``fnmatch`` patterns). The graph itself is not rebuilt: the saved
object's ``__call__`` imports the frozen ``GraphDef`` with an ``input_map`` that feeds each
weight's place (a ``Placeholder`` now) from its variable, so the computation is the frozen one,
op for op, and gradients reach every variable.

The SavedModel follows the reusable-SavedModel convention: ``obj(x)`` (``__call__``),
``obj.variables``, ``obj.trainable_variables``, ``obj.regularization_losses``, plus a
``serving_default`` signature returning a dict of the frozen graph's outputs.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from rewriter.errors import UserError
from rewriter.ir.graph import GraphIndex, NodeDef, const_to_array

#: op -> input positions that hold weights (kernel, bias, scale/offset/mean/variance)
WEIGHT_INPUTS: dict[str, tuple[int, ...]] = {
    "Conv2D": (1,), "Conv3D": (1,), "DepthwiseConv2dNative": (1,),
    "Conv2DBackpropInput": (1,), "Conv3DBackpropInputV2": (1,),
    "MatMul": (0, 1), "BatchMatMul": (0, 1), "BatchMatMulV2": (0, 1), "BatchMatMulV3": (0, 1),
    "Einsum": (0, 1), "BiasAdd": (1,),
    "FusedBatchNorm": (1, 2, 3, 4), "FusedBatchNormV2": (1, 2, 3, 4),
    "FusedBatchNormV3": (1, 2, 3, 4),
}
#: op -> weight input positions that are statistics, not trained by gradient descent
STATISTIC_INPUTS: dict[str, tuple[int, ...]] = {
    "FusedBatchNorm": (3, 4), "FusedBatchNormV2": (3, 4), "FusedBatchNormV3": (3, 4),
}
_STATISTIC_NAME = re.compile(r"moving_(mean|variance)|running_(mean|var)|population")
_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Weight:
    """A const that becomes a variable: node name, dtype, shape, trainable, and why."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    trainable: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "trainable": self.trainable, "reason": self.reason}


@dataclass
class UnfreezeResult:
    """What :func:`unfreeze` wrote and how closely the SavedModel reproduces the frozen graph."""

    source: str
    output: str
    weights: list[Weight]
    inputs: list[str]
    outputs: list[str]
    max_abs_error: float | None = None
    keras: str | None = None
    keras_max_abs_error: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output,
                "weights": [w.to_json() for w in self.weights],
                "variables": len(self.weights),
                "trainable": sum(w.trainable for w in self.weights),
                "parameters": int(sum(int(np.prod(w.shape)) for w in self.weights)),
                "inputs": self.inputs, "outputs": self.outputs,
                "max_abs_error": self.max_abs_error, "keras": self.keras,
                "keras_max_abs_error": self.keras_max_abs_error, "notes": self.notes}


# ----------------------------------------------------------------------------- finding weights
def find_weights(graph_def: Any, names: Sequence[str] | None = None) -> list[Weight]:
    """The consts to lift into variables (auto-detected, or ``names`` / patterns given)."""
    index = GraphIndex(graph_def)
    consts = {n.name: n for n in graph_def.node if n.op == "Const"}
    uses = _weight_uses(index)
    if names:
        chosen = _select(consts, names)
        reasons = {n: "named with --weights" for n in chosen}
    else:
        reasons = {}
        for name, node in consts.items():
            if _dtype(node) not in _FLOAT_DTYPES:
                continue
            if name in uses:
                reasons[name] = "feeds " + ", ".join(sorted({op for op, _ in uses[name]}))
            elif any(c.op == "Identity" for c in index.consumers(name)):
                reasons[name] = "read through Identity (a frozen variable)"
        chosen = [n for n in consts if n in reasons]
    stats = _unfused_bn_statistics(index)
    weights = []
    for name in chosen:
        node = consts[name]
        shape = tuple(int(d.size) for d in node.attr["value"].tensor.tensor_shape.dim)
        stat = name in stats or bool(_STATISTIC_NAME.search(name)) or any(
            i in STATISTIC_INPUTS.get(op, ()) for op, i in uses.get(name, ()))
        weights.append(Weight(name, _dtype(node), shape, not stat, reasons[name]))
    return weights


def _weight_uses(index: GraphIndex) -> dict[str, set[tuple[str, int]]]:
    """Const name -> {(op, input position)} of weight inputs it reaches through Identity."""
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in index:
        for pos in WEIGHT_INPUTS.get(node.op, ()):
            if pos >= len(node.input):
                continue
            src = index.skip_identity(node.input[pos])
            if src is not None and src.op == "Const":
                uses.setdefault(src.name, set()).add((node.op, pos))
    return uses


def _unfused_bn_statistics(index: GraphIndex) -> set[str]:
    """Consts that are the moving mean/variance of an unfused batch norm (Keras 3 emits it).

    ``y = x * (gamma * rsqrt(var + eps)) + (beta - mean * (gamma * rsqrt(var + eps)))``: the
    variance is the const added to epsilon before the ``Rsqrt``; the mean is the const multiplied
    by that scale and subtracted from beta.
    """
    stats: set[str] = set()
    for rsqrt in (n for n in index if n.op == "Rsqrt"):
        add = index.producer(rsqrt.input[0])
        if add is None or add.op not in ("Add", "AddV2"):
            continue
        for ref in add.input:
            src = index.skip_identity(ref)
            if src is not None and src.op == "Const" and src.attr["value"].tensor.tensor_shape.dim:
                stats.add(src.name)
        for scale in _consumers_through(index, rsqrt.name, "Mul"):
            for mul in _consumers_through(index, scale.name, "Mul"):
                if not any(c.op == "Sub" and len(c.input) > 1 and
                           index.producer(c.input[1]) is mul for c in index.consumers(mul.name)):
                    continue
                for ref in mul.input:
                    src = index.skip_identity(ref)
                    if src is not None and src.op == "Const":
                        stats.add(src.name)
    return stats


def _consumers_through(index: GraphIndex, name: str, op: str) -> list[NodeDef]:
    return [c for c in index.consumers(name) if c.op == op]


def _select(consts: dict[str, NodeDef], names: Sequence[str]) -> list[str]:
    chosen: list[str] = []
    for pattern in names:
        hits = [n for n in consts if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise UserError(f"--weights {pattern!r} matches no Const node of the graph")
        for n in hits:
            if _dtype(consts[n]) not in _FLOAT_DTYPES:
                raise UserError(f"--weights: {n!r} is a {_dtype(consts[n])} const; only float "
                                "consts can become trainable variables")
            if n not in chosen:
                chosen.append(n)
    return chosen


def _dtype(node: NodeDef) -> str:
    return tf.dtypes.as_dtype(node.attr["dtype"].type).name


def lift_graph(graph_def: Any, weights: Iterable[Weight]) -> Any:
    """A copy of ``graph_def`` whose weight consts are Placeholders of the same name and type."""
    from tensorflow.core.framework import graph_pb2, tensor_shape_pb2

    lifted = {w.name: w for w in weights}
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        new = out.node.add()
        if node.name in lifted:
            new.name, new.op = node.name, "Placeholder"
            new.attr["dtype"].CopyFrom(node.attr["dtype"])
            shape = tensor_shape_pb2.TensorShapeProto()
            shape.CopyFrom(node.attr["value"].tensor.tensor_shape)
            new.attr["shape"].shape.CopyFrom(shape)
        else:
            new.CopyFrom(node)
            new.device = ""
    return out


# ----------------------------------------------------------------------------- the saved object
def build_module(graph_def: Any, weights: Sequence[Weight], input_specs: Sequence[Any],
                 output_tensors: Sequence[str], output_keys: Sequence[str]) -> Any:
    """The trackable object that ``tf.saved_model.save`` writes (see the module docstring)."""
    values = {n.name: const_to_array(n) for n in graph_def.node if n.name in
              {w.name for w in weights}}
    lifted = lift_graph(graph_def, weights)
    variables = [tf.Variable(values[w.name], trainable=w.trainable, name=w.name)
                 for w in weights]
    input_tensors = [s.tensor for s in input_specs]

    def call(*args: Any) -> Any:
        input_map = {t: a for t, a in zip(input_tensors, args, strict=True)}
        for w, v in zip(weights, variables, strict=True):
            input_map[f"{w.name}:0"] = v.read_value()
        outs = tf.compat.v1.import_graph_def(lifted, input_map=input_map,
                                             return_elements=list(output_tensors), name="")
        return outs[0] if len(outs) == 1 else list(outs)

    signature = [tf.TensorSpec(s.shape, s.dtype, name=_key(s.name)) for s in input_specs]
    root = Unfrozen()
    root.variables = list(variables)
    root.trainable_variables = [v for v in variables if v.trainable]
    root.regularization_losses = []
    root.__call__ = tf.function(call, input_signature=signature)

    def serve(*args: Any) -> dict[str, Any]:
        outs = root.__call__(*args)
        outs = outs if isinstance(outs, list) else [outs]
        return {k: tf.identity(o, name=k) for k, o in zip(output_keys, outs, strict=True)}

    root.serve = tf.function(serve, input_signature=signature)
    return root


class Unfrozen(tf.__internal__.tracking.AutoTrackable):
    """A frozen graph with its weights as variables; ``obj(x)`` runs the traced ``__call__``."""

    def __call__(self, *args: Any) -> Any:
        return self.__dict__["__call__"](*args)


def _key(name: str) -> str:
    key = re.sub(r"[^A-Za-z0-9_]", "_", name.split(":")[0])
    return key if key and not key[0].isdigit() else f"t_{key}"


# ----------------------------------------------------------------------------- entry point
def unfreeze(path: str, output: str, weights: Sequence[str] | None = None,
             options: Any = None, verify: bool = True, to_keras: bool = False
             ) -> UnfreezeResult:
    """Write a trainable SavedModel for the frozen graph at ``path``; verify it reproduces it."""
    from rewriter.frontends import LoadOptions, load_model

    _check_output(output)
    model = load_model(path, options or LoadOptions())
    if model.source.format not in ("graphdef", "graphdef_text"):
        raise UserError(f"{path}: unfreeze takes a frozen GraphDef (.pb/.pbtxt); this is a "
                        f"{model.source.format} model, which keeps its variables already")
    graph_def = _pruned(model)
    found = find_weights(graph_def, weights)
    if not found:
        raise UserError(f"{path}: found no weight consts (none feeds a conv/matmul/bias/"
                        "normalisation op or is read through Identity); name them with --weights")
    specs = _dynamic_batch_specs(model)
    keys = _unique_keys([o.name for o in model.outputs])
    root = build_module(graph_def, found, specs, [o.tensor for o in model.outputs], keys)
    _save(root, output)
    result = UnfreezeResult(path, output, found, [s.name for s in specs], keys)
    if verify:
        result.max_abs_error = _compare(model, output, keys)
    if to_keras:
        result.keras = os.path.join(output, "model.keras")
        keras_model = _write_keras(model.with_graph(graph_def), found, specs, result.keras)
        if verify:
            result.keras_max_abs_error = _compare_keras(model, keras_model)
    return result


def _pruned(model: Any) -> Any:
    """The graph without nodes the outputs do not need (so every variable gets a gradient)."""
    index = GraphIndex(model.graph_def)
    index.prune([o.tensor for o in model.outputs] + [i.tensor for i in model.inputs])
    return index.to_graph_def()


def _dynamic_batch_specs(model: Any) -> list[Any]:
    """Input specs whose first dimension stays unknown when the frozen graph left it so."""
    from rewriter.frontends.graphdef import read_graphdef
    from rewriter.ir.model import TensorSpec

    text = model.source.format == "graphdef_text"
    original = {n.name: n for n in read_graphdef(model.source.path, text=text).node}
    specs = []
    for spec in model.inputs:
        node = original.get(spec.node)
        shape = list(spec.shape)
        if node is not None and "shape" in node.attr and not node.attr["shape"].shape.unknown_rank:
            dims = node.attr["shape"].shape.dim
            if dims and dims[0].size < 0 and len(dims) == len(shape):
                shape[0] = None
        specs.append(TensorSpec(spec.name, spec.tensor, tuple(shape), spec.dtype))
    return specs


def _unique_keys(names: Sequence[str]) -> list[str]:
    keys: list[str] = []
    for name in names:
        key = _key(name)
        while key in keys:
            key += "_"
        keys.append(key)
    return keys


def _check_output(output: str) -> None:
    if os.path.isfile(output):
        raise UserError(f"output path {output!r} is an existing file; give a directory")
    if os.path.isdir(output) and os.listdir(output) and not os.path.exists(
            os.path.join(output, "saved_model.pb")):
        raise UserError(f"output directory {output!r} exists and is not a SavedModel; "
                        "choose a new path")


def _save(root: Any, output: str) -> None:
    out = os.path.abspath(output)
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".unfreeze-", dir=parent)
    try:
        staged = os.path.join(tmp, "sm")
        tf.saved_model.save(root, staged, signatures={"serving_default": root.serve})
        if os.path.isdir(out):
            shutil.rmtree(out)
        os.replace(staged, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _compare(model: Any, output: str, keys: Sequence[str]) -> float:
    """Max abs difference between the frozen graph and the SavedModel's serving_default."""
    from rewriter.verify.data import synthetic_inputs

    feeds = synthetic_inputs(model.inputs, 1, seed=0)[0]
    frozen = model.run(feeds)
    serving = tf.saved_model.load(output).signatures["serving_default"]
    got = serving(**{_key(s.name): tf.constant(feeds[s.name]) for s in model.inputs})
    worst = 0.0
    for spec, key in zip(model.outputs, keys, strict=True):
        a = np.asarray(frozen[spec.name], dtype=np.float64)
        b = np.asarray(got[key].numpy(), dtype=np.float64)
        if a.shape != b.shape:
            raise RuntimeError(f"output {spec.name}: shape {b.shape} != frozen {a.shape}")
        if a.size:
            worst = max(worst, float(np.max(np.abs(a - b))))
    return worst


def _write_keras(model: Any, weights: Sequence[Weight], specs: Sequence[Any], path: str) -> Any:
    """``path``: a Keras model of one FrozenGraphLayer (see :mod:`rewriter.surgery.keras_layer`)."""
    from rewriter.surgery.keras_layer import build_keras_model

    names = {w.name for w in weights}
    values = {n.name: const_to_array(n) for n in model.graph_def.node if n.name in names}
    keras_model = build_keras_model(lift_graph(model.graph_def, weights), weights,
                                    [values[w.name] for w in weights], specs,
                                    [o.tensor for o in model.outputs])
    keras_model.save(path)
    return keras_model


def _compare_keras(model: Any, keras_model: Any) -> float:
    from rewriter.verify.data import synthetic_inputs

    feeds = synthetic_inputs(model.inputs, 1, seed=0)[0]
    frozen = model.run(feeds)
    args = [feeds[s.name] for s in model.inputs]
    got = keras_model(args if len(args) > 1 else args[0])
    got = got if isinstance(got, (list, tuple)) else [got]
    return max(float(np.max(np.abs(np.asarray(frozen[o.name], np.float64) -
                                   np.asarray(g, np.float64)))) if np.size(g) else 0.0
               for o, g in zip(model.outputs, got, strict=True))


__all__ = ["WEIGHT_INPUTS", "UnfreezeResult", "Weight", "build_module", "find_weights",
           "lift_graph", "unfreeze"]
