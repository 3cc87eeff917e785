"""Rewrites before int8 quantisation that make the converter's int8 closer to the float model.

* :func:`equalize`, cross-layer equalisation (Nagel et al. 2019, "Data-Free Quantization
  Through Weight Equalization and Bias Correction"), **exact in float**: for two layers
  ``conv2(act(conv1(x) + b1))`` with ``act`` positively homogeneous (ReLU, or ReLU6 whose clip
  becomes a per-channel ``Minimum``; identity), scaling output channel ``c`` of ``conv1`` and
  ``b1`` by ``s_c > 0`` and input channel ``c`` of ``conv2`` by ``1 / s_c`` leaves the function
  unchanged (``relu(s x) = s relu(x)``, ``min(relu(s x), 6 s) = s relu6(x)``; a zero ``Pad`` in
  between commutes). TFLite quantises weights per output channel but activations per tensor, so
  the scales are chosen from the *activation* ranges ``r_c`` (max |act_c| on the calibration
  data): into a depthwise conv, whose per-channel weight steps do not see the scaling, every
  channel is raised towards the largest (``s_c = max r / r_c``); into a full conv, the range of
  the activation and the range of ``conv2``'s input-channel weights (each relative to its output
  channel's largest) are balanced (``s_c = sqrt(w_c / r_c)`` up to a common factor, as in the
  paper with activation ranges in place of ``conv1``'s weight ranges). Scales stay within
  ``[1 / MAX_SCALE, MAX_SCALE]``. Batch norms are folded into their convs first (exact).
* :func:`correct_bias`, empirical bias correction (same paper, section 4.2), **not exact in
  float by design**: each layer's int8 output is compared with its float output on the same int8
  inputs (:mod:`rewriter.verify.int8_layers`, calibration data), and the per-channel mean of the
  difference is subtracted before its activation, so the int8 file's systematic shift cancels;
  the float graph moves by exactly those means (returned per layer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, const_to_array, make_const, make_node
from rewriter.ir.model import Model

MAX_SCALE = 16.0
_CONVS = ("Conv2D", "DepthwiseConv2dNative")
_ACTS = ("Relu", "Relu6")
#: Ops a bias correction is added after (their output is the pre-activation of a layer).
_LINEAR = ("AddV2", "Add", "BiasAdd", "Conv2D", "DepthwiseConv2dNative", "MatMul")
_ACTIVATIONS = ("Relu", "Relu6", "Elu", "Sigmoid", "Tanh", "Selu", "LeakyRelu")
PROVENANCE = "_rewriter_rule"


@dataclass
class Pair:
    """``conv2(pad(act(conv1(x) + b1)))``: the nodes one equalisation scales."""

    conv1: NodeDef
    bias: NodeDef  # the BiasAdd after conv1
    act: NodeDef | None
    pad: NodeDef | None
    conv2: NodeDef

    @property
    def tensor(self) -> str:
        """The activation the scales equalise (what conv2 reads, before any pad)."""
        return (self.act or self.bias).name


@dataclass
class Equalized:
    """The equalised model and what was scaled."""

    model: Model
    pairs: list[dict[str, Any]] = field(default_factory=list)
    folded: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"pairs": len(self.pairs), "folded_batchnorms": self.folded,
                "details": self.pairs[:200]}


def equalize(model: Model, samples: Sequence[Mapping[str, np.ndarray]],
             max_scale: float = MAX_SCALE) -> Equalized:
    """Cross-layer equalisation of every conv pair it finds (see the module docstring)."""
    from rewriter.rewrite.passes import apply_rules

    folded = apply_rules(model, ["batchnorm_fold_into_conv"])
    current = folded.model
    g = GraphIndex(current.graph_def)
    pairs = find_pairs(g)
    if not pairs:
        return Equalized(current, [], len(folded.applied))
    ranges = _channel_ranges(current, [p.tensor for p in pairs], samples)
    done = []
    for pair in pairs:
        r = ranges[pair.tensor]
        scale = _scales(g, pair, r, max_scale)
        if scale is None:
            continue
        _apply(g, pair, scale)
        done.append({"conv1": pair.conv1.name, "conv2": pair.conv2.name,
                     "activation": pair.act.op if pair.act is not None else "linear",
                     "scale_min": float(scale.min()), "scale_max": float(scale.max()),
                     "range_spread_before": float(r.max() / max(np.median(r), 1e-12)),
                     "range_spread_after": float((r * scale).max()
                                                 / max(np.median(r * scale), 1e-12))})
    note = f"cross-layer equalisation of {len(done)} conv pair(s) (exact)"
    return Equalized(current.with_graph(g.to_graph_def(), note=note), done,
                     len(folded.applied))


def find_pairs(g: GraphIndex) -> list[Pair]:
    """Every ``conv -> BiasAdd -> [ReLU | ReLU6] -> [zero Pad] -> conv`` chain whose links each
    have one consumer and whose kernels and bias are constants."""
    pairs = []
    for conv1 in g.topological_order():
        if conv1.op not in _CONVS or _kernel(g, conv1) is None:
            continue
        bias = _only_consumer(g, conv1)
        if bias is None or bias.op != "BiasAdd" or g.const_value(bias.input[1]) is None:
            continue
        nxt = _only_consumer(g, bias)
        act = None
        if nxt is not None and nxt.op in _ACTS:
            act, nxt = nxt, _only_consumer(g, nxt)
        pad = None
        if nxt is not None and nxt.op == "Pad" and _zero_pad(g, nxt):
            pad, nxt = nxt, _only_consumer(g, nxt)
        if nxt is None or nxt.op not in _CONVS or _kernel(g, nxt) is None:
            continue
        if g.producer(nxt.input[0]) is not (pad or act or bias):
            continue
        pairs.append(Pair(conv1, bias, act, pad, nxt))
    return pairs


def _only_consumer(g: GraphIndex, node: NodeDef) -> NodeDef | None:
    users = g.consumers(node.name)
    return users[0] if len(users) == 1 else None


def _kernel(g: GraphIndex, conv: NodeDef) -> np.ndarray | None:
    return g.const_value(conv.input[1]) if len(conv.input) > 1 else None


def _zero_pad(g: GraphIndex, pad: NodeDef) -> bool:
    paddings = g.const_value(pad.input[1]) if len(pad.input) > 1 else None
    return paddings is not None and paddings.ndim == 2 and not paddings[-1].any()


def _channel_ranges(model: Model, tensors: Sequence[str],
                    samples: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """max |x| per channel (last axis) of each tensor over the samples."""
    fetch = [f"{t}:0" for t in tensors]
    out: dict[str, np.ndarray] = {}
    for s in samples:
        got = model.run(s, fetches=fetch)
        for t in tensors:
            x = np.abs(np.asarray(got[f"{t}:0"], np.float64))
            m = x.reshape(-1, x.shape[-1]).max(axis=0)
            out[t] = m if t not in out else np.maximum(out[t], m)
    return out


def _scales(g: GraphIndex, pair: Pair, r: np.ndarray, max_scale: float) -> np.ndarray | None:
    """The per-channel scale of the pair (None when nothing to gain)."""
    live = r > 1e-12 * max(float(r.max()), 1e-30)
    if live.sum() < 2:
        return None
    r = np.where(live, r, r[live].min())
    k2 = np.abs(_kernel(g, pair.conv2).astype(np.float64))
    if pair.conv2.op == "DepthwiseConv2dNative":
        s = r.max() / r  # per-channel weight steps do not see the scaling
        return np.clip(s, 1.0, max_scale)
    # input channel c's weights relative to their output channel's largest, at their best
    per_out = k2.max(axis=(0, 1, 2), keepdims=True)
    w = (k2 / np.maximum(per_out, 1e-30)).max(axis=(0, 1, 3))
    w = np.maximum(w, 1e-6)
    s = np.sqrt(w / r)
    s = s / np.exp(np.mean(np.log(s)))  # a common factor changes no relative precision
    return np.clip(s, 1.0 / max_scale, max_scale)


def _set_const(g: GraphIndex, ref: str, value: np.ndarray) -> None:
    node = g.skip_identity(ref)
    assert node is not None and node.op == "Const"
    fresh = make_const(node.name, value.astype(const_to_array(node).dtype))
    node.attr["value"].CopyFrom(fresh.attr["value"])


def _apply(g: GraphIndex, pair: Pair, s: np.ndarray) -> None:
    s32 = s.astype(np.float64)
    k1 = _kernel(g, pair.conv1).astype(np.float64)
    if pair.conv1.op == "DepthwiseConv2dNative":
        k1 = k1 * s32.reshape(k1.shape[2], k1.shape[3])
    else:
        k1 = k1 * s32
    _set_const(g, pair.conv1.input[1], k1)
    _set_const(g, pair.bias.input[1], g.const_value(pair.bias.input[1]) * s32)
    k2 = _kernel(g, pair.conv2).astype(np.float64)
    k2 = k2 / s32.reshape(1, 1, -1, 1)
    _set_const(g, pair.conv2.input[1], k2)
    if pair.act is not None and pair.act.op == "Relu6":
        # relu6(x) = min(relu(x), 6): scaled, the clip is 6 * s_c per channel
        act = pair.act
        act.op = "Relu"
        clip = g.add(make_const(g.unique_name(f"{act.name}/equalized_clip"),
                                (6.0 * s32).astype(np.float32)))
        low = g.add(make_node("Minimum", g.unique_name(f"{act.name}/equalized"),
                              [act.name, clip.name]))
        low.attr[PROVENANCE].s = b"cross_layer_equalization"
        for user in g.consumers(act.name):
            if user.name != low.name:
                g.set_inputs(user, [low.name if r in (act.name, f"{act.name}:0") else r
                                    for r in user.input])


# ----------------------------------------------------------------------------- bias correction
@dataclass
class BiasCorrected:
    model: Model
    layers: list[dict[str, Any]] = field(default_factory=list)
    iterations: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "layers": len(self.layers),
                "max_shift": max((x["max_shift"] for x in self.layers), default=0.0)}


def correct_bias(model: Model, samples: Sequence[Mapping[str, np.ndarray]],
                 export: Callable[[Model], str], iterations: int = 2) -> BiasCorrected:
    """Empirical bias correction (see the module docstring): ``export(model)`` writes the int8
    file of a model and returns its path; each iteration measures the file and corrects."""
    from rewriter.verify.int8_layers import int8_layer_errors

    current, corrected = model, []
    for _ in range(iterations):
        layers = int8_layer_errors(export(current), current, samples)
        g = GraphIndex(current.graph_def)
        for layer in layers.layers:
            shift = layer.mean_error
            if shift is None or shift.size < 2 or layer.node not in g:
                continue
            target = g[layer.node]
            if target.op in _ACTIVATIONS:
                target = g.producer(target.input[0])
            if target is None or target.op not in _LINEAR:
                continue
            value = g.add(make_const(g.unique_name(f"{target.name}/bias_correction/value"),
                                     (-shift).astype(np.float32)))
            add = g.add(make_node("AddV2", g.unique_name(f"{target.name}/bias_correction"),
                                  [target.name, value.name]))
            add.attr[PROVENANCE].s = b"bias_correction"
            for user in g.consumers(target.name):
                if user.name != add.name:
                    g.set_inputs(user, [add.name if r in (target.name, f"{target.name}:0")
                                        else r for r in user.input])
            corrected.append({"layer": layer.layer, "node": target.name,
                              "max_shift": float(np.abs(shift).max())})
        current = current.with_graph(g.to_graph_def(), note="empirical bias correction")
    return BiasCorrected(current, corrected, iterations)
