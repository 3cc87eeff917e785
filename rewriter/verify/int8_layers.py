"""Where int8 loses accuracy: every intermediate tensor of a quantised ``.tflite`` against the
float graph it was converted from, and the operators where the error grows most.

LiteRT runs the file with ``experimental_preserve_all_tensors`` (intermediate buffers are kept,
not reused), so after each invoke every operator's output can be read and dequantised with its
own scale and zero point. The converter names a tensor after the TF nodes it fused
(``bn1/batchnorm/add_1;bn1/batchnorm/mul_1;conv1/Squeeze``): the candidates that are nodes of
the float graph (compared without ``PartitionedCall/`` scopes) and hold as many elements are
kept, and the one latest in the graph's topological order is the fused chain's output, so that
is the match; the signature's inputs and outputs match by name. The float graph runs once per
sample with all matched tensors fetched.

Per matched operator output, over the samples: ``rel_error`` = sqrt(mean over channels of MSE /
variance), the int8 error so far with each channel measured against its own spread (so ``x + c``
and ``k * x`` keep the error of ``x``, and 15 channels crushed next to one large channel show,
where a whole-tensor ratio would see only the large one); cosine; the quantisation step; and
``channel_spread`` = the largest channel's max |x| over the median channel's (a tensor whose
channels differ 100x in range loses most of them to one per-tensor int8 step). ``growth`` is ``rel_error`` minus the largest
``rel_error`` of the nearest matched tensors feeding the operator: the error this operator adds.

Range per quantised tensor, from the float values it should hold: ``median_abs`` (of the nonzero
values; ``ref_max_abs`` is the peak) and ``below_step``, the share of the nonzero values whose
magnitude is below one quantisation step (they read as 0 or one step: relative error >= 50%).
Exact zeros are left out of both, since the zero point holds them exactly (half a ReLU's output
is 0), and so are values below :data:`~rewriter.verify.range_stats.NEGLIGIBLE` of the largest magnitude the tensor holds
(below half an int16 step of that range: no 8- or 16-bit scale holds them, and float rounding
noise lies there, e.g. where a rule's ramps cancel, ~5e-6 of the peak); ``zeros`` is their
share. ``below_int16_step``: the share of the values other than exact zeros below the int16
step the 16x8 scheme would give the tensor (symmetric, the same range: the largest magnitude
the int8 tensor holds / 32767). A
tensor with more than :data:`~rewriter.verify.range_stats.STARVED` of its values below one step is *range-starved*: its
typical value is carried by one or two int8 levels, and only its few largest values survive.

Operators are grouped into *layers* by name scope (the Keras layer: ``model/elu1/...`` is layer
``elu1``); a layer's growth is the ``rel_error`` of its last output minus the largest of the
tensors entering it. The layers with the largest growth are where int8 loses accuracy.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.host.procmem import release
from rewriter.ir.graph import GraphIndex
from rewriter.ir.model import Model, WeightsFunction
from rewriter.verify.divergence import name_key
from rewriter.verify.range_stats import FIXED_RANGE, STARVED, RangeStats, range_section
from rewriter.verify.runners import RunnerError, TFLiteIO

#: How many layers the table lists (largest growth first).
WORST = 10
#: Elements per channel and sample below which a tensor is measured as a whole (a squeeze-excite
#: vector of shape 1x1x1xC has one value per channel: no spread to measure it against).
MIN_PER_CHANNEL = 16
_CALL = re.compile(r"^(?:Stateful)?PartitionedCall(?:_\d+)?$")
_QUANTISED = (np.int8, np.uint8, np.int16)
@dataclass
class OpError:
    """The int8 error of one operator's output against the float tensor it computes."""

    index: int  # operator index in the file's execution order (-1: a model input)
    op: str
    tensor: str  # the .tflite tensor name
    node: str  # the float graph node it matched
    shape: list[int]
    dtype: str
    step: float | None  # quantisation scale (None: float tensor)
    ref_max_abs: float
    rmse: float
    rel_error: float
    cosine: float
    channel_spread: float
    layer: str = ""
    inputs: list[str] = field(default_factory=list)  # nearest matched upstream nodes
    median_abs: float = math.nan  # median |x| of the nonzero float values
    below_step: float | None = None  # share of the nonzero values with |x| < step
    below_int16_step: float | None = None  # the same at the int16 step of the same range
    zeros: float = 0.0  # share of the float values that are 0 (or negligible, see NEGLIGIBLE)

    def to_json(self) -> dict[str, Any]:
        return {k: _fin(v) for k, v in self.__dict__.items()}

    @property
    def starved(self) -> bool:
        return (self.below_step is not None and self.below_step > STARVED
                and self.op not in FIXED_RANGE)


