"""while(cond) body  ->  body; body; ...; body (trip count times), exact.

A while loop with a static trip count computes the same values as its body repeated that many
times, each copy reading the previous one's loop variables: the same ops on the same numbers.
Keras RNN layers (LSTM, GRU, SimpleRNN, ``Bidirectional``, stacked, ``return_sequences``) freeze
into such loops (lowered TF1 control flow with TensorLists) when the sequence length is static;
no edge target runs the loop itself (TFLite ``WHILE`` is not on the Edge TPU, Ethos-U or in
most TFLite Micro builds, and the int8 calibrator crashes on it), while every one runs the body's
FULLY_CONNECTED, LOGISTIC, TANH, MUL and ADD. The rule is what ``LSTM(unroll=True)`` does, done
on the frozen graph, with the weights carried across unchanged.

Reading element ``t`` of the input sequence becomes a ``StridedSlice`` of the model's input at
step ``t`` (through the layer's Transpose/ReverseV2, so ``go_backwards`` reads the reversed
step); the collected outputs become a ``Pack``. Counters and indices are folded to constants.
Refused, with the reason: a trip count that depends on the data (a dynamic sequence length),
nested loops, conditionals or stateful ops in the body. TF1 loops (``dynamic_rnn``) carry
their sequences in TensorArrays instead of TensorLists; both are followed.

Why not TFLite's fused UNIDIRECTIONAL_SEQUENCE_LSTM (``benchmarks/lstm_fused_support.py``):
the int8 fused op runs in TFLite Micro and Vela 5.2 lowers it to NPU operators, but the TFLite
converter fuses a tf_keras LSTM layer's function (tagged ``api_implements``) when converting the
Keras model itself, while the job converts the frozen, rewritten graph every front end gives,
where that function is inlined; TF 2.21 cannot quantize the fused op to 16x8 at all. The
unrolled form runs on all three int8 targets with no CPU operator.
"""

from __future__ import annotations

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input, tensor_ref
from rewriter.ir.loops import FUNCTIONAL_LOOP_OPS, LOOP_OPS, Loop, loop_at
from rewriter.rules._lists import (
    LENGTH,
    LIST_OPS,
    PRODUCERS,
    READERS,
    TList,
    UnrollError,
    make_list,
)
from rewriter.rules._unroll import MAX_UNROLLED_NODES, Unroller, _needed_body, trip_count
from rewriter.rules.base import Builder, Match, Reject, Rule, static_value


class WhileUnroll(Rule):
    """while(cond) body -> body repeated trip-count times (static trip count), exact."""

    name = "while_unroll"
    anchors = frozenset({"LoopCond"})
    fixes = LOOP_OPS | LIST_OPS | FUNCTIONAL_LOOP_OPS
    emits = frozenset({"StridedSlice", "Pack"})
    exact = True
    family = "while_loop"
    order = 5  # before the rules for the ops of the body, which then see every copy

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | Reject | None:
        loop = loop_at(g, node)
        if loop.problem:
            return Reject(f"while loop {loop.frame!r}: {loop.problem}", node.name)
        if _after_another_loop(g, loop):
            return None  # its input's shape is known once that loop is unrolled: next sweep
        inside = set(loop.nodes)
        nodes = [g[n] for n in loop.nodes]
        extra_nodes, outputs = _boundary(g, loop, inside)
        if isinstance(extra_nodes, Reject):
            return extra_nodes
        return Match(root=node, nodes=nodes + extra_nodes, outputs=outputs,
                     extra={"loop": loop})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        loop: Loop = m.extra["loop"]
        try:
            count = trip_count(g, loop)
            body = _needed_body(g, loop)
            for var in loop.variables:  # list lengths must be static too
                producer = g.producer(var.init)
                if producer is not None:
                    make_list(g, producer, parse_input(var.init)[1], lambda ref, i: ref)
        except UnrollError as exc:
            return Reject(f"while loop {loop.frame!r} cannot be unrolled: {exc}", m.root.name)
        if count * len(body) > MAX_UNROLLED_NODES:
            return Reject(f"while loop {loop.frame!r}: {count} iterations of {len(body)} nodes "
                          f"would exceed {MAX_UNROLLED_NODES} nodes", m.root.name)
        m.extra["count"] = count
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> dict[str, str]:
        loop: Loop = m.extra["loop"]
        b.scope = loop.frame
        unroller = Unroller(g, loop, b)
        try:
            state = unroller.run(m.extra["count"])
            results = _results(g, loop, unroller, state, m.outputs)
        except UnrollError as exc:  # check() ran the same analysis; this is a bug
            raise ValueError(f"unrolling {loop.frame}: {exc}") from exc
        unroller.finish(results)
        return results


