"""TF1 while loops in a GraphDef: find each loop's frame, variables, condition and body.

A frozen TF2 graph holds its while loops lowered to TF1 control flow (Keras RNN layers freeze
this way, and so do TF1 graphs): per loop variable ``Enter -> Merge <- NextIteration``,
``Merge -> Switch(pred = LoopCond)``, ``Switch:1`` into the body, ``Switch:0 -> Exit``; loop
invariants enter through ``Enter(is_constant=True)``. :func:`find_loops` recovers that structure
(structure only: no evaluation) so a rule can unroll a loop and a graph walk can tell which
nodes live inside one. Nested loops and conditionals inside a loop body are reported as such
(``Loop.problem``), never guessed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from rewriter.ir.graph import GraphIndex, NodeDef, is_back_edge, parse_input, tensor_ref

#: Control-flow ops that only exist inside a lowered while loop.
LOOP_OPS = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond",
                      "RefEnter", "RefExit", "RefMerge", "RefSwitch", "RefNextIteration"})
#: Functional control flow (kept as library calls when a graph was frozen without lowering).
FUNCTIONAL_LOOP_OPS = frozenset({"While", "StatelessWhile"})
FUNCTIONAL_COND_OPS = frozenset({"If", "StatelessIf", "Case", "StatelessCase"})
#: List ops just outside a loop: the sequence it reads, the results it collects (TensorLists,
#: and TF1 TensorArrays).
_LIST_BOUNDARY_OPS = frozenset({"TensorListFromTensor", "TensorListReserve", "TensorListStack",
                                "TensorArrayV3", "TensorArrayScatterV3", "TensorArrayGatherV3",
                                "TensorArraySizeV3"})


@dataclass
class LoopVar:
    """One loop variable: where it enters, how it flows, and its result."""

    enter: str
    merge: str
    switch: str
    next_iteration: str
    init: str  # the tensor entering the loop (the Enter's data input)
    body_out: str  # the tensor fed back (NextIteration's data input)
    exit: str | None = None

    @property
    def body_in(self) -> str:
        """The variable's value inside the body (``Switch:1``)."""
        return tensor_ref(self.switch, 1)


@dataclass
class Loop:
    """A TF1 while loop: ``frame`` name, variables, invariants, and its nodes."""

    frame: str
    loop_cond: str = ""
    cond: str = ""  # the boolean tensor feeding LoopCond
    variables: list[LoopVar] = field(default_factory=list)
    invariants: dict[str, str] = field(default_factory=dict)  # Enter(const) -> outer tensor
    nodes: list[str] = field(default_factory=list)  # every node of the frame, Enter..Exit
    problem: str | None = None  # why the loop cannot be taken apart, if it cannot

    def var_by_merge(self) -> dict[str, LoopVar]:
        return {v.merge: v for v in self.variables}

    def body_order(self, g: GraphIndex) -> list[NodeDef]:
        """The frame's computation nodes (no Enter/Merge/Switch/Exit/NextIteration/LoopCond) in
        dependency order; body and condition nodes alike."""
        inside = set(self.nodes)
        return [n for n in g.topological_order() if n.name in inside and n.op not in LOOP_OPS]


def frame_of(node: NodeDef) -> str:
    return node.attr["frame_name"].s.decode() if "frame_name" in node.attr else ""


def find_loops(g: GraphIndex) -> list[Loop]:
    """Every TF1 while loop of the graph, in graph order."""
    return [loop_at(g, n) for n in g if n.op == "LoopCond"]


def loop_at(g: GraphIndex, loop_cond: NodeDef) -> Loop:
    """The while loop whose ``LoopCond`` is ``loop_cond``, in O(frame size)."""
    enters = _enters_of(g, loop_cond)
    frames = {frame_of(e) for e in enters}
    if len(frames) != 1:
        loop = Loop(" + ".join(sorted(frames)) or loop_cond.name)
        loop.problem = (f"LoopCond {loop_cond.name} reaches {len(frames)} loop frames "
                        "(nested or malformed loops)")
        return loop
    return _loop(g, frames.pop(), enters)


def _enters_of(g: GraphIndex, loop_cond: NodeDef) -> list[NodeDef]:
    """The Enter nodes of ``loop_cond``'s loop: every node connected to it without passing out
    through an Enter (upwards) or an Exit (downwards) is in the frame."""
    seen = {loop_cond.name}
    queue = deque([loop_cond.name])
    enters: list[NodeDef] = []
    while queue:
        node = g[queue.popleft()]
        if node.op in ("Enter", "RefEnter"):
            enters.append(node)
            nxt = [c.name for c in g.consumers(node.name)]
        elif node.op in ("Exit", "RefExit"):
            nxt = [parse_input(r)[0] for r in node.input]
        else:
            nxt = ([parse_input(r)[0] for r in node.input]
                   + [c.name for c in g.consumers(node.name)])
        for name in nxt:
            if name in g and name not in seen:
                seen.add(name)
                queue.append(name)
    return sorted(enters, key=lambda n: n.name)


