"""How far a model's outputs move when an approximate rule application errs by its stated bound.

An approximate rule states the max abs error ``b`` of the tensor it replaces. Passed to the
outputs unchanged (``B * max(1, s)``, :mod:`rewriter.verify.tolerance`), that bound assumes the
layers after the node do not amplify it; they may. On Basic Pitch (ethos-u55-128) the one
approximate application, ``div_reciprocal_ramps`` at ``normalized_log_1/div_no_nan`` (b =
1.75e-4), reaches the outputs through a batch norm, convolutions and sigmoids with a gain of
about 2.7: the rewritten graph's outputs differ by up to 4.8e-4 while no node leaves its own
bound (:mod:`rewriter.verify.divergence`).

:func:`bound_response` measures that gain on the original model: for each approximate
application (the largest bounds first, at most :data:`MAX_APPLICATIONS`), the root's tensor is
computed on each verification sample and fed back into the rest of the graph moved by ``+b``,
by ``-b`` and by ``b`` with a random sign per element (seeded by sample), and the largest change
of each output over those runs is kept (one TF function per application, three runs per
sample). The responses of several applications add up per output: each is its own worst case,
and their errors may add. :meth:`rewriter.verify.tolerance.TolerancePolicy.for_rewrite` then
allows :data:`~rewriter.verify.tolerance.RESPONSE_FACTOR` times that sum where it is larger
than ``B * max(1, s)`` (the factor's evidence is with it).

An application whose root cannot be fed (not in the original graph, inside a while loop, not a
float tensor) or beyond the cap keeps the old rule: its bound adds ``b * max(1, s)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.verify.tolerance import RESPONSE_FACTOR, approximate_roots

__all__ = ["MAX_APPLICATIONS", "RESPONSE_FACTOR", "BoundResponse", "bound_response"]

#: At most this many approximate applications are measured (three runs per sample each); the
#: others keep ``b * max(1, s)``.
MAX_APPLICATIONS = 4


@dataclass(frozen=True)
class BoundResponse:
    """The measured response of the outputs to the approximate applications' bounds."""

    #: {output: sum over the measured applications of max |f(x with root + pattern) - f(x)|}
    response: dict[str, float]
    #: [{root, rule, bound, response: {output: value}}] per measured application
    measured: list[dict[str, Any]] = field(default_factory=list)
    #: The sum of the bounds of the approximate applications not measured (and why not).
    unmeasured_budget: float = 0.0
    unmeasured: list[dict[str, Any]] = field(default_factory=list)
    samples: int = 0

    @property
    def measured_budget(self) -> float:
        return float(sum(m["bound"] for m in self.measured))

    def most_sensitive(self, scales: Mapping[str, float]) -> str | None:
        """One line naming the measured application that moves an output most relative to its
        scale (``scales``: max |ref| per output), for a rewritten graph that did not match;
        None when nothing was measured."""
        hits = [(v / scales[k] if scales.get(k) else math.inf, v, k, m)
                for m in self.measured for k, v in m["response"].items() if v > 0]
        if not hits:
            return None
        rel, v, k, m = max(hits, key=lambda h: (h[0], h[1]))
        share = f" ({rel:.2g} of its scale)" if math.isfinite(rel) else ""
        return (f"{m['rule']} at {m['root']} (stated bound {m['bound']:.3g}) moves output {k} by "
                f"up to {v:.3g}{share} when it errs by its bound (a gain of {v / m['bound']:.3g}, "
                f"measured on {self.samples} sample(s)): the model is sensitive to an error "
                "there; a tighter fit or an exact rule for that op is what would help")

    def to_json(self) -> dict[str, Any]:
        def fin(x: float) -> Any:
            return x if math.isfinite(x) else str(x)

        return {"factor": RESPONSE_FACTOR, "samples": self.samples,
                "response": {k: fin(v) for k, v in self.response.items()},
                "measured": [{**m, "response": {k: fin(v) for k, v in m["response"].items()}}
                             for m in self.measured],
                "unmeasured": list(self.unmeasured),
                "unmeasured_budget": fin(self.unmeasured_budget)}


def _applications(applied: Sequence[Any]) -> list[dict[str, Any]]:
    """The approximate applications among ``applied`` ({root, rule, bound}), one per root,
    the largest bounds first."""
    rules = {}
    for a in applied:
        j = a if isinstance(a, Mapping) else a.to_json()
        for root in j.get("roots") or [j["root"]]:
            rules.setdefault(root, j["rule"])
    return sorted(({"rule": rules[r], "root": r, "bound": b}
                   for r, b in approximate_roots(applied).items()),
                  key=lambda a: (-a["bound"], a["root"]))


