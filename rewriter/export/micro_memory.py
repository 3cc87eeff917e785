"""Where a ``.tflite``'s memory goes, for the message of a budget it overruns (``--sram``,
``--flash``): the largest tensors, the largest weights, and what would reduce them.

Read from the job's artifact (for Ethos-U too: the Vela file's NPU part is one custom op whose
tensors are Vela's; the artifact names the model's own). The figures are the tensors' own sizes
(element count x element size) in the main subgraph:

* SRAM: the tensors live at the peak, by a liveness walk in execution order (a tensor lives from
  the op writing it, or the start for an input, to the last op reading it, or the end for an
  output). It names what fills the arena; it is not the arena's figure: TFLite Micro's planner
  adds its own structures and scratch buffers (and may place tensors less tightly), Vela its
  weight buffers and its own schedule (on tflm, the sample model's four tensors live at the peak
  sum to 240 KiB, the arena measured is 246 KiB).
* flash: the largest constant tensors (weights, biases), and the point where cutting the model in
  two parts with one tensor between them splits its weights most evenly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

_SIZES = {0: 4, 1: 2, 2: 4, 3: 1, 4: 8, 6: 1, 7: 2, 8: 8, 9: 1, 10: 8, 16: 1, 17: 4}  # TensorType
_TYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16",
          8: "complex64", 9: "int8", 10: "float64", 16: "uint16", 17: "uint32"}


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int

    def describe(self) -> str:
        dims = "x".join(str(d) for d in self.shape) or "scalar"
        return f"'{self.name}' {dims} {self.dtype} = {_size(self.bytes)}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "bytes": self.bytes}


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.1f} KiB"


def short_name(name: str) -> str:
    """A converter's fused tensor name ``a;b;c`` by its first part (the op writing it)."""
    return name.split(";")[0]


@dataclass
class Layout:
    """The main subgraph: its tensors, ops (input and output tensor indices), I/O."""

    tensors: list[Tensor]
    constant: list[bool]
    ops: list[tuple[list[int], list[int]]]
    inputs: list[int]
    outputs: list[int]


def read_layout(path: str | Path) -> Layout:
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(Path(path).read_bytes(), 0)
    sg = model.subgraphs[0]
    tensors, constant = [], []
    for t in sg.tensors:
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        name = t.name.decode() if isinstance(t.name, bytes) else str(t.name)
        count = int(np.prod(shape)) if shape else 1
        tensors.append(Tensor(short_name(name), shape, _TYPES.get(t.type, f"type{t.type}"),
                              count * _SIZES.get(t.type, 4)))
        buf = model.buffers[t.buffer] if t.buffer < len(model.buffers) else None
        constant.append(buf is not None and (
            (buf.data is not None and len(buf.data) > 0) or bool(getattr(buf, "offset", 0))))
    ops = [([int(i) for i in op.inputs if i >= 0], [int(o) for o in op.outputs if o >= 0])
           for op in sg.operators]
    return Layout(tensors, constant, ops, [int(i) for i in sg.inputs],
                  [int(o) for o in sg.outputs])


def peak(layout: Layout) -> tuple[int, list[Tensor]]:
    """(op index, the tensors live there, largest first) at the op where most bytes are live."""
    n = len(layout.ops)
    first = {i: 0 for i in layout.inputs}
    last = {o: n - 1 for o in layout.outputs}
    for k, (ins, outs) in enumerate(layout.ops):
        for o in outs:
            first.setdefault(o, k)
        for i in ins:
            if not layout.constant[i]:
                last[i] = max(last.get(i, k), k)
    best, best_k, best_live = -1, 0, []
    for k in range(n):
        live = [t for t, f in first.items() if f <= k <= last.get(t, f)
                and not layout.constant[t]]
        total = sum(layout.tensors[t].bytes for t in live)
        if total > best:
            best, best_k, best_live = total, k, live
    return best_k, sorted((layout.tensors[t] for t in best_live), key=lambda t: -t.bytes)


def largest_weights(layout: Layout, n: int = 3) -> list[Tensor]:
    return sorted((t for t, c in zip(layout.tensors, layout.constant, strict=True) if c),
                  key=lambda t: -t.bytes)[:n]


def weight_split(layout: Layout) -> tuple[Tensor, int, int] | None:
    """(the one tensor between the parts, weight bytes before, after) for the cut in execution
    order with a single tensor crossing it that splits the weights most evenly; None if none."""
    n = len(layout.ops)
    last: dict[int, int] = {o: n for o in layout.outputs}
    for k, (ins, _) in enumerate(layout.ops):
        for i in ins:
            last[i] = max(last.get(i, k), k)
    produced: set[int] = set(layout.inputs)
    seen_weights: set[int] = set()
    total = sum(t.bytes for t, c in zip(layout.tensors, layout.constant, strict=True) if c)
    best: tuple[Tensor, int, int] | None = None
    for k, (ins, outs) in enumerate(layout.ops[:-1]):
        seen_weights.update(i for i in ins if layout.constant[i])
        produced.update(outs)
        crossing = [t for t in produced if last.get(t, -1) > k]
        if len(crossing) != 1 or crossing[0] in layout.inputs:
            continue
        before = sum(layout.tensors[i].bytes for i in seen_weights)
        if best is None or abs(total - 2 * before) < abs(total - 2 * best[1]):
            best = (layout.tensors[crossing[0]], before, total - before)
    return best


def advice(kind: str, artifact: str | Path, target_name: str,
           optimise: str | None = None) -> dict[str, Any]:
    """What overruns a ``kind`` ("sram" or "flash") budget, and what would reduce it:
    ``{"largest": [tensor...], "largest_text": str, "reduce": [str...]}``."""
    layout = read_layout(artifact)
    inputs = [layout.tensors[i] for i in layout.inputs]
    reduce: list[str] = []
    if kind == "sram":
        k, live = peak(layout)
        largest = live[:3]
        text = (f"at op {k} of {len(layout.ops)} these are live: "
                + ", ".join(t.describe() for t in largest)
                + (f" (+{len(live) - 3} more)" if len(live) > 3 else ""))
        reduce.append("a smaller input (" + ", ".join(t.describe() for t in inputs)
                      + "): the activations scale with it")
        if target_name.startswith("ethos-u") and optimise != "Size":
            reduce.append("--optimise Size (Vela plans for less SRAM, at some speed)")
        wide = [t for t, c in zip(layout.tensors, layout.constant)
                if not c and t.dtype == "int16"]
        if wide:
            reduce.append(f"16x8 only where it helps accuracy ({len(wide)} activation tensors "
                          "here are int16, twice an int8's bytes: --accuracy COS keeps int8 "
                          "wherever the outputs still reach COS)")
        reduce.append("fewer channels in the layers writing the tensors above")
    else:
        largest = largest_weights(layout)
        text = "largest weights: " + ", ".join(t.describe() for t in largest)
        split = weight_split(layout)
        if split is not None:
            tensor, before, after = split
            reduce.append(f"splitting the model at '{tensor.name}' (--outputs {tensor.name} "
                          f"for the first part, --inputs {tensor.name} for the second): "
                          f"{_size(before)} and {_size(after)} of weights")
        reduce.append("fewer channels in the layers holding the weights above")
    return {"largest": [t.to_json() for t in largest], "largest_text": text, "reduce": reduce}
