"""Who makes and who reads each tensor of a ``.tflite`` subgraph (the flatbuffer object API), for
the fix-ups that rewire the AI Edge Quantizer's files (:mod:`rewriter.tune.min_max`,
:func:`rewriter.tune.mixed.integer_reduce_max`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any


@functools.cache
def _builtin_names() -> dict[int, str]:
    from tensorflow.lite.python import schema_py_generated as fb

    return {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}


def op_name(model: Any, op: Any, unknown: str = "?") -> str:
    """Operator ``op``'s builtin name (``"MINIMUM"``) in ``model`` (object API: ``ModelT``,
    ``OperatorT``); ``unknown`` for a custom op."""
    c = model.operatorCodes[op.opcodeIndex]
    return _builtin_names().get(max(int(c.builtinCode), int(c.deprecatedBuiltinCode)), unknown)


@dataclass
class Index:
    """One subgraph of ``model`` (a ``ModelT``), indexed once before it is rewired."""

    model: Any
    sub: Any
    made_by: dict[int, Any] = field(default_factory=dict)
    readers: dict[int, list[Any]] = field(default_factory=dict)
    graph_io: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, model: Any, subgraph: int = 0) -> Index:
        sub = model.subgraphs[subgraph]
        index = cls(model, sub, graph_io=set(sub.inputs) | set(sub.outputs))
        for op in sub.operators:
            for t in op.outputs:
                index.made_by[t] = op
            for t in op.inputs:
                index.readers.setdefault(t, []).append(op)
        return index

    def code(self, op: Any) -> str:
        """The op's builtin name (``"MINIMUM"``), ``"?"`` for a custom one."""
        return op_name(self.model, op)

    def constant(self, t: int) -> bool:
        """Tensor ``t`` holds constant data in the flatbuffer."""
        buf = self.model.buffers[self.sub.tensors[t].buffer]
        return buf.data is not None and len(buf.data) > 0

    def only_read_by(self, t: int, op: Any) -> bool:
        """Nothing but ``op`` reads tensor ``t``, and it is not a graph input or output."""
        return all(r is op for r in self.readers.get(t, [])) and t not in self.graph_io
