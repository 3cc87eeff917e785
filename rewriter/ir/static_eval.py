"""Static evaluation over a GraphDef: a constant subgraph's value with numpy, and tensor shapes
from TensorFlow's shape inference.

:func:`static_value` follows a tensor upwards through constants and cheap ops (reshapes,
elementwise arithmetic, comparisons, shape plumbing) and returns its value, or None at the first
non-constant input; an ``env`` supplies values of tensors taken as known (a while loop's
counters in one iteration). :func:`tensor_shape` caches one shape inference per graph version.
Rules use both through :mod:`rewriter.rules.base`; graph-level code (loop unrolling) directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, const_to_array, np_dtype, parse_input


def _norm_ref(ref: str) -> str:
    """``"a"``, ``"a:0"`` -> ``"a:0"``: one spelling of a tensor for dict keys."""
    name, idx, _ = parse_input(ref)
    return f"{name}:{idx}"


class _NotStatic(Exception):
    """An op configuration the numpy evaluator does not handle."""


def _ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.ravel(a)]


def _nonneg(v: list[int]) -> list[int]:
    if any(d < 0 for d in v):
        raise _NotStatic("inferred (-1) split size")
    return v


def _squeeze(node: NodeDef, a: np.ndarray) -> np.ndarray:
    dims = tuple(node.attr["squeeze_dims"].list.i) if "squeeze_dims" in node.attr else ()
    return np.squeeze(a, axis=dims or None)


def _cast(node: NodeDef, a: np.ndarray) -> np.ndarray:
    dt = np_dtype(node.attr["DstT"].type)
    return a.astype(np.float64) if dt.kind == "f" else a.astype(dt)


def _strided_slice(node: NodeDef, x: np.ndarray, begin: np.ndarray, end: np.ndarray,
                   strides: np.ndarray) -> np.ndarray:
    if node.attr["ellipsis_mask"].i:
        raise _NotStatic("ellipsis mask")
    bm, em, sm, nm = (node.attr[k].i for k in ("begin_mask", "end_mask", "shrink_axis_mask",
                                                "new_axis_mask"))
    index: list[Any] = []
    for i, (b0, e0, st) in enumerate(zip(_ints(begin), _ints(end), _ints(strides), strict=True)):
        if nm >> i & 1:  # x[None, ...]: Keras's causal mask is band_part(ones)[None, None]
            index.append(np.newaxis)
        elif sm >> i & 1:
            index.append(b0)
        else:
            index.append(slice(None if bm >> i & 1 else b0, None if em >> i & 1 else e0, st))
    return np.asarray(x[tuple(index)])


def _reduce(fn):
    def run(node: NodeDef, a: np.ndarray, axes: np.ndarray) -> np.ndarray:
        return fn(a, axis=tuple(_ints(axes)) or None, keepdims=node.attr["keep_dims"].b)
    return run


def _band_part(a: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``tf.linalg.band_part``: keep ``lower`` sub- and ``upper`` super-diagonals (-1: all)."""
    rows, cols = a.shape[-2], a.shape[-1]
    offset = np.arange(rows)[:, None] - np.arange(cols)[None, :]
    lo, up = int(np.asarray(lower)), int(np.asarray(upper))
    keep = ((lo < 0) | (offset <= lo)) & ((up < 0) | (-offset <= up))
    return np.where(keep, a, np.zeros_like(a))


def _out(fn):
    """Adapt ``fn(*args)`` to the evaluator's ``(node, *args)`` calling convention."""
    return lambda node, *args: fn(*args)


