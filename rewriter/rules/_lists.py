"""TensorLists (TF2) and TensorArrays (TF1) as the unroller sees them: Python lists of tensors.

A Keras RNN reads its input sequence from a list made from the input tensor and collects its
outputs in another; a TF1 ``dynamic_rnn`` does the same with ``TensorArrayV3`` (a handle plus a
"flow" scalar that threads its state through the loop). Unrolled, a list is a :class:`TList`:
element ``i`` is either a tensor written there or slice ``i`` of the tensor the list was made
from. The tables below say, per op, which input is the list (for a TensorArray: its flow), the
index, the written item, or the indices to gather.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, node_dtype
from rewriter.ir.static_eval import static_value, tensor_shape

#: op -> (list input, index input)
GET = {"TensorListGetItem": (0, 1), "TensorArrayReadV3": (2, 1)}
#: op -> (list input, index input, item input)
SET = {"TensorListSetItem": (0, 1, 2), "TensorArrayWriteV3": (3, 1, 2)}
#: op -> list input
LENGTH = {"TensorListLength": 0, "TensorArraySizeV3": 1}
#: op -> (list input, indices input or None for all elements in order)
STACK = {"TensorListStack": (0, None), "TensorArrayGatherV3": (2, 1)}
#: Ops that make a list before a loop.
PRODUCERS = frozenset({"TensorListFromTensor", "TensorListReserve", "TensorArrayV3",
                       "TensorArrayScatterV3"})
#: Ops that read a list (also after a loop, from its result).
READERS = frozenset(GET) | frozenset(LENGTH) | frozenset(STACK)
#: Every list op the unroller understands.
LIST_OPS = (PRODUCERS | READERS | frozenset(SET)
            | frozenset({"TensorListPushBack", "TensorListElementShape"}))


class UnrollError(Exception):
    """Why a loop cannot be unrolled (a sentence for the report)."""


@dataclass
class TList:
    """A list as its elements: ``source`` (a [n, ...] tensor whose slices are the elements)
    and the elements written since, by index."""

    length: int
    dtype: np.dtype
    source: str | None = None
    items: dict[int, str] = field(default_factory=dict)
    element_shape: tuple[int, ...] | None = None

    def with_item(self, index: int, ref: str, length: int | None = None) -> TList:
        return TList(self.length if length is None else length, self.dtype, self.source,
                     {**self.items, index: ref}, self.element_shape)


def list_input(node: NodeDef) -> int | None:
    """Which input of list op ``node`` carries the list (None for producers)."""
    for table in (GET, SET, STACK):
        if node.op in table:
            return table[node.op][0]
    if node.op in LENGTH:
        return LENGTH[node.op]
    if node.op in ("TensorListPushBack", "TensorListElementShape"):
        return 0
    return None


def make_list(g: GraphIndex, node: NodeDef, index: int, slicer) -> TList | None:
    """The list that output ``index`` of producer ``node`` is (``slicer(ref, i)`` slices
    element ``i`` off a tensor), or None when ``node`` makes no list there."""
    if node.op == "TensorListFromTensor":
        shape = tensor_shape(g, node.input[0])
        if not shape or shape[0] is None:
            raise UnrollError(f"the length of list {node.name} is not static")
        return TList(int(shape[0]), _dtype(node, "element_dtype"), source=node.input[0])
    if node.op == "TensorListReserve":
        n = _static_int(g, node.input[1], f"the size of list {node.name}")
        shape = static_value(g, node.input[0])
        eshape = tuple(int(d) for d in np.ravel(shape[0])) if shape is not None else None
        return TList(n, _dtype(node, "element_dtype"), element_shape=eshape)
    if node.op == "TensorArrayV3" and index == 1:  # output 1 is the flow
        n = _static_int(g, node.input[0], f"the size of TensorArray {node.name}")
        eshape = None
        if "element_shape" in node.attr and not node.attr["element_shape"].shape.unknown_rank:
            eshape = tuple(int(d.size) for d in node.attr["element_shape"].shape.dim)
        return TList(n, _dtype(node, "dtype"), element_shape=eshape)
    if node.op == "TensorArrayScatterV3":
        base_node = g.producer(node.input[3])
        base = make_list(g, base_node, int(node.input[3].partition(":")[2] or 0), slicer)
        indices = static_value(g, node.input[1])
        if base is None or indices is None:
            raise UnrollError(f"TensorArray scatter {node.name} has indices computed from data")
        idx = [int(i) for i in np.ravel(indices[0])]
        if idx == list(range(base.length)):
            return TList(base.length, base.dtype, source=node.input[2],
                         element_shape=base.element_shape)
        items = {i: slicer(node.input[2], k) for k, i in enumerate(idx)}
        return TList(base.length, base.dtype, items=items, element_shape=base.element_shape)
    return None


def _static_int(g: GraphIndex, ref: str, what: str) -> int:
    got = static_value(g, ref)
    if got is None:
        raise UnrollError(f"{what} is not static")
    return int(np.ravel(got[0])[0])


def _dtype(node: NodeDef, key: str) -> np.dtype:
    return node_dtype(node, (key,)) or np.dtype(np.float32)