def _fin(v: Any) -> Any:
    return v if not isinstance(v, float) or math.isfinite(v) else str(v)


@dataclass
class LayerError:
    """One layer (a name scope): the error entering it, the error leaving it, and its ops."""

    layer: str
    first: int  # execution index of its first and last operator
    last: int
    ops: list[str]  # operator types, in order
    node: str  # the float node its last output matched
    error_in: float  # rel_error of the tensors entering it (the largest)
    error_out: float  # rel_error of its last output
    added: float  # rel_error of its int8 output against its float output on the int8 inputs
    cosine: float
    channel_spread: float  # the largest among its outputs
    step: float | None  # quantisation step of its last output
    fused: list[str] = field(default_factory=list)  # other layers the converter fused into it
    bias_share: float = math.nan  # share of ``added``'s MSE that is a per-channel mean shift
    #: per channel, the mean of (int8 output - float output on the int8 inputs): what a bias
    #: correction would subtract (not in the JSON)
    mean_error: np.ndarray | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: _fin(v) for k, v in self.__dict__.items() if k != "mean_error"}


@dataclass
class Int8Layers:
    """Every matched operator of the file in execution order, grouped into layers."""

    ops: list[OpError]
    layers: list[LayerError]
    unmatched: list[str]  # operator outputs no float node matched (op: tensor)
    samples: int
    seconds: float

    operators: int = 0  # operators in the file
    mode: str = "int8"  # the file's quantisation (--quantize int8 or 16x8), named in the text
    #: the range diagnosis (:func:`rewriter.tune.int8_range.diagnose`), set by the job
    range_report: dict[str, Any] | None = None

    def starved(self) -> list[OpError]:
        """The range-starved quantised tensors (see :data:`~rewriter.verify.range_stats.STARVED`), in execution order."""
        return [x for x in self.ops if x.starved]

    def cut_after(self, row: OpError) -> list[OpError]:
        """The first tensors after ``row`` that are *clean*, not range-starved with no
        range-starved tensor after them (nearest first, execution order): where a front end
        ending in ``row`` could hand over to the model without another starved tensor on the
        accelerator (a CQT's chain of starved and held tensors is crossed as a whole)."""
        consumers: dict[str, list[OpError]] = {}
        for x in self.ops:
            for node in x.inputs:
                consumers.setdefault(node, []).append(x)
        tainted: set[str] = set()  # starved, or a starved tensor after it
        for x in sorted(self.ops, key=lambda x: -x.index):
            if x.starved or any(c.node in tainted for c in consumers.get(x.node, [])):
                tainted.add(x.node)
        found: dict[str, OpError] = {}
        seen, stack = {row.node}, list(consumers.get(row.node, []))
        while stack:
            x = stack.pop()
            if x.node in seen:
                continue
            seen.add(x.node)
            if x.node in tainted:
                stack.extend(consumers.get(x.node, []))
            else:
                found[x.node] = x
        return sorted(found.values(), key=lambda x: x.index)

    def worst(self, n: int = WORST) -> list[LayerError]:
        return sorted((x for x in self.layers if math.isfinite(x.added)),
                      key=lambda x: -x.added)[:n]

    def describe(self) -> str:
        worst = self.worst(1)
        if not worst:
            return "int8 error per layer: no operator output matched a float tensor"
        w = worst[0]
        out = self.ops[-1] if self.ops else None
        return (f"{self.mode} loses most in layer {w.layer} ({', '.join(_short(w.ops))}): it adds "
                f"relative error {w.added:.3g} (entering {w.error_in:.3g}, leaving "
                f"{w.error_out:.3g})"
                + (f", its channel ranges differ {w.channel_spread:.0f}x"
                   if w.channel_spread >= 10 else "")
                + (f"; output relative error {out.rel_error:.3g}" if out else ""))

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.describe(), "samples": self.samples,
                "seconds": round(self.seconds, 3), "matched": len(self.ops),
                "unmatched": self.unmatched[:50],
                "worst": [w.layer for w in self.worst()],
                # the same layers as positions in ``layers``: one per occurrence (an unrolled
                # loop repeats a layer's name once per step)
                "worst_index": [self.layers.index(w) for w in self.worst()],
                "range": self.range_report if self.range_report is not None else range_section(self),
                "layers": [x.to_json() for x in self.layers],
                "ops": [x.to_json() for x in self.ops]}