def loop_nodes(g: GraphIndex) -> set[str]:
    """Names of the nodes inside any while loop frame (their tensors cannot be fetched from
    outside the loop)."""
    out: set[str] = set()
    for loop in find_loops(g):
        out.update(n for n in loop.nodes if g[n].op not in ("Exit", "RefExit"))
    return out


def loop_members(g: GraphIndex) -> dict[str, str]:
    """Every node of every while loop frame, Exits included -> the loop's LoopCond: what a
    converter turns into one loop op (TFLite ``WHILE``)."""
    out: dict[str, str] = {}
    for node in g:
        if node.op != "LoopCond":
            continue
        frame = _frame_nodes(g, _enters_of(g, node))
        for name in frame:
            out.setdefault(name, node.name)
            n = g[name]
            around = ([g.producer(r) for r in n.input] if n.op in ("Enter", "RefEnter")
                      else g.consumers(name) if n.op in ("Exit", "RefExit") else [])
            for other in around:  # the lists a Keras RNN's loop reads and writes
                if other is not None and other.op in _LIST_BOUNDARY_OPS:
                    out.setdefault(other.name, node.name)
    return out


def _loop(g: GraphIndex, frame: str, enters: list[NodeDef]) -> Loop:
    loop = Loop(frame)
    loop.nodes = _frame_nodes(g, enters)
    inside = set(loop.nodes)
    for name in loop.nodes:
        node = g[name]
        if node.op in ("Enter", "RefEnter") and frame_of(node) != frame:
            loop.problem = f"nested while loop {frame_of(node)!r} inside {frame!r}"
            return loop
        if node.op in FUNCTIONAL_LOOP_OPS | FUNCTIONAL_COND_OPS:
            loop.problem = f"functional {node.op} {name} inside the loop body"
            return loop
    conds = [n for n in loop.nodes if g[n].op == "LoopCond"]
    if len(conds) != 1:
        loop.problem = f"{len(conds)} LoopCond nodes in frame {frame!r} (expected 1)"
        return loop
    loop.loop_cond = conds[0]
    loop.cond = g[conds[0]].input[0]
    for enter in enters:
        data = [r for r in enter.input if not r.startswith("^")]
        if enter.attr["is_constant"].b:
            loop.invariants[enter.name] = data[0]
            continue
        var = _variable(g, enter, data[0], loop.loop_cond, inside)
        if isinstance(var, str):
            loop.problem = var
            return loop
        loop.variables.append(var)
    switches = {v.switch for v in loop.variables}
    merges = {v.merge for v in loop.variables}
    for name in loop.nodes:
        op = g[name].op
        if (op == "Switch" and name not in switches) or (op == "Merge" and name not in merges):
            loop.problem = (f"conditional ({op} {name}) inside the loop body; only straight-line "
                            "loop bodies can be unrolled")
            return loop
    return loop


def _variable(g: GraphIndex, enter: NodeDef, init: str, loop_cond: str,
              inside: set[str]) -> LoopVar | str:
    """The loop variable entering through ``enter``, or why its structure is not a loop's."""
    merges = [c for c in g.consumers(enter.name) if c.op in ("Merge", "RefMerge")]
    if len(merges) != 1:
        return f"Enter {enter.name} feeds {len(merges)} Merge nodes (expected 1)"
    merge = merges[0]
    back = [g.nodes.get(parse_input(r)[0]) for r in merge.input if not r.startswith("^")]
    nexts = [n for n in back if n is not None and is_back_edge(n, merge)]
    if len(nexts) != 1:
        return f"Merge {merge.name} has no NextIteration input"
    switches = [c for c in g.consumers(merge.name) if c.op in ("Switch", "RefSwitch")
                and parse_input(c.input[1])[0] == loop_cond]
    if len(switches) != 1:
        return f"Merge {merge.name} feeds {len(switches)} loop Switch nodes (expected 1)"
    switch = switches[0]
    exits = [c for c in g.consumers(switch.name) if c.op in ("Exit", "RefExit")]
    body_out = [r for r in nexts[0].input if not r.startswith("^")][0]
    return LoopVar(enter.name, merge.name, switch.name, nexts[0].name, init, body_out,
                   exits[0].name if exits else None)


def _frame_nodes(g: GraphIndex, enters: list[NodeDef]) -> list[str]:
    """Nodes reachable from the frame's Enter nodes without leaving through an Exit."""
    seen: set[str] = set()
    queue = deque(e.name for e in enters)
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        if g[name].op in ("Exit", "RefExit"):
            continue
        queue.extend(c.name for c in g.consumers(name) if c.name not in seen)
    return [n.name for n in g if n.name in seen]
