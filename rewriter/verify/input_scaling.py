"""What a model does to its inputs first: a Rescaling / Normalization layer found in the graph.

Keras ``Rescaling(scale, offset)`` freezes to ``Mul`` then ``AddV2``; ``Normalization(mean,
variance)`` to ``Sub`` then ``RealDiv`` (by ``Maximum(sqrt(variance), eps)``); keras.applications
MobileNetV3 / EfficientNet / ConvNeXt carry them at their input. :func:`input_scaling` follows the
chain of element-wise affine ops (``Mul``, ``Add``/``AddV2``, ``Sub``, ``RealDiv``/``Div``,
``BiasAdd``, ``Cast``, ``Identity``) that starts at an input, as long as each op's other operand
does not depend on any input and each link has one consumer, then *measures* the map by running
the graph up to the chain's end on inputs 0, 1 and 255: ``y = x * scale + offset`` with one scale
and offset per channel (last axis). A chain that is not affine per channel, or is the identity,
is not reported.

A map that sends pixels 0..255 into :data:`PIXEL_BOUND` (|y| <= 8: [0, 1], [-1, 1], ImageNet
mean/std) means the model expects raw pixels; one that does not (a Normalization adapted on data
in [0, 1]) means it expects something else, and images then need ``--pixel-range``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, parse_input
from rewriter.ir.model import Model

AFFINE_OPS = frozenset({"Mul", "Add", "AddV2", "Sub", "RealDiv", "Div", "BiasAdd", "Cast",
                        "Identity"})
#: Ops where the chain's tensor must be the first operand (x - c, x / c are affine; c / x not).
_FIRST_ONLY = frozenset({"RealDiv", "Div"})
#: |y| bound of a "normalised" input: 0..255 mapped inside it means the model takes raw pixels.
PIXEL_BOUND = 8.0
_PROBES = (0.0, 1.0, 255.0)


@dataclass
class InputScaling:
    """``y = x * scale + offset`` per channel, computed by ``nodes`` at the start of the graph."""

    input: str
    nodes: list[str]
    layers: list[str]
    scale: np.ndarray  # per channel (last axis), float64
    offset: np.ndarray
    notes: list[str] = field(default_factory=list)

    def image(self, lo: float, hi: float) -> tuple[float, float]:
        """The smallest and largest value ``[lo, hi]`` maps to, over all channels."""
        ends = np.stack([lo * self.scale + self.offset, hi * self.scale + self.offset])
        return float(ends.min()), float(ends.max())

    @property
    def takes_pixels(self) -> bool:
        """Whether raw pixels 0..255 land in a normalised range after this map."""
        lo, hi = self.image(0.0, 255.0)
        return max(abs(lo), abs(hi)) <= PIXEL_BOUND and hi - lo > 0

    def preimage(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        """Per channel, the inputs that this map sends to ``[lo, hi]``."""
        a = (lo - self.offset) / self.scale
        b = (hi - self.offset) / self.scale
        return np.minimum(a, b), np.maximum(a, b)

    def formula(self) -> str:
        off = _vec(self.offset)
        return f"x * {_vec(self.scale)} " + (f"- {off[1:]}" if off.startswith("-") else f"+ {off}")

    def describe(self) -> str:
        """``rescaling_1 at its input (x * 0.00392 + 0)``."""
        return f"{' + '.join(self.layers) or 'affine ops'} at its input ({self.formula()})"

    def pixels_text(self) -> str:
        lo, hi = self.image(0.0, 255.0)
        return f"pixels 0..255 become [{lo:.3g}, {hi:.3g}]"

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "layers": self.layers, "nodes": self.nodes,
                "scale": [float(v) for v in self.scale], "offset": [float(v) for v in self.offset],
                "takes_pixels": self.takes_pixels, "notes": list(self.notes)}


def _vec(v: np.ndarray) -> str:
    if np.allclose(v, v.flat[0], rtol=1e-6, atol=0):
        return f"{float(v.flat[0]):.4g}"
    return "[" + ", ".join(f"{float(x):.4g}" for x in v[:4]) + (", ...]" if v.size > 4 else "]")


def input_scaling(model: Model) -> dict[str, InputScaling]:
    """Input name -> the affine map at its start, for the inputs that have one."""
    g = GraphIndex(model.graph_def)
    found: dict[str, InputScaling] = {}
    for spec in model.inputs:
        chain = _chain(g, spec.node)
        if not any(n.op not in ("Cast", "Identity") for n in chain):
            continue
        measured = _measure(model, spec, chain[-1].name)
        if measured is None:
            continue
        scale, offset = measured
        if np.allclose(scale, 1.0) and np.allclose(offset, 0.0):
            continue
        layers = list(dict.fromkeys(_layer(n.name) for n in chain if n.op not in ("Identity",)))
        found[spec.name] = InputScaling(spec.name, [n.name for n in chain], layers, scale,
                                        offset)
    return found


def _chain(g: GraphIndex, start: str) -> list[Any]:
    """The affine ops after ``start``, each the single consumer of the one before."""
    placeholders = {n.name for n in g if n.op == "Placeholder"}
    chain: list[Any] = []
    node = start
    while True:
        users = g.consumers(node)
        if len(users) != 1 or users[0].op not in AFFINE_OPS:
            return chain
        user = users[0]
        refs = g.data_inputs(user)
        mine = [k for k, r in enumerate(refs) if parse_input(r)[0] == node]
        if len(mine) != 1 or (user.op in _FIRST_ONLY and mine[0] != 0):
            return chain
        if user.op == "Cast" and user.attr["DstT"].type not in (1, 2):  # float, double
            return chain
        others = [r for k, r in enumerate(refs) if k != mine[0]]
        if any(_depends_on(g, r, placeholders) for r in others):
            return chain
        chain.append(user)
        node = user.name


def _depends_on(g: GraphIndex, ref: str, names: set[str]) -> bool:
    stack, seen = [parse_input(ref)[0]], set()
    while stack:
        n = stack.pop()
        if n in names:
            return True
        if n in seen or n not in g:
            continue
        seen.add(n)
        stack.extend(parse_input(r)[0] for r in g[n].input)
    return False


def _measure(model: Model, spec: Any, end: str) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, offset) of the map from input ``spec`` to tensor ``end:0``; None when
    the map is not affine with one scale and offset per channel."""
    from rewriter.verify.data import static

    outs = []
    for v in _PROBES:
        feeds = {s.name: np.zeros(static(s.shape), dtype=s.dtype) for s in model.inputs}
        feeds[spec.name] = np.full(static(spec.shape), v, dtype=spec.dtype)
        try:
            y = model.run(feeds, fetches=[f"{end}:0"])[f"{end}:0"]
        except Exception:  # noqa: BLE001 - a graph that does not run here is not claimed
            return None
        outs.append(np.asarray(y, dtype=np.float64))
    y0, y1, y255 = outs
    if y0.shape != tuple(static(spec.shape)) or not all(np.isfinite(o).all() for o in outs):
        return None
    scale, offset = y1 - y0, y0
    flat_s = scale.reshape(-1, scale.shape[-1]) if scale.ndim else scale.reshape(1, 1)
    flat_o = offset.reshape(-1, offset.shape[-1]) if offset.ndim else offset.reshape(1, 1)
    s, o = flat_s[0], flat_o[0]
    if not (np.allclose(flat_s, s, rtol=1e-5, atol=1e-9)
            and np.allclose(flat_o, o, rtol=1e-5, atol=1e-6)):
        return None
    predicted = 255.0 * scale + offset
    if not np.allclose(y255, predicted, rtol=1e-4, atol=1e-4 * (1 + np.abs(predicted).max())):
        return None
    if np.any(s == 0):
        return None
    return s, o


def _layer(node: str) -> str:
    """The layer a node belongs to: the name scope before the op's own name."""
    parts = node.split("/")
    return parts[-2] if len(parts) >= 2 else node
