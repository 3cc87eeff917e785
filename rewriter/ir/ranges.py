"""Observed value ranges of graph tensors, measured by running the float graph on sample data.

Rules that fit a function on the range its input actually takes (:mod:`rewriter.rules.
unary_ramps` and the other ``*_ramps`` rules) ask :func:`observed_range` for a tensor of the
graph they are rewriting. The data reaches them through the graph: the pass manager calls
:func:`attach_samples` with the model's signature and the calibration samples (the same data the
int8 converter calibrates on, so the fitted range is the range int8 quantises the tensor to).

Ranges are measured on the *current* graph (earlier rewrites included), in one run over the
samples for every tensor a range-needing rule may ask for (the inputs of nodes whose op is in
:data:`RANGE_OPS` of the attached set), and cached until the graph changes. Only min and max
are kept per tensor, so memory does not grow with the graph.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, parse_input


@dataclass(frozen=True)
class ObservedRange:
    """``[lo, hi]`` of a tensor over ``samples`` samples (non-finite values are excluded and
    counted in ``nonfinite``)."""

    lo: float
    hi: float
    samples: int
    nonfinite: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"lo": self.lo, "hi": self.hi, "samples": self.samples,
                "nonfinite": self.nonfinite}


@dataclass
class _Samples:
    inputs: list[Any]  # TensorSpec of the model's inputs
    samples: list[dict[str, np.ndarray]]
    ops: frozenset[str]  # op types whose input tensors are measured together
    cache: dict[str, ObservedRange] = field(default_factory=dict)
    stamp: tuple[int, ...] = ()
    near: frozenset[str] | None = None


#: How far above a focus node the prefetch looks for tensors a rule may ask for.
NEAR_HOPS = 4


_ATTR = "_rewriter_samples"


def attach_samples(g: GraphIndex, inputs: Sequence[Any],
                   samples: Sequence[Mapping[str, np.ndarray]] | None,
                   ops: Iterable[str] = (), near: Iterable[str] | None = None) -> None:
    """Make ``samples`` (feed dicts keyed by input name) available to :func:`observed_range`
    on ``g``. Measured together with the first request: the inputs of nodes whose op is in
    ``ops`` (and, when ``near`` names nodes, only those nodes and their producers up to
    :data:`NEAR_HOPS` hops up). None or no samples detaches."""
    if not samples:
        setattr(g, _ATTR, None)
        return
    setattr(g, _ATTR, _Samples(list(inputs), [dict(s) for s in samples], frozenset(ops),
                               near=None if near is None else frozenset(near)))


def has_samples(g: GraphIndex) -> bool:
    return getattr(g, _ATTR, None) is not None


def observed_range(g: GraphIndex, ref: str) -> ObservedRange | None:
    """The range tensor ``ref`` takes on the attached samples, or None without samples."""
    data: _Samples | None = getattr(g, _ATTR, None)
    if data is None:
        return None
    key = _key(ref)
    stamp = _stamp(g)
    if data.stamp != stamp:
        data.cache.clear()
        data.stamp = stamp
    if key not in data.cache:
        wanted = sorted({key} | _inputs_of(g, data.ops, data.near))
        for batch in (wanted, [key]):  # a tensor TF cannot fetch fails the whole batch
            try:
                data.cache.update(measure(g, data.inputs, data.samples, batch))
                break
            except Exception:  # noqa: BLE001 - TF raises many kinds; the range stays unknown
                continue
    return data.cache.get(key)


def sample_values(g: GraphIndex, ref: str) -> list[np.ndarray] | None:
    """The values tensor ``ref`` takes on each attached sample (for a rule that derives the
    range of a tensor it is about to build, e.g. ``x - max(x)``), or None without samples."""
    from rewriter.ir.model import Model, Source

    data: _Samples | None = getattr(g, _ATTR, None)
    if data is None:
        return None
    model = Model(g.to_graph_def(), list(data.inputs), [], Source("<ranges>", "memory"))
    key = _key(ref)
    return [np.asarray(model.run(feeds, fetches=[key])[key]) for feeds in data.samples]


def measure(g: GraphIndex, inputs: Sequence[Any], samples: Sequence[Mapping[str, np.ndarray]],
            tensors: Sequence[str]) -> dict[str, ObservedRange]:
    """Min and max of each float tensor in ``tensors`` over ``samples`` (one run per sample)."""
    from rewriter.ir.model import Model, Source

    model = Model(g.to_graph_def(), list(inputs), [], Source("<ranges>", "memory"))
    fetch = [t for t in tensors if _is_float(g, t)]
    if not fetch:
        return {}
    lo = {t: math.inf for t in fetch}
    hi = {t: -math.inf for t in fetch}
    bad = dict.fromkeys(fetch, 0)
    for feeds in samples:
        for t, arr in model.run(feeds, fetches=fetch).items():
            a = np.asarray(arr, np.float64)
            finite = np.isfinite(a)
            bad[t] += int(a.size - finite.sum())
            if finite.any():
                lo[t] = min(lo[t], float(a[finite].min()))
                hi[t] = max(hi[t], float(a[finite].max()))
    return {t: ObservedRange(lo[t], hi[t], len(samples), bad[t])
            for t in fetch if lo[t] <= hi[t]}


def _key(ref: str) -> str:
    name, idx, _ = parse_input(ref)
    return f"{name}:{idx}"


def _stamp(g: GraphIndex) -> tuple[int, ...]:
    """Changes whenever nodes are added or removed (rewrites always do both)."""
    return (len(g.nodes), len(getattr(g, "_order", ())))


def _inputs_of(g: GraphIndex, ops: frozenset[str], near: frozenset[str] | None) -> set[str]:
    """Input tensors of the nodes of type ``ops`` (within reach of ``near`` when given)."""
    if near is None:
        nodes = [n for n in g if n.op in ops]
    else:
        seen: set[str] = set()
        frontier = [n for n in near if n in g]
        for _ in range(NEAR_HOPS + 1):
            nxt = []
            for name in frontier:
                if name in seen or name not in g:
                    continue
                seen.add(name)
                nxt.extend(parse_input(r)[0] for r in g[name].input if not r.startswith("^"))
            frontier = nxt
        nodes = [g[n] for n in seen if g[n].op in ops]
    out: set[str] = set()
    for node in nodes:
        out.update(_key(r) for r in node.input if not r.startswith("^"))
    return out


def _is_float(g: GraphIndex, ref: str) -> bool:
    from rewriter.ir.graph import node_dtype

    node = g.nodes.get(parse_input(ref)[0])
    if node is None or node.op in ("Const",):
        return False
    dt = node_dtype(node)
    return dt is None or dt.kind == "f"