_EVAL: dict[str, Any] = {
    "Identity": _out(lambda a: a), "Snapshot": _out(lambda a: a), "Neg": _out(np.negative),
    "Rsqrt": _out(lambda a: 1.0 / np.sqrt(a)), "Sqrt": _out(np.sqrt),
    "Cos": _out(np.cos), "Sin": _out(np.sin), "FloorMod": _out(np.mod),
    "Transpose": _out(lambda a, p: np.transpose(a, _ints(p))),
    "Slice": _out(lambda a, b, s: a[tuple(slice(i, None if n < 0 else i + n)
                                          for i, n in zip(_ints(b), _ints(s), strict=True))]),
    "Pad": _out(lambda a, p: np.pad(a, np.reshape(_ints(p), (-1, 2)))),
    "PadV2": _out(lambda a, p, c: np.pad(a, np.reshape(_ints(p), (-1, 2)),
                                          constant_values=c.item())),
    "Reciprocal": _out(lambda a: 1.0 / a), "Square": _out(np.square),
    "Squeeze": _squeeze, "Cast": _cast,
    "Mul": _out(np.multiply), "Add": _out(np.add), "AddV2": _out(np.add),
    "Sub": _out(np.subtract), "RealDiv": _out(np.divide), "FloorDiv": _out(np.floor_divide),
    "Maximum": _out(np.maximum), "Minimum": _out(np.minimum),
    "Reshape": _out(lambda a, s: np.reshape(a, tuple(_ints(s)))),
    "ExpandDims": _out(lambda a, d: np.expand_dims(a, _ints(d)[0])),
    "StridedSlice": _strided_slice,
    "Pack": lambda n, *xs: np.stack(xs, axis=n.attr["axis"].i),
    "ConcatV2": _out(lambda *xs: np.concatenate(xs[:-1], axis=_ints(xs[-1])[0])),
    "Fill": _out(lambda dims, v: np.full(tuple(_ints(dims)), v)),
    "GatherV2": lambda n, p, i, ax: np.take(p, i, axis=_ints(ax)[0]),
    "Range": _out(lambda a, b, d: np.arange(a, b, d)),
    "Prod": _reduce(np.prod), "Sum": _reduce(np.sum),
    "Max": _reduce(np.max), "Min": _reduce(np.min),
    "Less": _out(np.less), "LessEqual": _out(np.less_equal), "Greater": _out(np.greater),
    "GreaterEqual": _out(np.greater_equal), "Equal": _out(np.equal),
    "NotEqual": _out(np.not_equal), "LogicalAnd": _out(np.logical_and),
    "LogicalOr": _out(np.logical_or), "LogicalNot": _out(np.logical_not),
    "MatrixBandPart": _out(_band_part),  # Keras's causal mask: band_part(ones, -1, 0)
}
#: Ops with several outputs: a list of values, one per output.
_MULTI: dict[str, Any] = {
    "Unpack": lambda n, a: list(np.moveaxis(a, n.attr["axis"].i, 0)),
    "Split": lambda n, ax, a: np.split(a, n.attr["num_split"].i, axis=_ints(ax)[0]),
    "SplitV": lambda n, a, sizes, ax: np.split(
        a, np.cumsum(_nonneg(_ints(sizes)))[:-1].tolist(), axis=_ints(ax)[0]),
}
#: Ops whose value is their input's static shape (no need for the input's value).
_SHAPE_OF = {"Shape": lambda s: np.asarray(s), "Size": lambda s: np.asarray(np.prod(s)),
             "Rank": lambda s: np.asarray(len(s))}


def eval_node(node: NodeDef, args: list[np.ndarray]) -> np.ndarray | None:
    """``node`` computed with numpy on the values ``args`` of its data inputs, or None when
    the evaluator does not know its op (or this configuration of it)."""
    fn = _EVAL.get(node.op)
    if fn is None:
        return None
    try:
        return np.asarray(fn(node, *args))
    except (_NotStatic, ValueError, IndexError, TypeError):
        return None


