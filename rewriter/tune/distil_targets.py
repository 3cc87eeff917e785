"""What ``--recover`` distils: each float output itself, and for an integer output (an arg-max
index map, ids) the float tensor its arg-max reads (the logits), in both graphs.

An index has no gradient: a mean squared error on it cannot move a weight (and subtracting a
float target from an int32 output is a TypeError). The arg-max's input can: pulling the
rewritten graph's logits towards the original's pulls its indices with them. The tensor is
found in the original, from the output back through ops that carry the index unchanged
(:data:`CARRY_OPS`) to the ``ArgMax`` / ``ArgMin`` that makes it, then its input 0. It is
matched in the rewritten graph by node name, as :mod:`rewriter.verify.divergence` matches
intermediate tensors (rules keep the name of every node they do not replace, and name their
output after the root they replace). A node the rewritten graph lacks was absorbed by a rule
rooted at the arg-max (Keras 3's ``-0.0`` select, which ``argmax_signed_zero_fold`` and
``argmax_reduce_max`` take away, changing no value but ``-0.0``): the walk goes on through its
float inputs to the tensors the rule reads, which both graphs have. When an integer output has
no such tensor (not made by an arg-max, or no float input left in the rewritten graph),
``--recover`` cannot distil it and says why (:func:`distil_targets` returns the reason).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, data_inputs, node_dtype, parse_input
from rewriter.ir.model import Model
from rewriter.verify.divergence import name_key

#: Ops an index passes through unchanged in value (a view or a type change of it; a Cast only
#: from an integer type: one from a float makes the integer).
CARRY_OPS = frozenset({"Identity", "Snapshot", "Cast", "Reshape", "Squeeze", "ExpandDims"})
#: Ops that make an index from the float tensor they read (input 0).
INDEX_OPS = frozenset({"ArgMax", "ArgMin"})
#: How far the walk goes through nodes a rule absorbed before it gives up.
_MAX_ABSORBED = 16


@dataclass(frozen=True)
class Target:
    """One tensor the distillation pulls: ``student`` (a tensor of the rewritten graph) towards
    ``teacher`` (the same tensor of the original), for the signature output ``output``."""

    output: str
    teacher: str
    student: str


def distil_targets(teacher: Model, student: Model) -> tuple[list[Target], str | None]:
    """The tensors to distil, one or more per output of ``student`` (float outputs: the output
    itself; integer ones: the float tensors their arg-max reads, found as the module docstring
    says), and None; or ([], why) when an integer output has none."""
    spec = {o.name: o for o in teacher.outputs}
    t_graph, s_graph = GraphIndex(teacher.graph_def), GraphIndex(student.graph_def)
    in_student = {name_key(n.name): n.name for n in student.graph_def.node}
    out: list[Target] = []
    for o in student.outputs:
        ref = spec.get(o.name)
        if ref is None or _is_float(ref.dtype):
            out.append(Target(o.name, ref.tensor if ref else o.tensor, o.tensor))
            continue
        feeds, why = _index_feeds(t_graph, _ancestors(s_graph, o.tensor), in_student,
                                  ref.tensor)
        if why:
            return [], (f"the integer output {o.name} ({ref.dtype}) has no float tensor to "
                        f"distil: {why}")
        out.extend(Target(o.name, t, s) for t, s in feeds)
    return out, None


def cannot_distil(teacher: Model, student: Model) -> str | None:
    """Why ``--recover`` cannot distil ``student`` from ``teacher`` (None: it can)."""
    return distil_targets(teacher, student)[1]


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat", "half"))


def _ancestors(g: GraphIndex, tensor: str) -> set[str]:
    """The nodes ``tensor`` is computed from (its own included): what can pull it."""
    seen, stack = set(), [parse_input(tensor)[0]]
    while stack:
        name = stack.pop()
        if name in seen or name not in g:
            continue
        seen.add(name)
        stack.extend(parse_input(r)[0] for r in data_inputs(g[name]))
    return seen


def _index_feeds(t_graph: GraphIndex, upstream: set[str], in_student: dict[str, str],
                 tensor: str) -> tuple[list[tuple[str, str]], str]:
    """(teacher tensor, student tensor) pairs of the float inputs of the arg-max making
    ``tensor`` in the original, the student's among ``upstream`` (the nodes its output is
    computed from); ([], why) when there are none."""
    node = t_graph.producer(tensor)
    while node is not None and node.op in CARRY_OPS and data_inputs(node) and not (
            node.op == "Cast" and (node_dtype(node, ("SrcT",)) or np.dtype("f4")).kind == "f"):
        node = t_graph.producer(data_inputs(node)[0])
    if node is None or node.op not in INDEX_OPS:
        made = f"{node.op} {node.name}" if node is not None else "no op"
        return [], (f"it is made by {made}, not by an arg-max "
                    f"({', '.join(sorted(INDEX_OPS))})")
    frontier, seen, pairs, absorbed = [data_inputs(node)[0]], set(), [], 0
    while frontier:
        ref = frontier.pop(0)
        name, index, _ = parse_input(ref)
        src = t_graph[name] if name in t_graph else None
        if src is None or name in seen or src.op == "Const":
            continue
        seen.add(name)
        dt = node_dtype(src)
        if dt is None or dt.kind != "f":
            continue
        twin = in_student.get(name_key(name))
        if twin is not None and twin in upstream:
            pairs.append((f"{name}:{index}", f"{twin}:{index}"))
            continue
        absorbed += 1
        if absorbed > _MAX_ABSORBED:
            break
        frontier.extend(data_inputs(src))
    if not pairs:
        return [], (f"no float input of {node.op} {node.name} (nor of the nodes a rule absorbed "
                    "before it) is in the rewritten graph")
    return pairs, ""
