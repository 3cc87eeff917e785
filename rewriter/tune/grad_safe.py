"""A gradient for the int8 simulation of ``--recover`` where an op's slope is infinite at 0.

Fake quantisation rounds a tensor's small positive values to 0 (0 is on the grid of every range
the converter gives: each contains 0). An op whose derivative is infinite there then gets a
NaN or infinite gradient: ``log(0) = -inf`` is clamped by the next fake quantisation, whose
gradient is 0 there, and 0 x 1/0 = NaN (Basic Pitch's ``Log(x^2 + 1e-10)`` on ethos-u55-128,
where LOG stays an op, tflm fitting it with ramps: 53063 of its 53148 inputs round to 0 with
the converter's range, and the two 9216-value weights before it got all-NaN gradients at the
first step: the fine-tuning "diverged at epoch 1"). Such an op ``f`` reading ``q`` becomes

    t = f(max(q, smallest normal float32)),   out = t + StopGradient(f(q) - t)

exactly ``f(q)`` in the forward pass (``f(q) - t`` is 0 wherever ``q`` is at least the floor,
and elsewhere holds ``f(q)``'s own -inf or 0), and the gradient is ``t``'s: finite, 0 at a
rounded 0 (the maximum passes nothing to ``q`` there).
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, make_const, make_node, parse_input

#: Ops whose derivative is infinite at 0.
STEEP_AT_0 = frozenset({"Log", "Sqrt"})


def gradient_safe(g: GraphIndex, tensor: str) -> None:
    """Give each :data:`STEEP_AT_0` op reading node ``tensor`` (output 0) a finite gradient,
    its forward values unchanged (in place)."""
    for node in [c for c in g.consumers(tensor) if c.op in STEEP_AT_0]:
        base = g.unique_name(f"{node.name}/grad_safe")
        tiny = g.add(make_const(f"{base}/tiny", np.float32(np.finfo(np.float32).tiny)))
        floor = g.add(make_node("Maximum", f"{base}/floored", [tensor, tiny.name]))
        twin = NodeDef()
        twin.CopyFrom(node)
        twin.name = f"{base}/twin"
        del twin.input[:]
        twin.input.extend(floor.name if parse_input(r)[:2] == (tensor, 0) else r
                          for r in node.input)
        g.add(twin)
        users = g.consumers(node.name)
        gap = g.add(make_node("Sub", f"{base}/gap", [node.name, twin.name]))
        held = g.add(make_node("StopGradient", f"{base}/held", [gap.name]))
        g.add(make_node("AddV2", base, [twin.name, held.name]))
        for user in users:
            g.set_inputs(user, [base if parse_input(r)[:2] == (node.name, 0)
                                and not r.startswith("^") else r for r in user.input])
