"""The machinery of :mod:`rewriter.rules.while_unroll`: trip counts and body copies.

A loop is unrolled by symbolic execution: each iteration's body is copied with its inputs bound
to the previous iteration's values. Values are of three kinds: a tensor of the new graph (a
ref string), a static integer/boolean array (loop counters and indices, folded away with
numpy so every copy reads fixed indices), and a :class:`TList` (a TensorList, held as the
tensors of its elements: reading element ``t`` of an input list becomes a slice of the tensor
it was made from, writing element ``t`` records the tensor, stacking becomes a ``Pack``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, node_dtype, parse_input, tensor_ref
from rewriter.ir.loops import Loop
from rewriter.ir.static_eval import eval_node, static_value, tensor_shape
from rewriter.rules._lists import (
    GET,
    LENGTH,
    LIST_OPS,
    SET,
    STACK,
    TList,
    UnrollError,
    list_input,
    make_list,
)

#: Loops with more iterations than this are not unrolled.
MAX_TRIP_COUNT = 1024
#: Nor loops whose unrolled body would exceed this many nodes.
MAX_UNROLLED_NODES = 200_000
#: Static (folded) values stay small: counters, indices, shapes.
_MAX_STATIC = 64
#: Ops never copied: they have effects or state an unrolled copy would not reproduce.
_STATEFUL = frozenset({"RandomUniform", "RandomStandardNormal", "RandomUniformInt",
                       "TruncatedNormal", "Multinomial", "StatelessRandomUniformV2", "Print",
                       "PrintV2", "Assert", "AssignVariableOp", "AssignAddVariableOp",
                       "ReadVariableOp", "VarHandleOp", "Stack", "StackV2", "StackPushV2",
                       "StackPopV2"})
_ALIASES = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient"})


Value = Any  # str (tensor ref) | np.ndarray (static) | TList


def is_static(v: Value) -> bool:
    return isinstance(v, np.ndarray)


#: Ops through which zeros pass: x*0 = 0, 0@W = 0 (finite x, W), reshapes of 0 are 0.
_ZERO_ABSORBING = frozenset({"Mul", "MatMul", "BatchMatMulV2", "BatchMatMulV3"})
_ZERO_RESHAPING = frozenset({"Reshape", "Squeeze", "ExpandDims", "Transpose"}) | _ALIASES
_ZERO_NEUTRAL = frozenset({"Add", "AddV2", "BiasAdd"})
#: Ops folded when every input of a copy is constant, and the largest value folded.
_CONST_FOLDABLE = frozenset({"Split", "BiasAdd", "Add", "AddV2", "Sub", "Mul", "Squeeze",
                             "Reshape", "ExpandDims", "StridedSlice", "ConcatV2", "Pack"})
_MAX_FOLDED = 1 << 16


# ----------------------------------------------------------------------------- trip count
def trip_count(g: GraphIndex, loop: Loop) -> int:
    """The number of iterations, by running the loop's integer/boolean state with numpy."""
    env: dict[str, np.ndarray] = {}
    for enter, outer in loop.invariants.items():
        got = static_value(g, outer)
        if got is not None and got[0].size <= _MAX_STATIC:
            env[f"{enter}:0"] = got[0]
    state: dict[str, np.ndarray] = {}
    for var in loop.variables:
        got = static_value(g, var.init)
        if got is not None and got[0].size <= _MAX_STATIC:
            state[var.merge] = got[0]
    for t in range(MAX_TRIP_COUNT + 1):
        here = dict(env)
        for var in loop.variables:
            if var.merge in state:
                here[f"{var.merge}:0"] = state[var.merge]
                here[f"{var.switch}:1"] = state[var.merge]
        cond = static_value(g, loop.cond, limit=256, env=here)
        if cond is None:
            raise UnrollError("its trip count is not static: the loop condition depends on "
                              "values computed from the data (a dynamic sequence length?); "
                              "give static input shapes with --input-shape")
        if not bool(np.ravel(cond[0])[0]):
            return t
        nxt = {}
        for var in loop.variables:
            if var.merge in state:
                got = static_value(g, var.body_out, limit=256, env=here)
                if got is not None and got[0].size <= _MAX_STATIC:
                    nxt[var.merge] = got[0]
        state = nxt
    raise UnrollError(f"it runs more than {MAX_TRIP_COUNT} iterations")