def _why_not(model: Any, root: str, inside: set[str], names: Mapping[str, Any]) -> str | None:
    from rewriter.ir.graph import node_dtype

    node = names.get(root)
    if node is None:
        return "not a node of the original graph"
    if node.name in inside:
        return "inside a while loop (its tensor cannot be fed)"
    dt = node_dtype(node)
    if dt is None or dt.kind != "f":
        return "not a float tensor"
    return None


def _patterns(shape: tuple[int, ...], dtype: np.dtype, b: float,
              seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    signs = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return [np.full(shape, b, dtype), np.full(shape, -b, dtype), (b * signs).astype(dtype)]


def _measure(fn: Any, model: Any, samples: Sequence[Mapping[str, np.ndarray]],
             values: Sequence[Mapping[str, np.ndarray]], reference: Mapping[str, np.ndarray],
             app: Mapping[str, Any]) -> dict[str, float]:
    """{output: max |change|} over ``samples`` and :func:`_patterns` of one application, with
    ``fn(*inputs, root_value)`` the rest of the graph and ``values`` the root per sample."""
    import tensorflow as tf

    got = dict.fromkeys(reference, 0.0)
    for i, (sample, value) in enumerate(zip(samples, values, strict=True)):
        v = np.asarray(value[app["tensor"]])
        args = [tf.constant(np.asarray(sample[s.name], dtype=s.dtype)) for s in model.inputs]
        for p in _patterns(v.shape, v.dtype, app["bound"], seed=i):
            outs = fn(*args, tf.constant(v + p))
            outs = outs if isinstance(outs, (list, tuple)) else [outs]
            for o, t in zip(model.outputs, outs, strict=True):
                if o.name not in reference:
                    continue
                ref = np.asarray(reference[o.name][i], np.float64)
                d = np.abs(np.asarray(t.numpy(), np.float64).reshape(ref.shape) - ref)
                d = d[np.isfinite(d)]
                got[o.name] = max(got[o.name], float(d.max(initial=0.0)))
    return got


def bound_response(model: Any, samples: Sequence[Mapping[str, np.ndarray]],
                   reference: Mapping[str, np.ndarray], applied: Sequence[Any],
                   max_applications: int = MAX_APPLICATIONS) -> BoundResponse | None:
    """Measure, on the original ``model`` and its stacked outputs ``reference`` on
    ``samples``, each approximate application's response (module docstring). None when
    ``applied`` has no approximate application (nothing to measure)."""
    import tensorflow as tf

    from rewriter.ir.graph import GraphIndex
    from rewriter.ir.loops import loop_nodes
    from rewriter.ir.model import import_function
    from rewriter.verify.divergence import name_key

    apps = _applications(applied)
    if not apps:
        return None
    g = GraphIndex(model.graph_def)
    inside = loop_nodes(g)
    names = {name_key(n.name): n for n in model.graph_def.node}
    todo, unmeasured = [], []
    for a in apps:
        why = (f"beyond the first {max_applications} (largest bounds first)"
               if len(todo) >= max_applications
               else "an unbounded rule" if not math.isfinite(a["bound"])
               else _why_not(model, name_key(a["root"]), inside, names))
        if why is None:
            todo.append({**a, "tensor": f"{names[name_key(a['root'])].name}:0"})
        else:
            unmeasured.append({**a, "why": why})
    response = dict.fromkeys(reference, 0.0)
    measured = []
    if todo:
        values = [model.run(s, fetches=[a["tensor"] for a in todo]) for s in samples]
        graph, variables = model.weights()
        feeds = [i.tensor for i in model.inputs]
        outputs = [o.tensor for o in model.outputs]
        for a in todo:
            try:
                fn = import_function(graph, variables, [*feeds, a["tensor"]], outputs)
                got = _measure(fn, model, samples, values, reference, a)
            except (ValueError, TypeError, KeyError, tf.errors.OpError) as exc:
                # a tensor TF cannot feed (e.g. a model input): the old rule for this one
                unmeasured.append({k: v for k, v in a.items() if k != "tensor"}
                                  | {"why": f"could not be fed: {type(exc).__name__}: {exc}"[:200]})
                continue
            measured.append({"rule": a["rule"], "root": a["root"], "bound": a["bound"],
                             "response": got})
            for k, v in got.items():
                response[k] += v
    return BoundResponse(response, measured, float(sum(a["bound"] for a in unmeasured)),
                         unmeasured, len(samples))
