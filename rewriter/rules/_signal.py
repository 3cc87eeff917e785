"""Signal front ends seen as linear maps: framing found by probing, DFT kernels, the conv form.

Shared by the spectrogram rules (``stft_as_conv``):

* :func:`find_framing` recognises *any* subgraph that cuts a signal into frames by moving data
  only (``tf.signal.frame``'s StridedSlice/Reshape/GatherV2/Reshape, a ``pad_end`` Pad, a hand
  written gather): it walks up from the frames tensor through data-movement ops to the signal
  ``x``, then evaluates the subgraph with numpy (:func:`rewriter.ir.static_eval.static_value`) on
  the probe ``x = 1, 2, ..., n``. The result holds, for every frame sample, which signal sample
  it is (0: a zero pad). A second probe with random values must give exactly those samples, so
  a subgraph that scales or mixes samples is never taken for framing. The frames must then be
  ``x[start + f * step + j]`` (zero past the end): a :class:`Framing`.
* :func:`dft_kernels` gives the real and imaginary DFT kernels of ``rfft(w * frame, N)`` with
  the window ``w`` folded in;
* :func:`build_frame_conv` computes every frame's product with a kernel bank as one CONV_2D: the
  signal is cut into blocks of ``step`` samples (``[1, blocks, 1, step]``, a reshape), and a
  kernel ``ceil(taps / step)`` blocks high with stride 1 reads frame ``f`` at blocks ``f ..
  f + kh - 1``. No GATHER, no strided window, no kernel taller than a few blocks (Vela limits
  kernel heights and strides), and it is exact: the same products summed in another order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef, parse_input
from rewriter.rules.base import Builder, static_value, tensor_shape

#: Ops that only move data (a frames tensor is built from the signal with these).
MOVE_OPS = frozenset({"Identity", "StridedSlice", "Slice", "Reshape", "GatherV2", "ExpandDims",
                      "Squeeze", "Pad", "PadV2", "Transpose", "ConcatV2"})
#: Most nodes a framing subgraph may hold (tf.signal.frame: about 40 with its index math).
MAX_FRAMING_NODES = 256


@dataclass(frozen=True)
class Framing:
    """``frames[f, j] = x[start + f * step + j]`` (0 past the end of ``x``), ``f < count``,
    ``j < length``; ``x`` holds ``n`` samples (one non-1 dimension); ``nodes`` is the data path
    from ``x`` (exclusive) to the frames tensor, bottom first."""

    x: str
    n: int
    start: int
    step: int
    count: int
    length: int
    nodes: tuple[NodeDef, ...]


def _path_to_signal(g: GraphIndex, frames: str) -> tuple[str, list[NodeDef]] | None:
    """Walk up from ``frames`` along data-movement ops (their data input 0; a ConcatV2 only
    when one input is not constant) to the first other tensor: (signal, path bottom first)."""
    path: list[NodeDef] = []
    ref = frames
    while len(path) < MAX_FRAMING_NODES:
        node = g.producer(ref)
        if node is None or node.op not in MOVE_OPS or parse_input(ref)[1] != 0:
            return ref, path
        ins = [r for r in node.input if not r.startswith("^")]
        if node.op == "ConcatV2":
            live = [r for r in ins[:-1] if static_value(g, r, limit=16) is None]
            if len(live) != 1:
                return ref, path
            nxt = live[0]
        else:
            nxt = ins[0]
        path.append(node)
        ref = nxt
    return None


def find_framing(g: GraphIndex, frames: str) -> Framing | str:
    """The framing that computes tensor ``frames`` (``[1..., count, length]``) from one signal,
    or the reason it is not one."""
    found = _path_to_signal(g, frames)
    if found is None or not found[1]:
        return f"{frames} is not computed from a signal by data-movement ops"
    x, path = found
    shape = tensor_shape(g, x)
    fshape = tensor_shape(g, frames)
    if shape is None or fshape is None or any(d is None for d in (*shape, *fshape)):
        return f"the signal {x} or the frames {frames} have no static shape"
    if len(fshape) < 2 or any(d != 1 for d in fshape[:-2]):
        return f"frames {frames} have shape {list(fshape)}, not [1..., frames, length]"
    if sum(1 for d in shape if d != 1) > 1:
        return f"the signal {x} has shape {list(shape)}: more than one channel"
    n = int(np.prod(shape))
    probe = np.arange(1, n + 1, dtype=np.float64).reshape(shape)
    got = static_value(g, frames, limit=4 * MAX_FRAMING_NODES, env={x: probe})
    if got is None:
        return f"the framing of {x} cannot be evaluated statically"
    index = np.asarray(got[0]).reshape(fshape[-2:]) - 1.0
    if not np.array_equal(index, np.round(index)) or index.min() < -1 or index.max() >= n:
        return f"{frames} is not a selection of the samples of {x}"
    index = index.astype(np.int64)
    noise = np.random.default_rng(0).normal(size=n)
    check = static_value(g, frames, limit=4 * MAX_FRAMING_NODES, env={x: noise.reshape(shape)})
    want = np.where(index >= 0, noise[np.maximum(index, 0)], 0.0)
    if check is None or not np.array_equal(np.asarray(check[0]).reshape(want.shape), want):
        return f"{frames} is not a plain selection of the samples of {x}"
    count, length = index.shape
    start = int(index[0, 0])
    step = int(index[1, 0] - index[0, 0]) if count > 1 else length
    expect = start + step * np.arange(count)[:, None] + np.arange(length)[None, :]
    expect = np.where(expect < n, expect, -1)
    if start < 0 or step < 1 or not np.array_equal(index, expect):
        return f"{frames} is not evenly spaced frames of {x}"
    return Framing(x, n, start, step, count, length, tuple(path))


def dft_kernels(window: np.ndarray, fft_length: int) -> tuple[np.ndarray, np.ndarray]:
    """``(real, imag)``, each ``[taps, bins]`` (float64): ``rfft(w * frame, N)[k] = sum_j
    frame[j] * (real[j, k] + i imag[j, k])``, ``taps = min(len(w), N)`` (TF crops a longer frame
    and zero-pads a shorter one), ``bins = N // 2 + 1``."""
    taps = min(len(window), fft_length)
    j = np.arange(taps)[:, None]
    k = np.arange(fft_length // 2 + 1)[None, :]
    angle = 2.0 * np.pi * ((j * k) % fft_length) / fft_length
    w = np.asarray(window, np.float64)[:taps, None]
    return w * np.cos(angle), -w * np.sin(angle)


def conv_geometry(f: Framing, taps: int) -> tuple[int, int, int]:
    """``(kernel height in blocks, blocks, samples read)`` of :func:`build_frame_conv`."""
    kh = max(1, math.ceil(taps / f.step))
    blocks = f.count - 1 + kh
    return kh, blocks, blocks * f.step


def build_frame_conv(b: Builder, f: Framing, kernels: list[np.ndarray]) -> list[str]:
    """Each ``[taps, channels]`` kernel applied to every frame of ``f``: one CONV_2D per kernel
    over the signal cut into blocks, outputs ``[1, count, 1, channels]``."""
    taps = kernels[0].shape[0]
    kh, blocks, need = conv_geometry(f, taps)
    sig = b.op("Reshape", [f.x, b.const("flat_shape", [1, f.n], np.int32)], "signal",
               attrs={"Tshape": np.int32})
    have = f.n - f.start
    if f.start or need < have:
        take = min(need, have)
        sig = b.op("Slice", [sig, b.const("begin", [0, f.start], np.int32),
                             b.const("size", [1, take], np.int32)], "used",
                   attrs={"Index": np.int32})
    if need > have:  # frames past the end read zeros (pad_end), and so do a kernel's zero taps
        sig = b.op("Pad", [sig, b.const("zeros", [[0, 0], [0, need - have]], np.int32)],
                   "pad_end", attrs={"Tpaddings": np.int32})
    blocks_t = b.op("Reshape", [sig, b.const("blocks_shape", [1, blocks, 1, f.step], np.int32)],
                    "blocks", attrs={"Tshape": np.int32})
    conv = {"strides": [1, 1, 1, 1], "padding": "VALID", "data_format": "NHWC",
            "dilations": [1, 1, 1, 1]}
    outs = []
    for i, kern in enumerate(kernels):
        full = np.zeros((kh * f.step, kern.shape[1]))
        full[:taps] = kern
        weights = full.reshape(kh, 1, f.step, kern.shape[1])
        outs.append(b.op("Conv2D", [blocks_t, b.const(f"kernel_{i}", weights)], f"conv_{i}",
                         attrs=conv))
    return outs


__all__ = ["MOVE_OPS", "Framing", "build_frame_conv", "conv_geometry", "dft_kernels",
           "find_framing"]