def static_value(g: GraphIndex, ref: str, limit: int = 64,
                 env: Mapping[str, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, list[str]] | None:
    """Evaluate ``ref`` with numpy when it depends on constants (and static shapes) only.

    Follows Const, Identity, Reshape/Squeeze/ExpandDims, elementwise arithmetic (Rsqrt, Mul,
    AddV2, Sub, Neg, ...) and shape plumbing (Shape of a statically shaped tensor, StridedSlice,
    Pack, ConcatV2, Prod, Fill, GatherV2, Range, Cast), at most ``limit`` nodes. Float results
    are float64 (so folded weights are computed in float64 and cast once). Returns (value, names
    of the non-Const nodes evaluated) or None when something non-constant is reached.
    ``env`` gives values of tensors (``"node:i"``) to take as known, e.g. a loop variable's
    value in one iteration.
    """
    memo: dict[str, Any] = {}
    known = {_norm_ref(k): np.asarray(v) for k, v in (env or {}).items()}
    visited: list[str] = []
    budget = [limit]

    def ev(r: str) -> np.ndarray | None:
        name, idx, ctrl = parse_input(r)
        if not ctrl and f"{name}:{idx}" in known:
            return known[f"{name}:{idx}"]
        node = g.nodes.get(name)
        budget[0] -= 1
        if node is None or ctrl or budget[0] < 0 or (idx != 0 and node.op not in _MULTI):
            return None
        if name in memo:
            out = memo[name]
            return out[idx] if isinstance(out, list) else out
        refs = [i for i in node.input if not i.startswith("^")]
        if node.op == "Const":
            val = const_to_array(node)
            val = val.astype(np.float64) if val.dtype.kind == "f" else val
        elif node.op in _SHAPE_OF and refs:
            shape = tensor_shape(g, refs[0])
            if shape is None or any(d is None for d in shape):
                return None
            val = _SHAPE_OF[node.op](shape).astype(np_dtype(node.attr["out_type"].type))
            visited.append(name)
        elif node.op in _EVAL or node.op in _MULTI:
            args = []
            for i in refs:
                a = ev(i)
                if a is None:
                    return None
                args.append(a)
            fn = _EVAL.get(node.op) or _MULTI[node.op]
            try:
                val = fn(node, *args)
            except (_NotStatic, ValueError, IndexError, TypeError):
                return None
            if node.op not in ("Identity", "Snapshot"):
                visited.append(name)
        else:
            return None
        if isinstance(val, list):
            memo[name] = [np.asarray(v) for v in val]
            return memo[name][idx] if idx < len(val) else None
        memo[name] = np.asarray(val)
        return memo[name] if idx == 0 else None

    value = ev(ref)
    return None if value is None else (value, visited)


def tensor_shape(g: GraphIndex, ref: str) -> tuple[int | None, ...] | None:
    """The static shape of tensor ``ref`` from TensorFlow's shape inference, or None if unknown.

    Computed for the whole graph at once (one ``import_graph_def``) and cached on the index; the
    cache is rebuilt only when the graph changed since, so a sweep stays linear.
    """
    name, idx, _ = parse_input(ref)
    stamp = (len(g.nodes), len(getattr(g, "_order", ())))
    cache = getattr(g, "_rewriter_shapes", None)
    if cache is None or (cache.get("__stamp__") != stamp
                         and (name not in cache or _unknown(cache[name], idx))):
        cache = _infer_shapes(g)
        cache["__stamp__"] = stamp
        g._rewriter_shapes = cache  # type: ignore[attr-defined]
    shapes = cache.get(name)
    if shapes is None or idx >= len(shapes):
        return None
    return shapes[idx]


def _unknown(shapes: list | None, idx: int) -> bool:
    """Whether a cached entry leaves output ``idx``'s shape (partly) unknown: worth asking
    again once the graph changed (an unrolled loop's results have static shapes)."""
    if shapes is None or idx >= len(shapes) or shapes[idx] is None:
        return True
    return any(d is None for d in shapes[idx])


def _infer_shapes(g: GraphIndex) -> dict:
    import tensorflow as tf

    out: dict = {}
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.import_graph_def(g.to_graph_def(), name="")
    except Exception:  # an unimportable graph has no shapes to offer
        return out
    for op in graph.get_operations():
        shapes = []
        for t in op.outputs:
            dims = t.shape.as_list() if t.shape.rank is not None else None
            shapes.append(tuple(dims) if dims is not None else None)
        out[op.name] = shapes
    return out