def _boundary(g: GraphIndex, loop: Loop, inside: set[str]
              ) -> tuple[list[NodeDef] | Reject, list[str]]:
    """Nodes around the frame that go with it (list producers and readers, the loop's control
    NoOps) and the tensors that nodes outside read: (extra nodes, outputs)."""
    extra: list[NodeDef] = []
    outputs: list[str] = []
    for var in loop.variables:
        producer = g.producer(var.init)
        if (producer is not None and producer.op in PRODUCERS
                and all(c.name in inside for c in g.consumers(producer.name))):
            extra.append(producer)
        if var.exit is None:
            continue
        for user in g.consumers(var.exit):
            reads = [r for r in user.input if parse_input(r)[0] == var.exit]
            if all(r.startswith("^") for r in reads):
                continue
            if _is_list(g, var.init):
                if user.op not in READERS:
                    return Reject(f"the list result {var.exit} of while loop {loop.frame!r} is "
                                  f"read by {user.op} {user.name}", var.exit), []
                extra.append(user)
                outputs.append(tensor_ref(user.name, 0))
            else:
                outputs.append(f"{var.exit}:0")
    names = {n.name for n in extra} | inside | {v.exit for v in loop.variables if v.exit}
    for node in _control_noops(g, loop, names):
        extra.append(node)
    exits = [g[v.exit] for v in loop.variables if v.exit]
    return extra + exits, list(dict.fromkeys(outputs))


def _after_another_loop(g: GraphIndex, loop: Loop, budget: int = 5000) -> bool:
    """Whether a tensor entering ``loop`` is computed from another loop's result (a stacked
    RNN layer): that loop goes first, whatever the graph's node order."""
    seen: set[str] = set()
    stack = [parse_input(r)[0] for r in (*loop.invariants.values(),
                                         *(v.init for v in loop.variables))]
    while stack and budget > 0:
        name = stack.pop()
        if name in seen or name not in g:
            continue
        seen.add(name)
        budget -= 1
        node = g[name]
        if node.op in ("Exit", "RefExit"):
            return True
        stack.extend(parse_input(r)[0] for r in node.input)
    return False


def _control_noops(g: GraphIndex, loop: Loop, names: set[str]) -> list[NodeDef]:
    """NoOps that only order the loop (``LoopControlInputs``, ``LoopExecuted``)."""
    out = []
    seen: set[str] = set()
    for name in list(names):
        node = g[name]
        near = [g.nodes.get(parse_input(r)[0]) for r in node.input] + g.consumers(name)
        for other in near:
            if (other is None or other.op != "NoOp" or other.name in names
                    or other.name in seen):
                continue
            ins = {parse_input(r)[0] for r in other.input}
            users = g.consumers(other.name)
            if ins <= names or (users and all(u.name in names for u in users)):
                seen.add(other.name)
                out.append(other)
    return out


def _is_list(g: GraphIndex, ref: str) -> bool:
    node = g.producer(ref)
    return node is not None and node.op in PRODUCERS


def _results(g: GraphIndex, loop: Loop, unroller: Unroller, state: dict,
             outputs: list[str]) -> dict[str, str]:
    """The replacement of every tensor read outside the loop: each result's final value, and
    what each list reader after the loop reads (a Pack of the collected steps)."""
    by_exit = {v.exit: v for v in loop.variables if v.exit}
    out: dict[str, str] = {}
    known: dict[str, object] = {}  # list lengths read after the loop, for index arithmetic
    readers = []
    for ref in outputs:
        name, idx, _ = parse_input(ref)
        if name in by_exit:
            out[f"{name}:{idx}"] = unroller.tensor(state[by_exit[name].merge])
        else:
            readers.append(g[name])
    readers.sort(key=lambda n: n.op not in LENGTH)  # lengths first: Range(0, size) needs them
    for reader in readers:
        args = []
        for r in (r for r in reader.input if not r.startswith("^")):
            src = parse_input(r)[0]
            if src in by_exit:
                args.append(state[by_exit[src].merge])
                continue
            got = static_value(g, r, env=known)
            args.append(got[0] if got is not None and got[0].dtype.kind in "iu" else r)
        value = unroller.list_op(reader, args)
        if isinstance(value, TList):
            raise UnrollError(f"{reader.name} after the loop yields a list")
        if reader.op in LENGTH:
            known[f"{reader.name}:0"] = value
        out[f"{reader.name}:0"] = unroller.tensor(value)
    return out


RULES = (WhileUnroll(),)
