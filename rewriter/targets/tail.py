"""The CPU tail: post-processing at the end of a model that the target cannot run.

A detector ends in non-maximum suppression, a classifier sometimes in top-k or arg-max. No rule
places these on an int8 accelerator (they sort, gather and compare boxes), and deployments run
them on the host CPU after the accelerator part. :func:`cpu_tail` finds them in a TF graph's
verdicts: the unsupported post-processing nodes and everything computed from them. It says
whether the rest (the *accelerator part*) is fully placed, where that part ends (the tensors
the tail reads) and the ``--outputs`` value that ends the model there, so a report can tell
"the accelerator part is fine, the tail runs on the CPU" from "the model does not fit".
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rewriter.ir.graph import GraphIndex, parse_input

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model
    from rewriter.targets.verdicts import GraphCheck

#: TF ops that are post-processing (selection, sorting) rather than a network layer.
POST_PROCESSING_OPS = frozenset({
    "NonMaxSuppression", "NonMaxSuppressionV2", "NonMaxSuppressionV3", "NonMaxSuppressionV4",
    "NonMaxSuppressionV5", "NonMaxSuppressionWithOverlaps", "CombinedNonMaxSuppression",
    "TopKV2", "ArgMax", "ArgMin",
})
#: Layout-only ops between the accelerator part and the post-processing (``boxes[0]``,
#: ``expand_dims(boxes, 2)``): the tail starts above them when only the tail reads them.
_LAYOUT_OPS = frozenset({"ExpandDims", "Squeeze", "Reshape", "StridedSlice"})


@dataclass
class CpuTail:
    """Post-processing the target cannot run, and the accelerator part before it."""

    ops: dict[str, int]  # TF op -> nodes in the tail
    first: list[str]  # the post-processing nodes that start it
    nodes: list[str]
    ends_at: list[str]  # tensors the tail reads from the accelerator part
    outputs: list[str]  # signature outputs computed by the tail
    kept: list[str]  # signature outputs outside the tail
    accelerator_part_ok: bool  # every op outside the tail is placed (graph-level prediction)
    unsupported_outside: list[str] = field(default_factory=list)

    @property
    def hint(self) -> str:
        return "--outputs " + ",".join([*self.kept, *(_short(t) for t in self.ends_at)])

    def describe(self) -> str:
        ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in self.ops.items())
        part = ("the accelerator part before it is fully placed" if self.accelerator_part_ok
                else "the accelerator part before it also has unsupported ops ("
                + ", ".join(self.unsupported_outside) + ")")
        return (f"post-processing tail on the CPU ({ops}; outputs "
                f"{', '.join(self.outputs)}, which select boxes or classes, so int8 error "
                f"upstream can change them): {part}; end the model before it with "
                f"{self.hint} to deploy and verify the accelerator part alone")

    def to_json(self) -> dict[str, Any]:
        return {"ops": dict(self.ops), "first": list(self.first), "nodes": self.nodes[:50],
                "ends_at": list(self.ends_at), "outputs": list(self.outputs),
                "kept_outputs": list(self.kept),
                "accelerator_part_ok": self.accelerator_part_ok,
                "unsupported_outside": list(self.unsupported_outside), "hint": self.hint,
                "text": self.describe()}


def cpu_tail(model: Model, check: GraphCheck) -> CpuTail | None:
    """The post-processing tail of ``model`` that ``check`` (TF-graph level, on the graph as
    rewritten) finds unsupported, or None when there is none."""
    g = GraphIndex(model.graph_def)
    first = [v.node for v in check.verdicts
             if not v.supported and v.op in POST_PROCESSING_OPS and v.node in g]
    if not first:
        return None
    tail = _descendants(g, first)
    _absorb_layout(g, tail, {v.node for v in check.verdicts if not v.supported})
    ends_at: list[str] = []
    for name in list(g.nodes):
        if name not in tail:
            continue
        for ref in g[name].input:
            src, idx, ctrl = parse_input(ref)
            tensor = f"{src}:{idx}"
            if not ctrl and src not in tail and g[src].op != "Const" and tensor not in ends_at:
                ends_at.append(tensor)
    outside = sorted({v.op for v in check.verdicts if not v.supported and v.node not in tail})
    ops = Counter(g[n].op for n in tail if g[n].op not in ("Identity", "Const"))
    return CpuTail(dict(ops), first, sorted(tail), ends_at,
                   [o.name for o in model.outputs if o.node in tail],
                   [o.name for o in model.outputs if o.node not in tail], not outside, outside)


def _descendants(g: GraphIndex, start: list[str]) -> set[str]:
    seen: set[str] = set()
    queue = deque(start)
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        queue.extend(c.name for c in g.consumers(name))
    return seen


def _absorb_layout(g: GraphIndex, tail: set[str], unsupported: set[str]) -> None:
    """Move the tail's start above layout-only producers that only the tail reads, and above
    producers the target cannot run that only the tail reads (Keras 3 ``argmax``'s -0.0
    prologue: Bitcast, BitwiseAnd, Equal, Less, LogicalAnd, SelectV2 before the ArgMax), so
    ``--outputs`` ends the model where the target can run everything before it."""
    changed = True
    while changed:
        changed = False
        for name in list(tail):
            for ref in g[name].input:
                src = parse_input(ref)[0]
                node = g.nodes.get(src)
                if (node is None or src in tail
                        or (node.op not in _LAYOUT_OPS and src not in unsupported)
                        or any(c.name not in tail for c in g.consumers(src))):
                    continue
                tail.add(src)
                changed = True


def _short(tensor: str) -> str:
    return tensor[:-2] if tensor.endswith(":0") else tensor
