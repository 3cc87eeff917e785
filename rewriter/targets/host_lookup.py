"""The host lookup: an embedding table's GATHER at the start of a model, run on the host instead.

A text model starts with ``table[ids]`` (Keras ``Embedding``): a GATHER of a constant table by
integer ids that come straight from the model's inputs. The Edge TPU has no GATHER (and takes no
int32 tensor), Vela leaves it to the CPU; no rule removes it there. Deployments do the lookup on
the host (a row copy per id) and feed the rows to the accelerator. :func:`host_lookup` finds such
GATHERs among the unsupported nodes and gives the ``--inputs`` value that starts the model after
them, and the whole command line, so the report can offer the cut (the tail's ``--outputs``
counterpart, :mod:`rewriter.targets.tail`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewriter.ir.graph import GraphIndex, parse_input
from rewriter.ir.static_eval import tensor_shape

if TYPE_CHECKING:  # pragma: no cover
    from rewriter.ir.model import Model
    from rewriter.targets.verdicts import GraphCheck

GATHER_OPS = frozenset({"GatherV2", "Gather", "ResourceGather"})
#: Ops between a model input and the ids (casts, the index wrap, reshapes).
_ID_OPS = frozenset({"Placeholder", "Const", "Identity", "Cast", "Less", "AddV2", "Add",
                     "SelectV2", "Select", "Reshape", "ExpandDims", "Squeeze", "StridedSlice",
                     "Shape", "Maximum", "Minimum", "ClipByValue"})


@dataclass
class HostLookup:
    """Unsupported table lookups at the model's start, and the cut after them."""

    nodes: list[str]  # the GATHER nodes (their outputs become the new inputs)
    tables: list[list[int | None]]  # each table's shape [rows, width]
    model_path: str
    target: str

    @property
    def hint(self) -> str:
        return "--inputs " + ",".join(self.nodes)

    @property
    def command(self) -> str:
        return f"rewrite {self.model_path} --target {self.target} {self.hint}"

    def describe(self) -> str:
        shapes = ", ".join("x".join(str(d) for d in t) for t in self.tables)
        return (f"embedding lookup (GATHER of a {shapes} table by the input ids) that the target "
                f"cannot run: look the rows up on the host and start the model after it: "
                f"`{self.command}` (your ids data, --calibration and --data as for this model, is "
                "mapped through the lookup to the rows, table[ids], by the graph itself)")

    def to_json(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "tables": [list(t) for t in self.tables],
                "hint": self.hint, "command": self.command, "text": self.describe()}


def host_lookup(model: Model, check: GraphCheck, target: str) -> HostLookup | None:
    """The unsupported GATHERs of ``model`` (``check``: TF-graph level verdicts) that look a
    constant table up by ids computed from the model's inputs alone, or None."""
    g = GraphIndex(model.graph_def)
    found: list[str] = []
    tables: list[list[int | None]] = []
    for v in check.verdicts:
        if v.supported or v.op not in GATHER_OPS or v.node not in g or v.node in found:
            continue
        node = g[v.node]
        if len(node.input) < 2 or not _constant(g, node.input[0]) \
                or not _from_inputs(g, node.input[1]):
            continue
        found.append(v.node)
        shape = tensor_shape(g, node.input[0])
        tables.append([None if d is None else int(d) for d in shape] if shape else [])
    if not found:
        return None
    return HostLookup(found, tables, model.source.path, target)


def _constant(g: GraphIndex, ref: str) -> bool:
    node = g.nodes.get(parse_input(ref)[0])
    while node is not None and node.op in ("Identity", "ReadVariableOp") and node.input:
        node = g.nodes.get(parse_input(node.input[0])[0])
    return node is not None and node.op in ("Const", "VarHandleOp")


def _from_inputs(g: GraphIndex, ref: str, limit: int = 32) -> bool:
    """``ref`` is computed from placeholders and constants by id plumbing only."""
    seen: set[str] = set()
    todo = [parse_input(ref)[0]]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = g.nodes.get(name)
        if node is None or node.op not in _ID_OPS or len(seen) > limit:
            return False
        todo.extend(parse_input(r)[0] for r in node.input if not r.startswith("^"))
    return any(g[n].op == "Placeholder" for n in seen)