# ----------------------------------------------------------------------------- unrolling
class Unroller:
    """Copies a loop's body ``count`` times through a rule :class:`~rewriter.rules.base.Builder`.

    ``outer`` maps tensors entering the loop (Enter inputs) to their values; ``run`` returns the
    final value of every loop variable, keyed by its Merge node.
    """

    def __init__(self, g: GraphIndex, loop: Loop, builder: Any) -> None:
        self.g, self.loop, self.b = g, loop, builder
        self.frame_prefix = _common_prefix([n for n in loop.nodes])
        self._consts: dict[tuple[str, bytes, tuple[int, ...]], str] = {}
        self._zero: dict[str, bool] = {}
        self.body = _needed_body(g, loop)

    # -- values ---------------------------------------------------------------------------
    def tensor(self, v: Value, dtype: np.dtype | None = None) -> str:
        """A tensor ref for ``v``, materialising a static value as one shared Const."""
        if isinstance(v, str):
            return v
        if isinstance(v, TList):
            raise UnrollError("a TensorList is used as a tensor")
        arr = np.asarray(v, dtype=dtype) if dtype is not None else np.asarray(v)
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        key = (arr.dtype.str, arr.tobytes(), arr.shape)
        if key not in self._consts:
            self._consts[key] = self.b.const(f"const_{len(self._consts)}", arr, dtype=arr.dtype)
        return self._consts[key]

    def initial(self, ref: str) -> Value:
        """The value of a tensor entering the loop (a list's producer becomes a TList)."""
        node = self.g.producer(ref)
        if node is not None:
            lst = make_list(self.g, node, parse_input(ref)[1],
                            lambda src, i: self._slice(src, 0, i))
            if lst is not None:
                return lst
        got = static_value(self.g, ref)
        if got is not None and got[0].dtype.kind in "iub" and got[0].size <= _MAX_STATIC:
            return got[0]
        return ref

    # -- the loop ---------------------------------------------------------------------------
    def run(self, count: int) -> dict[str, Value]:
        loop = self.loop
        invariants = {f"{e}:0": self.initial(r) for e, r in loop.invariants.items()}
        state = {v.merge: self.initial(v.init) for v in loop.variables}
        for t in range(count):
            env: dict[str, Value] = dict(invariants)
            for var in loop.variables:
                env[f"{var.switch}:1"] = state[var.merge]
                env[f"{var.merge}:0"] = state[var.merge]
            for node in self.body:
                self._step(node, env, t)
            state = {v.merge: self._read(v.body_out, env) for v in loop.variables}
        return state

    def _read(self, ref: str, env: dict[str, Value]) -> Value:
        name, idx, _ = parse_input(ref)
        key = f"{name}:{idx}"
        if key not in env:
            raise UnrollError(f"{ref} is read before it is computed in the loop body")
        return env[key]

    def _step(self, node: NodeDef, env: dict[str, Value], t: int) -> None:
        data = [r for r in node.input if not r.startswith("^")]
        if node.op == "Const":
            env[f"{node.name}:0"] = self._const(node)
            return
        args = [self._read(r, env) for r in data]
        if node.op in _ALIASES and len(args) == 1:
            env[f"{node.name}:0"] = args[0]
            return
        if node.op in LIST_OPS:
            env[f"{node.name}:0"] = self.list_op(node, args)
            return
        if args and all(is_static(a) for a in args):
            val = eval_node(node, list(args))
            if val is not None and val.dtype.kind in "iub" and val.size <= _MAX_STATIC:
                env[f"{node.name}:0"] = val
                return
        if node.op == "Shape" and args:
            shape = tensor_shape(self.g, data[0])
            if shape is not None and None not in shape:
                dt = node_dtype(node, ("out_type",)) or np.dtype(np.int32)
                env[f"{node.name}:0"] = np.asarray(shape, dtype=dt)
                return
        if node.op == "MatMul":
            split = self._matmul_of_concat(node, data, env, t)
            if split is not None:
                env[f"{node.name}:0"] = split
                return
        copy = self.b.copy_of(node, [self.tensor(a) for a in args], self._suffix(node, t))
        for i in range(_num_outputs(self.g, node)):
            env[f"{node.name}:{i}"] = tensor_ref(copy, i)

    def _matmul_of_concat(self, node: NodeDef, data: list[str], env: dict[str, Value],
                          t: int) -> str | None:
        """``concat([x, h], -1) @ W`` as ``x @ W[:n] + h @ W[n:]`` (TF1 RNN cells): the step
        input and the state keep their own int8 scales instead of sharing the concat's, and a
        zero initial state folds away. Exact up to float32 summation order."""
        if node.attr["transpose_a"].b or node.attr["transpose_b"].b:
            return None
        cat = self.g.producer(data[0])
        while cat is not None and cat.op in _ALIASES:
            cat = self.g.producer(cat.input[0])
        weight = self._read(data[1], env)  # an invariant: the tensor entering the loop
        w = static_value(self.g, weight, limit=8) if isinstance(weight, str) else None
        if cat is None or cat.op != "ConcatV2" or cat.name not in self.loop.nodes or w is None:
            return None
        parts = [r for r in cat.input if not r.startswith("^")]
        axis = static_value(self.g, parts[-1])
        widths = [(tensor_shape(self.g, r) or (None,))[-1] for r in parts[:-1]]
        if widths.count(None) == 1:  # a loop state's shape is often unknown inside the loop
            widths[widths.index(None)] = w[0].shape[0] - sum(d for d in widths if d is not None)
        if (axis is None or int(np.ravel(axis[0])[0]) not in (1, -1) or None in widths
                or min(widths) <= 0 or sum(widths) != w[0].shape[0]):
            return None
        dtype = node_dtype(node) or np.dtype(np.float32)
        out, row = None, 0
        for i, (ref, width) in enumerate(zip(parts[:-1], widths)):
            kernel = self.tensor(w[0][row:row + width].astype(dtype))
            row += width
            term = self.b.op("MatMul", [self.tensor(self._read(ref, env)), kernel],
                             f"{self._suffix(node, t)}_part{i}",
                             attrs={"transpose_a": False, "transpose_b": False}, dtype=dtype)
            out = term if out is None else self.b.op("AddV2", [out, term],
                                                     f"{self._suffix(node, t)}_sum{i}",
                                                     dtype=dtype)
        return out

    def _fold_zeros(self, node: NodeDef) -> str | None:
        """What a copy computes when an input is all zeros (an RNN's initial state in the
        first step): a zeros Const, or its other input; None when nothing folds."""
        data = [r for r in node.input if not r.startswith("^")]
        zero = [self._is_zero(r) for r in data]
        if not any(zero):
            return None
        out = tensor_shape(self.g, f"{node.name}:0")
        if out is None or None in out:
            return None
        dtype = node_dtype(node) or np.dtype(np.float32)
        if (node.op in _ZERO_ABSORBING and any(zero[:2])) or (
                node.op in _ZERO_RESHAPING and zero[0]):
            return self.tensor(np.zeros(out, dtype))
        if node.op in _ZERO_NEUTRAL | {"Sub"} and len(data) == 2 and zero.count(True) == 1:
            keep = 0 if zero[1] else 1
            if (node.op != "Sub" or keep == 0) and tensor_shape(self.g, data[keep]) == out:
                return data[keep]
        return None

    def _fold_constants(self, node: NodeDef) -> dict[int, str] | None:
        """A copy whose inputs are all constants (the first step reads the initial state's
        bias terms) as Consts, by output: the int8 converter dequantizes a constant feeding a
        SPLIT and leaves the SPLIT in float. Single float32 ops computed in float64 and
        rounded once give the float32 result."""
        data = [r for r in node.input if not r.startswith("^")]
        if node.op not in _CONST_FOLDABLE or not data:
            return None
        vals = []
        for r in data:
            got = static_value(self.g, r, limit=16)
            if got is None or got[0].size > _MAX_FOLDED:
                return None
            vals.append(got[0])
        dtype = node_dtype(node) or np.dtype(np.float32)
        if node.op == "Split":
            parts = np.split(vals[1], int(node.attr["num_split"].i), axis=int(vals[0]))
        elif node.op == "BiasAdd":
            parts = [vals[0] + vals[1]]
        else:
            out = eval_node(node, vals)
            if out is None:
                return None
            parts = [out]
        return {i: self.tensor(np.asarray(p).astype(dtype)) for i, p in enumerate(parts)}

    def _is_zero(self, ref: str) -> bool:
        if ref not in self._zero:
            got = static_value(self.g, ref)
            self._zero[ref] = bool(got is not None and got[0].dtype.kind == "f"
                                   and got[0].size and not np.any(got[0]))
        return self._zero[ref]

    def finish(self, results: dict[str, str]) -> None:
        """Fold the first step's zero initial state (x*0 = 0, 0@W = 0, x+0 = x: exact for
        finite x and W) and what it leaves constant, drop copies nothing reads (the forget
        gate times a zero cell), and
        replace each Split with unread outputs by slices of the read ones: the int8 converter
        folds the same zeros itself, and leaves a SPLIT with an unread output in float."""
        for name in list(self.b.created):  # creation order is dependency order
            node = self.g.nodes.get(name)
            if node is None or node.op == "Const":
                continue
            zero = self._fold_zeros(node)
            folded = {0: zero} if zero is not None else self._fold_constants(node)
            for idx, ref in (folded or {}).items():
                self.g.redirect(tensor_ref(name, idx), ref)
                for key, old in results.items():
                    if parse_input(old)[:2] == (name, idx):
                        results[key] = ref
        live: set[str] = set()
        stack = [parse_input(r)[0] for r in results.values()]
        created = set(self.b.created)
        while stack:
            name = stack.pop()
            if name in live or name not in created:
                continue
            live.add(name)
            stack.extend(parse_input(r)[0] for r in self.g[name].input)
        for name in [n for n in self.b.created if n not in live]:
            self.g.remove(name)
            self.b.created.remove(name)
        for name in [n for n in self.b.created if self.g[n].op == "Split"]:
            self._split_to_slices(self.g[name])

    def _split_to_slices(self, split: NodeDef) -> None:
        n = int(split.attr["num_split"].i)
        read = {parse_input(r)[1] for c in self.g.consumers(split.name) for r in c.input
                if parse_input(r)[0] == split.name and not r.startswith("^")}
        if len(read) == n:
            return
        axis = static_value(self.g, split.input[0])
        shape = tensor_shape(self.g, split.input[1])
        if axis is None or shape is None or None in shape:
            return
        rank = len(shape)
        ax = int(np.ravel(axis[0])[0]) % rank
        size = shape[ax] // n
        for i in sorted(read):
            begin, end = [0] * rank, [0] * rank
            begin[ax], end[ax] = i * size, (i + 1) * size
            mask = ((1 << rank) - 1) & ~(1 << ax)
            piece = self.b.op("StridedSlice", [
                split.input[1], self.tensor(np.asarray(begin, np.int32)),
                self.tensor(np.asarray(end, np.int32)), self.tensor(np.ones(rank, np.int32))],
                f"{split.name.rsplit('/', 1)[-1]}_part{i}",
                attrs={"Index": np.int32, "begin_mask": mask, "end_mask": mask,
                       "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 0},
                dtype=node_dtype(split) or np.float32)
            self.g.redirect(tensor_ref(split.name, i), piece)
        self.g.remove(split.name)
        self.b.created.remove(split.name)

    def _const(self, node: NodeDef) -> Value:
        from rewriter.ir.graph import const_to_array

        arr = const_to_array(node)
        if arr.dtype.kind in "iub" and arr.size <= _MAX_STATIC:
            return arr
        return self.tensor(arr)

    def _suffix(self, node: NodeDef, t: int) -> str:
        return f"t{t}/{node.name[len(self.frame_prefix):] or node.op.lower()}"

    # -- TensorLists ------------------------------------------------------------------------
    def list_op(self, node: NodeDef, args: list[Value]) -> Value:
        """A list op on unrolled values: reads become tensors, writes new TLists."""
        at = list_input(node)
        lst = args[at] if at is not None and at < len(args) else None
        if not isinstance(lst, TList):
            raise UnrollError(f"{node.op} {node.name} reads a list the unroller cannot follow")
        if node.op in LENGTH:
            return np.asarray(lst.length, np.int32)
        if node.op == "TensorListElementShape":
            return np.asarray(lst.element_shape or (), np.int32)
        if node.op in STACK:
            where = STACK[node.op][1]
            order = None if where is None else [self._index(node, i) for i in
                                                np.ravel(args[where])]
            return self.stack(lst, order)
        if node.op == "TensorListPushBack":
            return lst.with_item(lst.length, self.tensor(args[1]), lst.length + 1)
        if node.op in GET:
            return self.item(lst, self._index(node, args[GET[node.op][1]]))
        _, idx, item = SET[node.op]
        return lst.with_item(self._index(node, args[idx]), self.tensor(args[item]))

    def _index(self, node: NodeDef, v: Value) -> int:
        if not (is_static(v) or isinstance(v, (int, np.integer))):
            raise UnrollError(f"{node.op} {node.name} uses an index computed from the data")
        return int(np.ravel(v)[0])

    def item(self, lst: TList, index: int) -> str:
        """Element ``index`` of a list: the tensor written there, or a slice of its source."""
        if index in lst.items:
            return lst.items[index]
        if lst.source is not None:
            return self._slice(lst.source, 0, index)
        if lst.element_shape is None or any(d < 0 for d in lst.element_shape):
            raise UnrollError("an unwritten list element of unknown shape is read")
        return self.tensor(np.zeros(lst.element_shape, lst.dtype))

    def stack(self, lst: TList, order: list[int] | None = None) -> str:
        """The elements (all, or those at ``order``) packed along a new axis 0."""
        items = [self.item(lst, i) for i in (range(lst.length) if order is None else order)]
        return self.b.op("Pack", items, "stack", attrs={"axis": 0, "N": len(items)},
                         dtype=lst.dtype)

    def _slice(self, ref: str, axis: int, index: int) -> str:
        """``ref`` indexed at ``index`` along ``axis`` (that axis removed), reading through
        Transpose and ReverseV2 so time steps are sliced from the tensor the model was given;
        a step of a stacked layer's input is the previous layer's step itself (through its
        Pack, and a Bidirectional layer's Concat of both directions)."""
        ref, axis, index = self._through_layout(ref, axis, index)
        shape = tensor_shape(self.g, ref)
        if shape is None:
            raise UnrollError(f"the rank of {ref} is not known")
        rank = len(shape)
        node = self.g.producer(ref)
        if node is not None and parse_input(ref)[1] == 0:
            parts = [r for r in node.input if not r.startswith("^")]
            if node.op == "Pack" and node.attr["axis"].i % rank == axis:
                return parts[index]  # a previous layer's step: no slicing at all
            if node.op == "ConcatV2":
                cat = static_value(self.g, parts[-1])
                c = int(np.ravel(cat[0])[0]) % rank if cat is not None else axis
                if c != axis:  # e.g. Bidirectional's [forward, backward] per step
                    pieces = [self._slice(r, axis, index) for r in parts[:-1]]
                    return self.b.op("ConcatV2", [*pieces, self.tensor(
                        np.asarray(c if c < axis else c - 1, np.int32))], f"step{index}_concat",
                        attrs={"N": len(pieces), "Tidx": np.int32},
                        dtype=node_dtype(node) or np.float32)
        begin = [0] * rank
        end = [0] * rank
        begin[axis], end[axis] = index, index + 1
        mask = ((1 << rank) - 1) & ~(1 << axis)
        return self.b.op("StridedSlice", [ref, self.tensor(np.asarray(begin, np.int32)),
                                          self.tensor(np.asarray(end, np.int32)),
                                          self.tensor(np.ones(rank, np.int32))],
                         f"step{index}", attrs={"Index": np.int32, "begin_mask": mask,
                                                "end_mask": mask, "ellipsis_mask": 0,
                                                "new_axis_mask": 0,
                                                "shrink_axis_mask": 1 << axis},
                         dtype=node_dtype(self.g.producer(ref)) or np.float32)

    def _through_layout(self, ref: str, axis: int, index: int) -> tuple[str, int, int]:
        for _ in range(8):
            node = self.g.producer(ref)
            if node is None or parse_input(ref)[1] != 0:
                break
            if node.op == "Transpose":
                perm = static_value(self.g, node.input[1])
                if perm is None:
                    break
                p = [int(v) for v in np.ravel(perm[0])]
                rest = [d for i, d in enumerate(p) if i != axis]
                if rest != sorted(rest):  # the other axes would change order: keep it
                    break
                ref, axis = node.input[0], p[axis]
            elif node.op == "ReverseV2":
                axes = static_value(self.g, node.input[1])
                shape = tensor_shape(self.g, node.input[0])
                if axes is None or shape is None or shape[axis] is None:
                    break
                rank = len(shape)
                if axis in {int(a) % rank for a in np.ravel(axes[0])}:
                    index = int(shape[axis]) - 1 - index
                ref = node.input[0]
            elif node.op in _ALIASES:
                ref = node.input[0]
            else:
                break
        return ref, axis, index


def _needed_body(g: GraphIndex, loop: Loop) -> list[NodeDef]:
    """Body nodes the next values depend on (the condition's own nodes are left out), in
    dependency order."""
    inside = set(loop.nodes)
    stop = {v.switch for v in loop.variables} | set(loop.invariants)
    need: set[str] = set()
    stack = [parse_input(v.body_out)[0] for v in loop.variables]
    while stack:
        name = stack.pop()
        if name in need or name not in inside or name in stop:
            continue
        need.add(name)
        stack.extend(parse_input(r)[0] for r in g[name].input if not r.startswith("^"))
    body = [n for n in loop.body_order(g) if n.name in need]
    bad = sorted({n.op for n in body if n.op in _STATEFUL})
    if bad:
        raise UnrollError(f"its body has stateful ops ({', '.join(bad)})")
    lists = sorted({n.op for n in body if n.op.startswith(("TensorList", "TensorArray"))
                    and n.op not in LIST_OPS})
    if lists:
        raise UnrollError(f"its body uses list ops the unroller does not handle "
                          f"({', '.join(lists)})")
    return body


def _num_outputs(g: GraphIndex, node: NodeDef) -> int:
    if node.op in ("Split", "SplitV"):
        return int(node.attr["num_split"].i)
    if node.op == "Unpack":
        return int(node.attr["num"].i)
    used = [parse_input(r)[1] for c in g.consumers(node.name) for r in c.input
            if parse_input(r)[0] == node.name and not r.startswith("^")]
    return max(used, default=0) + 1


def _common_prefix(names: list[str]) -> str:
    """The longest common ``/``-separated prefix of ``names`` (with its trailing slash)."""
    if not names:
        return ""
    parts = [n.split("/") for n in names]
    out = []
    for segs in zip(*parts):
        if len(set(segs)) != 1:
            break
        out.append(segs[0])
    return "/".join(out) + "/" if out else ""
