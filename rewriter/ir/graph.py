"""Small helpers over a ``GraphDef``: node index, consumers, const values, node builders, pruning.

Everything here is plain protobuf and numpy work; TensorFlow is imported only for its proto
classes and ``make_tensor_proto``/``make_ndarray``. The index is built once in O(nodes + edges)
and updated incrementally by the rewrite engine, so matching stays linear in graph size.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, types_pb2

GraphDef = graph_pb2.GraphDef
NodeDef = node_def_pb2.NodeDef

_NP_TO_TF = {
    np.dtype("float32"): types_pb2.DT_FLOAT, np.dtype("float64"): types_pb2.DT_DOUBLE,
    np.dtype("float16"): types_pb2.DT_HALF, np.dtype("int32"): types_pb2.DT_INT32,
    np.dtype("int64"): types_pb2.DT_INT64, np.dtype("int8"): types_pb2.DT_INT8,
    np.dtype("uint8"): types_pb2.DT_UINT8, np.dtype("bool"): types_pb2.DT_BOOL,
    np.dtype("int16"): types_pb2.DT_INT16,
}
_TF_TO_NP = {v: k for k, v in _NP_TO_TF.items()}


def tf_dtype(dtype: Any) -> int:
    """The ``types_pb2`` enum for a numpy dtype (or dtype name)."""
    return _NP_TO_TF[np.dtype(dtype)]


def np_dtype(tf_enum: int) -> np.dtype:
    """The numpy dtype of a ``types_pb2`` enum (raises KeyError for resource/string types)."""
    return _TF_TO_NP[tf_enum]


def parse_input(ref: str) -> tuple[str, int, bool]:
    """Split a NodeDef input string into (node name, output index, is control input)."""
    control = ref.startswith("^")
    if control:
        ref = ref[1:]
    name, _, idx = ref.partition(":")
    return name, int(idx) if idx else 0, control


def data_inputs(node: NodeDef) -> list[str]:
    """The data inputs of ``node`` (its control inputs, ``^name``, left out)."""
    return [r for r in node.input if not r.startswith("^")]


def tensor_ref(node: str, index: int = 0) -> str:
    """The NodeDef input string for output ``index`` of ``node``."""
    return node if index == 0 else f"{node}:{index}"


def const_to_array(node: NodeDef) -> np.ndarray:
    """The value of a ``Const`` node as a numpy array."""
    import tensorflow as tf

    return np.asarray(tf.make_ndarray(node.attr["value"].tensor))


def make_const(name: str, value: Any, dtype: Any = None) -> NodeDef:
    """A ``Const`` node holding ``value`` (numpy array or scalar)."""
    import tensorflow as tf

    arr = np.asarray(value, dtype=dtype) if dtype is not None else np.asarray(value)
    if arr.dtype == np.float64 and dtype is None:
        arr = arr.astype(np.float32)
    node = NodeDef(name=name, op="Const")
    node.attr["dtype"].type = tf_dtype(arr.dtype)
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(arr, dtype=arr.dtype,
                                                            shape=arr.shape))
    return node


def make_node(op: str, name: str, inputs: Iterable[str], attrs: Mapping[str, Any] | None = None,
              dtype: Any = "float32", dtype_attr: str | None = "T") -> NodeDef:
    """A NodeDef of ``op`` with ``inputs``; ``dtype`` sets attr ``T`` unless ``dtype_attr`` is None.

    ``attrs`` values may be ``AttrValue`` protos, ints, floats, bools, strings/bytes, lists of ints,
    or numpy dtypes (set as ``type``).
    """
    node = NodeDef(name=name, op=op)
    node.input.extend(inputs)
    if dtype_attr and dtype is not None:
        node.attr[dtype_attr].type = tf_dtype(dtype)
    for key, val in (attrs or {}).items():
        set_attr(node, key, val)
    return node


def set_attr(node: NodeDef, key: str, val: Any) -> None:
    """Set attribute ``key`` of ``node`` from a Python value."""
    av = node.attr[key]
    if isinstance(val, attr_value_pb2.AttrValue):
        av.CopyFrom(val)
    elif isinstance(val, bool):
        av.b = val
    elif isinstance(val, int):
        av.i = val
    elif isinstance(val, float):
        av.f = val
    elif isinstance(val, str):
        av.s = val.encode()
    elif isinstance(val, bytes):
        av.s = val
    elif isinstance(val, np.dtype) or (isinstance(val, type) and issubclass(val, np.generic)):
        av.type = tf_dtype(val)
    elif isinstance(val, (list, tuple)):
        av.list.Clear()
        if all(isinstance(v, int) for v in val):
            av.list.i.extend(val)
        elif all(isinstance(v, float) for v in val):
            av.list.f.extend(val)
        else:
            av.list.s.extend(v.encode() if isinstance(v, str) else v for v in val)
    else:
        raise TypeError(f"cannot set attr {key!r} from {type(val).__name__}")


def node_dtype(node: NodeDef,
               keys: tuple[str, ...] = ("T", "dtype", "out_type")) -> np.dtype | None:
    """The element dtype of a node: the first of the type attributes ``keys`` it sets (default:
    what it computes in, ``T`` or ``dtype``), when it has one."""
    for key in keys:
        if key in node.attr and node.attr[key].type:
            try:
                return np_dtype(node.attr[key].type)
            except KeyError:
                return None
    return None


def is_back_edge(src: NodeDef, dst: NodeDef) -> bool:
    """Whether the edge ``src -> dst`` is a TF1 while loop's back edge (NextIteration -> Merge),
    the one kind of cycle a valid GraphDef holds."""
    return src.op == "NextIteration" and dst.op in ("Merge", "RefMerge")


class GraphIndex:
    """An index over a GraphDef: nodes by name, consumers of each node, const values.

    Mutations go through :meth:`add`, :meth:`remove`, :meth:`replace_input` and
    :meth:`redirect` so the consumer index stays correct; :meth:`to_graph_def` writes the result
    back in the original order with new nodes appended.
    """

    def __init__(self, graph_def: GraphDef) -> None:
        self.library = graph_def.library
        self.versions = graph_def.versions
        self.nodes: dict[str, NodeDef] = {}
        self._order: list[str] = []
        self._consumers: dict[str, set[str]] = defaultdict(set)
        for node in graph_def.node:
            n = NodeDef()
            n.CopyFrom(node)
            self.nodes[n.name] = n
            self._order.append(n.name)
        for node in self.nodes.values():
            for ref in node.input:
                self._consumers[parse_input(ref)[0]].add(node.name)

    def __contains__(self, name: str) -> bool:
        return name in self.nodes

    def __getitem__(self, name: str) -> NodeDef:
        return self.nodes[name]

    def __iter__(self):
        return (self.nodes[n] for n in self._live_order())

    def _live_order(self):
        """Names in insertion order, once each (a removed then re-added name keeps its slot)."""
        seen: set[str] = set()
        for n in self._order:
            if n in self.nodes and n not in seen:
                seen.add(n)
                yield n

    def __len__(self) -> int:
        return len(self.nodes)

    # ------------------------------------------------------------------ queries
    def producer(self, ref: str) -> NodeDef | None:
        """The node producing input string ``ref`` (``"a:1"``, ``"^a"``, ``"a"``)."""
        return self.nodes.get(parse_input(ref)[0])

    def consumers(self, name: str) -> list[NodeDef]:
        """Nodes that read any output of ``name`` (data or control)."""
        return [self.nodes[c] for c in sorted(self._consumers.get(name, ())) if c in self.nodes]

    def data_inputs(self, node: NodeDef) -> list[str]:
        return data_inputs(node)

    def skip_identity(self, ref: str) -> NodeDef | None:
        """The producer of ``ref`` after following Identity/Snapshot chains."""
        node = self.producer(ref)
        while node is not None and node.op in ("Identity", "Snapshot") and node.input:
            node = self.producer(node.input[0])
        return node

    def const_value(self, ref: str) -> np.ndarray | None:
        """Value of ``ref`` when it is a Const (through Identity chains), else None."""
        node = self.skip_identity(ref)
        if node is None or node.op != "Const":
            return None
        return const_to_array(node)

    def unique_name(self, base: str) -> str:
        """A node name not yet used in the graph, derived from ``base``."""
        if base not in self.nodes:
            return base
        i = 1
        while f"{base}_{i}" in self.nodes:
            i += 1
        return f"{base}_{i}"

    # ---------------------------------------------------------------- mutations
    def add(self, node: NodeDef) -> NodeDef:
        if node.name in self.nodes:
            raise ValueError(f"node {node.name!r} already exists")
        self.nodes[node.name] = node
        self._order.append(node.name)
        for ref in node.input:
            self._consumers[parse_input(ref)[0]].add(node.name)
        return node

    def remove(self, name: str) -> None:
        node = self.nodes.pop(name)
        for ref in node.input:
            self._consumers[parse_input(ref)[0]].discard(name)

    def set_inputs(self, node: NodeDef, inputs: Iterable[str]) -> None:
        for ref in node.input:
            self._consumers[parse_input(ref)[0]].discard(node.name)
        del node.input[:]
        node.input.extend(inputs)
        for ref in node.input:
            self._consumers[parse_input(ref)[0]].add(node.name)

    def redirect(self, old: str, new: str) -> None:
        """Make every consumer of tensor ``old`` read tensor ``new`` instead (data inputs)."""
        old_node, old_idx, _ = parse_input(old)
        for consumer in self.consumers(old_node):
            refs = list(consumer.input)
            changed = False
            for i, ref in enumerate(refs):
                n, idx, ctrl = parse_input(ref)
                if n == old_node and idx == old_idx and not ctrl:
                    refs[i] = new
                    changed = True
            if changed:
                self.set_inputs(consumer, refs)

    def rename(self, old: str, new: str) -> None:
        """Rename node ``old`` to ``new`` (unused name) and rewrite every reference to it."""
        if new in self.nodes:
            raise ValueError(f"node {new!r} already exists")
        users = self.consumers(old)
        node = self.nodes.pop(old)
        for ref in node.input:
            self._consumers[parse_input(ref)[0]].discard(old)
        node.name = new
        self.add(node)
        for user in users:
            refs = []
            for ref in user.input:
                n, idx, ctrl = parse_input(ref)
                refs.append(ref if n != old else ("^" + new if ctrl else tensor_ref(new, idx)))
            self.set_inputs(user, refs)
        self._consumers.pop(old, None)

    def prune(self, keep: Iterable[str]) -> int:
        """Remove nodes that no kept node depends on; returns how many were removed."""
        live: set[str] = set()
        queue = deque(parse_input(k)[0] for k in keep)
        while queue:
            name = queue.popleft()
            if name in live or name not in self.nodes:
                continue
            live.add(name)
            queue.extend(parse_input(r)[0] for r in self.nodes[name].input)
        dead = [n for n in self.nodes if n not in live]
        for n in dead:
            self.remove(n)
        return len(dead)

    def topological_order(self) -> list[NodeDef]:
        """Nodes in an order where every node follows its inputs (Kahn's algorithm).

        The back edge of a TF1 while loop (``NextIteration`` -> ``Merge``) is not an ordering
        constraint: a loop's ``Merge`` comes after its ``Enter`` and before its body, as TF's
        own executor schedules it. Any other cycle raises ``ValueError`` naming a node on it.
        """
        def edges(node: NodeDef) -> list[str]:
            return [src for src in (parse_input(r)[0] for r in node.input)
                    if src in self.nodes and not is_back_edge(self.nodes[src], node)]

        indeg = {n: len(edges(node)) for n, node in self.nodes.items()}
        queue = deque(n for n in self._live_order() if indeg[n] == 0)
        out: list[NodeDef] = []
        while queue:
            name = queue.popleft()
            out.append(self.nodes[name])
            for c in sorted(self._consumers.get(name, ())):
                if c not in indeg:
                    continue
                # one decrement per input edge
                k = sum(1 for src in edges(self.nodes[c]) if src == name)
                if k:
                    indeg[c] -= k
                    if indeg[c] == 0:
                        queue.append(c)
        if len(out) != len(self.nodes):
            stuck = next(n for n in self._live_order() if indeg[n] > 0)
            raise ValueError(f"graph has a cycle through node {stuck!r} "
                             f"({self.nodes[stuck].op}) that is not a while loop's back edge")
        return out

    def to_graph_def(self) -> GraphDef:
        gd = GraphDef()
        gd.versions.CopyFrom(self.versions)
        gd.library.CopyFrom(self.library)
        gd.node.extend(self.nodes[n] for n in self._live_order())
        return gd