def _short(ops: Sequence[str]) -> list[str]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return [op if n == 1 else f"{op} x{n}" for op, n in counts.items()]


class _Tensors:
    """A ``.tflite`` in LiteRT with every intermediate tensor kept after ``invoke``."""

    def __init__(self, path: str | os.PathLike) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        try:
            self.interp = Interpreter(
                model_path=os.fspath(path), experimental_preserve_all_tensors=True,
                experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
            self.interp.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise RunnerError(f"{path}: LiteRT cannot load it ({exc})") from None
        self.io = TFLiteIO(self.interp)
        self.details = {t["index"]: t for t in self.interp.get_tensor_details()}
        self.ops = self.interp._get_ops_details()  # the only op listing LiteRT offers

    def run(self, feeds: Mapping[str, np.ndarray], wanted: Sequence[int]) -> dict[int, np.ndarray]:
        for k, spec in enumerate(self.io.inputs):
            self.interp.set_tensor(self.io.in_details[k]["index"],
                                   self.io.encode(k, feeds[spec.name]))
        self.interp.invoke()
        return {i: self.dequantised(i) for i in wanted}

    def dequantised(self, index: int) -> np.ndarray:
        d = self.details[index]
        x = self.interp.get_tensor(index)
        q = d.get("quantization_parameters") or {}
        scales = np.asarray(q.get("scales", []), dtype=np.float64)
        if np.dtype(d["dtype"]).type not in _QUANTISED or scales.size != 1:
            return np.asarray(x, dtype=np.float64)
        zp = float(np.asarray(q.get("zero_points", [0]))[0])
        return (np.asarray(x, dtype=np.float64) - zp) * float(scales[0])

    def step(self, index: int) -> float | None:
        d = self.details[index]
        scales = (d.get("quantization_parameters") or {}).get("scales", [])
        if np.dtype(d["dtype"]).type not in _QUANTISED or len(scales) != 1:
            return None
        return float(scales[0])


def int8_layer_errors(path: str | os.PathLike, model: Model,
                      samples: Sequence[Mapping[str, np.ndarray]]) -> Int8Layers:
    """Run ``path`` (converted from ``model``) and ``model`` on ``samples``; every operator output
    that matches a float tensor is compared, and every layer's own error measured (see the
    module docstring)."""
    start = time.perf_counter()
    tfl = _Tensors(path)
    matches, unmatched = _match(tfl, model)
    position = {i: -1 for i in _input_indices(tfl)}
    position.update({i: k for k, op in enumerate(tfl.ops) for i in op["outputs"] if i >= 0})
    order = sorted((i for i in matches if i in position), key=lambda i: position[i])
    top = _top_scope([matches[i] for i in order if position[i] >= 0])
    layer = {i: layer_of(matches[i], top) if position[i] >= 0 else "input" for i in order}
    groups: list[list[int]] = []
    for i in (i for i in order if position[i] >= 0):
        if groups and layer[groups[-1][-1]] == layer[i]:
            groups[-1].append(i)
        else:
            groups.append([i])
    # One TF function over the graph at a time, its weights read from variables in place
    # (WeightsFunction): the cut graph's predictions first, then the float reference.
    from rewriter.verify.runners import match_names

    names, _ = match_names([s.name for s in model.inputs], [s.name for s in tfl.io.inputs],
                           "input")  # "model/Placeholder" is the file's "input_0"
    index = dict(zip((s.name for s in tfl.io.inputs), _input_indices(tfl)))
    cut = _Cut(model, [matches[g[-1]] for g in groups],
               {m: index[t] for m, t in names.items()}, matches)
    preds = [cut.run(tfl.run({names[k]: v for k, v in feeds.items()}, order))
             for feeds in samples]
    del cut
    release()
    total = {i: _Acc() for i in order}
    spans = {i: RangeStats(tfl, i) for i in order}
    own = {g[-1]: _Acc() for g in groups}
    fetch = sorted({f"{matches[i]}:0" for i in order if position[i] >= 0})
    reference = WeightsFunction(model.graph_def, [(s.tensor, s.shape, s.dtype)
                                                  for s in model.inputs], fetch) if fetch else None
    for feeds, pred in zip(samples, preds):
        got = tfl.run({names[k]: v for k, v in feeds.items()}, order)
        ref = reference(*(feeds[s.name] for s in model.inputs)) if reference else {}
        ref |= {f"{s.node}:0": np.asarray(feeds[s.name]) for s in model.inputs}
        for i in order:
            total[i].add(ref[f"{matches[i]}:0"], got[i])
            spans[i].add(ref[f"{matches[i]}:0"])
        for i, acc in own.items():
            if matches[i] in pred:
                acc.add(ref[f"{matches[i]}:0"], got[i], base=pred[matches[i]])
    del reference
    model.forget_functions()
    release()
    producers = _producers(tfl)
    rows = {i: spans[i].fill(_row(position[i], tfl, i, matches[i], total[i], layer[i]))
            for i in order}
    for i, row in rows.items():
        if row.index >= 0:
            row.inputs = [rows[u].node for u in _matched_upstream(producers, i, rows)]
    layers = [_layer([rows[i] for i in g], rows, own[g[-1]], top) for g in groups]
    return Int8Layers([rows[i] for i in order], layers, unmatched, len(samples),
                      time.perf_counter() - start, len(tfl.ops))


def tensor_ranges(path: str | os.PathLike, model: Model) -> dict[str, tuple[float, float]]:
    """Float node -> the (min, max) its int8 tensor in ``path`` can hold (scale and zero point
    of the tensor the converter made of it), for the nodes matched as above."""
    tfl = _Tensors(path)
    matches, _ = _match(tfl, model)
    out = {}
    for i, node in matches.items():
        d = tfl.details[i]
        q = d.get("quantization_parameters") or {}
        scales = np.asarray(q.get("scales", []), np.float64)
        if np.dtype(d["dtype"]).type not in _QUANTISED or scales.size != 1:
            continue
        info = np.iinfo(np.dtype(d["dtype"]))
        zp = float(np.asarray(q.get("zero_points", [0]))[0])
        out[node] = ((info.min - zp) * float(scales[0]), (info.max - zp) * float(scales[0]))
    return out


def layer_of(node: str, top: str | None) -> str:
    """The layer a node belongs to: the scope under the model's top scope (Keras layers), else
    the node's parent scope."""
    parts = name_key(node).split("/")
    if top is not None and len(parts) > 2 and parts[0] == top:
        return parts[1]
    return "/".join(parts[:-1]) or parts[0]


def _top_scope(nodes: Sequence[str]) -> str | None:
    firsts = {name_key(n).split("/")[0] for n in nodes if "/" in name_key(n)}
    return firsts.pop() if len(firsts) == 1 else None


def _layer(group: list[OpError], rows: Mapping[int, OpError], own: _Acc,
           top: str | None) -> LayerError:
    """One layer: the error entering it, leaving it, and the part it adds itself."""
    inside = {r.node for r in group}
    by_node = {r.node: r for r in rows.values()}
    entering = [by_node[n].rel_error for r in group for n in r.inputs
                if n not in inside and n in by_node]
    last = group[-1]
    fused = sorted({layer_of(p.split(":")[0], top) for r in group
                    for p in r.tensor.split(";")} - {last.layer})
    mean = (np.atleast_1d(np.asarray(own.err1, np.float64)) / own.n) if own.n else None
    share = math.nan
    if mean is not None and float(np.sum(own.err2)) > 0:
        share = float(np.sum(mean ** 2) * own.n / float(np.sum(own.err2)))
    return LayerError(
        last.layer, group[0].index, last.index, [r.op for r in group], last.node,
        max(entering, default=0.0), last.rel_error,
        _relative_error(own) if own.n else math.nan, last.cosine,
        max(r.channel_spread for r in group), last.step,
        [f for f in fused if f and "/" not in f and not _CALL.match(f)][:5], share, mean)


class _Cut:
    """The float graph with every layer's output cut from its consumers, which read a
    placeholder instead: fed the int8 tensors, each layer computes in float from the int8 values
    entering it (see the module docstring)."""

    def __init__(self, model: Model, cut_nodes: Sequence[str], inputs: Mapping[str, int],
                 matches: Mapping[int, str]) -> None:
        from rewriter.ir.graph import make_node

        g = GraphIndex(model.graph_def)
        shapes = _float_shapes(model)
        input_nodes = {s.node for s in model.inputs}
        self.cut = [n for n in dict.fromkeys(cut_nodes) if n in shapes and n not in input_nodes]
        places = {}
        for n in self.cut:
            shape, dtype = shapes[n]
            ph = g.add(make_node("Placeholder", g.unique_name(f"int8_cut/{n}"), [],
                                 {"shape": _shape_attr(shape)}, dtype=dtype, dtype_attr="dtype"))
            g.redirect(f"{n}:0", ph.name)
            places[n] = ph.name
        self.inputs = [(inputs.get(s.name), s) for s in model.inputs]
        feeds = [(s.tensor, s.shape, s.dtype) for s in model.inputs]
        feeds += [(f"{places[n]}:0", shapes[n][0], shapes[n][1]) for n in self.cut]
        self.fn = WeightsFunction(g.to_graph_def(), feeds, [f"{n}:0" for n in self.cut])
        self.index_of = {node: i for i, node in matches.items()}
        self.shapes = shapes

    def run(self, got: Mapping[int, np.ndarray]) -> dict[str, np.ndarray]:
        args = [np.asarray(got[i], s.dtype).reshape(_static(s.shape)) for i, s in self.inputs]
        args += [np.asarray(got[self.index_of[n]], self.shapes[n][1]).reshape(self.shapes[n][0])
                 for n in self.cut]
        outs = self.fn(*args) if self.cut else {}
        return {n: outs[f"{n}:0"] for n in self.cut}


def _static(shape: Sequence[int | None]) -> tuple[int, ...]:
    return tuple(1 if d is None or d < 0 else int(d) for d in shape)


def _shape_attr(shape: Sequence[int]) -> Any:
    from tensorflow.core.framework import attr_value_pb2, tensor_shape_pb2

    dims = [tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in shape]
    return attr_value_pb2.AttrValue(shape=tensor_shape_pb2.TensorShapeProto(dim=dims))


def _input_indices(tfl: _Tensors) -> list[int]:
    return [d["index"] for d in tfl.io.in_details]


def _match(tfl: _Tensors, model: Model) -> tuple[dict[int, str], list[str]]:
    """tflite tensor index -> float node (output 0), for operator outputs and model inputs."""
    g = GraphIndex(model.graph_def)
    order = {name_key(n.name): k for k, n in enumerate(g.topological_order())}
    nodes = {name_key(n.name): n.name for n in g}
    sizes = {n: int(np.prod(shape)) for n, (shape, _) in _float_shapes(model).items()}
    matches: dict[int, str] = {}
    for k, spec in enumerate(tfl.io.inputs):
        ours = next((s for s in model.inputs if s.name == spec.name), None)
        if ours is None and len(model.inputs) == len(tfl.io.inputs):
            ours = model.inputs[k]
        if ours is not None:
            matches[tfl.io.in_details[k]["index"]] = ours.node
    outputs = {d["index"]: name for name, d in zip(tfl.io.outputs, tfl.io.out_details)}
    by_output = {o.name: _through_identity(g, o.node) for o in model.outputs}
    unmatched = []
    for op in tfl.ops:
        for i in op["outputs"]:
            if i < 0:
                continue
            d = tfl.details[i]
            if i in outputs and outputs[i] in by_output:
                matches[i] = by_output[outputs[i]]
                continue
            size = int(np.prod(d["shape"])) if len(d["shape"]) else 1
            found = [nodes[key] for part in d["name"].split(";")
                     if (key := _known(name_key(part.split(":")[0]), nodes)) is not None
                     and sizes.get(nodes[key]) == size]
            if found:
                matches[i] = max(found, key=lambda n: order.get(name_key(n), -1))
            elif op["op_name"] not in ("QUANTIZE", "DEQUANTIZE"):
                unmatched.append(f"{op['op_name']}: {d['name']}")
    return matches, unmatched


def _known(key: str, nodes: Mapping[str, str]) -> str | None:
    """``key`` if it names a node, else ``key`` without the digits the converter appends to
    keep its names unique (``conv/convolution1`` for ``conv/convolution``)."""
    if key in nodes:
        return key
    bare = key.rstrip("0123456789")
    return bare if bare != key and bare in nodes else None


def _through_identity(g: GraphIndex, node: str) -> str:
    """An output's node, or the node its Identity chain reads (it names the layer)."""
    src = g.skip_identity(node)
    return src.name if src is not None and src.op not in ("Placeholder", "Const") else node


def _float_shapes(model: Model) -> dict[str, tuple[list[int], str]]:
    """(shape, dtype) of output 0 of every float node whose shape is static in the graph (from
    a graph imported for this and dropped: no TF function over the weights stays behind)."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(model.graph_def, name="")
    shapes = {}
    for op in graph.get_operations():
        if not op.outputs or op.type in ("Const", "NoOp"):
            continue
        t = op.outputs[0]
        if not t.dtype.is_floating or not t.shape.is_fully_defined():
            continue
        shapes[op.name] = (list(t.shape.as_list()), t.dtype.name)
    return shapes


class _Acc:
    """Sums over samples, per channel (last axis of a tensor of rank >= 3 with at least
    :data:`MIN_PER_CHANNEL` values per channel; one channel otherwise): squared and signed
    error, sum and squares of the reference, dot products, max |ref|."""

    def __init__(self) -> None:
        self.err2: np.ndarray | float = 0.0
        self.err1: np.ndarray | float = 0.0  # signed error, per channel
        self.ref1: np.ndarray | float = 0.0
        self.ref2: np.ndarray | float = 0.0
        self.test2 = self.dot = 0.0
        self.n = 0  # elements per channel
        self.channel_max: np.ndarray | float = 0.0

    def add(self, ref: np.ndarray, test: np.ndarray, base: np.ndarray | None = None) -> None:
        """``test`` against ``base`` (default ``ref``); spreads and ranges from ``ref``."""
        r = np.asarray(ref, np.float64)
        if np.size(test) != r.size or (base is not None and np.size(base) != r.size):
            return
        t = np.asarray(test, np.float64).reshape(r.shape)
        b = r if base is None else np.asarray(base, np.float64).reshape(r.shape)
        ok = np.isfinite(r) & np.isfinite(t) & np.isfinite(b)
        r, t, b = (np.where(ok, a, 0.0) for a in (r, t, b))
        cols = r.shape[-1] if r.ndim >= 3 and r.size >= MIN_PER_CHANNEL * r.shape[-1] else 1
        r2, t2, b2 = (a.reshape(-1, cols) for a in (r, t, b))
        self.err2 = self.err2 + ((t2 - b2) ** 2).sum(axis=0)
        self.err1 = self.err1 + (t2 - b2).sum(axis=0)
        self.ref1 = self.ref1 + r2.sum(axis=0)
        self.ref2 = self.ref2 + (r2 * r2).sum(axis=0)
        self.test2 += float(np.sum(t * t))
        self.dot += float(np.sum(r * t))
        self.n += r2.shape[0]
        self.channel_max = np.maximum(self.channel_max, np.abs(r2).max(axis=0, initial=0.0))


def _relative_error(acc: _Acc) -> float:
    """sqrt(mean over channels of MSE / variance): each channel's error against its own
    spread (channels with no spread, e.g. dead ReLUs, left out; RMS where none has any)."""
    err2, ref1, ref2 = (np.atleast_1d(np.asarray(v, np.float64)) for v in
                        (acc.err2, acc.ref1, acc.ref2))
    mse = err2 / acc.n
    var = np.maximum(ref2 / acc.n - (ref1 / acc.n) ** 2, 0.0)
    live = var > 1e-12 * max(float(var.max(initial=0.0)), 1e-30)
    if live.any():
        return float(np.sqrt(np.mean(mse[live] / var[live])))
    ms = float(ref2.sum() / (acc.n * ref2.size))
    total = float(mse.mean())
    return math.sqrt(total / ms) if ms > 0 else (0.0 if total == 0 else math.inf)


def _row(position: int, tfl: _Tensors, tensor: int, node: str, acc: _Acc,
         layer: str) -> OpError:
    d = tfl.details[tensor]
    size = acc.n * np.size(acc.err2)
    rmse = math.sqrt(float(np.sum(acc.err2)) / size) if size else math.nan
    ref2 = float(np.sum(acc.ref2))
    norm = math.sqrt(ref2 * acc.test2)
    cosine = acc.dot / norm if norm > 0 else (1.0 if ref2 == acc.test2 == 0 else 0.0)
    ch = np.atleast_1d(acc.channel_max)
    spread = float(ch.max() / np.median(ch)) if ch.size > 1 and np.median(ch) > 0 else 1.0
    op = "INPUT" if position < 0 else tfl.ops[position]["op_name"]
    return OpError(position, op, d["name"], node, [int(x) for x in d["shape"]],
                   np.dtype(d["dtype"]).name, tfl.step(tensor), float(ch.max(initial=0.0)),
                   rmse, _relative_error(acc) if acc.n else math.nan, cosine, spread, layer)


def _producers(tfl: _Tensors) -> dict[int, dict[str, Any]]:
    return {i: op for op in tfl.ops for i in op["outputs"] if i >= 0}


def _matched_upstream(producers: Mapping[int, Mapping[str, Any]], tensor: int,
                      rows: Mapping[int, OpError]) -> list[int]:
    """The nearest matched tensors feeding the operator that produces ``tensor``."""
    found: list[int] = []
    seen: set[int] = set()
    stack = [i for i in producers[tensor]["inputs"] if i >= 0]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i in rows:
            found.append(i)
        elif i in producers:
            stack.extend(j for j in producers[i]["inputs"] if j >= 0)
    return sorted(found)
