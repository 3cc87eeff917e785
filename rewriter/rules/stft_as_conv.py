"""A short-time Fourier transform's magnitude or power as convolutions: exact.

``|rfft(w * frames(x), N)|^2`` (``tf.signal.stft`` followed by ``tf.abs`` and a square, or
``pow(., 2)``) is, per frame ``f`` and bin ``k``, ``re_fk^2 + im_fk^2`` with
``re_fk = sum_j x[s + f*step + j] w_j cos(2 pi j k / N)`` and ``im_fk = -sum_j ... sin(...)``:
two banks of linear filters applied to every frame. No int8 accelerator here has an FFT
(RFFT2D, COMPLEX_ABS are CPU ops) and the framing GATHER cuts the Edge TPU graph; as built
here the front end is CONV_2D, MUL, ADD (and RESHAPE, SLICE, PAD), which all of them run:

* the framing (any data-movement subgraph, recognised by probing: :mod:`rewriter.rules._signal`)
  becomes a reshape of the signal into blocks of ``step`` samples, read by a convolution whose
  kernel spans ``ceil(taps / step)`` blocks, stride 1;
* the window is folded into the DFT kernels (``w_j cos``, ``-w_j sin``), one CONV_2D each for the
  real and the imaginary parts;
* ``|X|^2 = re * re + im * im`` (MUL, MUL, ADD); the magnitude ``|X|`` (ComplexAbs alone) is
  ``sqrt`` of it, a SQRT the target's own SQRT rules then place.

Exact: the same products, summed in another order (tests hold it to 1e-5 relative to the
spectrum's largest value). The DFT is computed directly (O(N) per bin instead of the FFT's
O(log N)), which for the frame sizes of audio front ends (N <= 2048) is a convolution of
modest size on an accelerator. int8 then holds what a per-tensor scale can: a power spectrum
spans many decades, see the README's "Model families" for the measured cost.
"""

from __future__ import annotations

import numpy as np

from rewriter.ir.graph import GraphIndex, NodeDef
from rewriter.rules._activation import scalar_const
from rewriter.rules._signal import build_frame_conv, dft_kernels, find_framing
from rewriter.rules.base import Builder, Match, Reject, Rule, commuted, static_value, tensor_shape

#: Largest DFT handled (conv weights grow as N^2 / 2 per kernel).
MAX_FFT = 4096


class StftAsConv(Rule):
    """|rfft(w * frames(x))|^2 = conv(x, w cos)^2 + conv(x, -w sin)^2 (|.|: its sqrt), exact."""

    name = "stft_as_conv"
    anchors = frozenset({"ComplexAbs", "Square", "Pow"})
    fixes = frozenset({"RFFT", "ComplexAbs", "GatherV2"})
    emits = frozenset({"Reshape", "Slice", "Pad", "Conv2D", "Mul", "AddV2"})
    exact = True
    order = 50  # before square_as_mul takes the square of |X| apart

    def pattern(self, g: GraphIndex, node: NodeDef) -> Match | None:
        nodes = [node]
        cabs = node
        if node.op in ("Square", "Pow"):
            if not _is_square(g, node):
                return None
            cabs = g.producer(node.input[0])
            if cabs is None or cabs.op != "ComplexAbs":
                return None
            nodes.append(cabs)
        elif any(_is_square(g, c) for c in g.consumers(node.name)):
            return None  # the power is matched from the square, without a sqrt
        rfft = g.producer(cabs.input[0])
        if rfft is None or rfft.op != "RFFT":
            return None
        nodes.append(rfft)
        return Match(root=node, nodes=nodes, inputs={"signal": rfft.input[0]},
                     extra={"power": node is not cabs, "rfft": rfft, "cabs": cabs})

    def check(self, g: GraphIndex, m: Match) -> Reject | None:
        rfft = m.extra["rfft"]
        fft = static_value(g, rfft.input[1])
        if fft is None or fft[0].size != 1:
            return Reject("fft_length is not a constant", rfft.name)
        n_fft = int(fft[0].ravel()[0])
        if not 2 <= n_fft <= MAX_FFT:
            return Reject(f"fft_length {n_fft} is outside [2, {MAX_FFT}]", rfft.name)
        padded, pad_nodes = _skip_end_pad(g, m.inputs["signal"])
        frames, window, win_nodes = _split_window(g, padded)
        win_nodes = [*pad_nodes, *win_nodes]
        framing = find_framing(g, frames)
        if isinstance(framing, str):
            return Reject(framing, rfft.name)
        if window is None:
            window = np.ones(framing.length)
        elif window.size != framing.length:
            return Reject(f"the window has {window.size} values for frames of "
                          f"{framing.length} (it must vary along the frame only)", rfft.name)
        out_shape = tensor_shape(g, m.root.name)
        if out_shape is None or any(d is None for d in out_shape):
            return Reject(f"{m.root.name} has no static shape", m.root.name)
        m.nodes.extend(_exclusive(g, m, (*win_nodes, *framing.nodes)))
        m.extra.update(framing=framing, window=window.ravel(), n_fft=n_fft,
                       shape=[int(d) for d in out_shape])
        return None

    def rewrite(self, g: GraphIndex, m: Match, b: Builder) -> str:
        real, imag = dft_kernels(m.extra["window"], m.extra["n_fft"])
        re, im = build_frame_conv(b, m.extra["framing"], [real, imag])
        power = b.op("AddV2", [b.op("Mul", [re, re], "re_squared"),
                               b.op("Mul", [im, im], "im_squared")], "power")
        if not m.extra["power"]:
            power = b.op("Sqrt", [power], "magnitude")
        return b.op("Reshape", [power, b.const("shape", m.extra["shape"], np.int32)], "out",
                    attrs={"Tshape": np.int32})


def _is_square(g: GraphIndex, node: NodeDef) -> bool:
    return node.op == "Square" or (node.op == "Pow" and scalar_const(g, node.input[1]) == 2.0)


def _split_window(g: GraphIndex, ref: str) -> tuple[str, np.ndarray | None, list[NodeDef]]:
    """``ref`` as ``frames * window`` (window a constant): (frames, window, [the Mul]); else
    (ref, None, [])."""
    node = g.producer(ref)
    if node is not None and node.op == "Mul":
        for a, c in commuted(node):
            val = static_value(g, c, limit=64)
            if val is not None and static_value(g, a, limit=16) is None:
                return a, np.asarray(val[0], np.float64), [node]
    return ref, None, []


def _skip_end_pad(g: GraphIndex, ref: str) -> tuple[str, list[NodeDef]]:
    """``ref`` as zeros appended to the last axis of a tensor (``tf.signal.rfft`` pads a frame
    shorter than ``fft_length``): (that tensor, [the Pad]); else (ref, []). The zeros add
    nothing to the DFT, whose kernels hold ``taps = frame length`` rows."""
    node = g.producer(ref)
    if node is None or node.op not in ("Pad", "PadV2"):
        return ref, []
    pads = static_value(g, node.input[1], limit=16)
    if pads is None:
        return ref, []
    pads = np.asarray(pads[0]).reshape(-1, 2)
    if pads[:-1].any() or pads[-1, 0] != 0:
        return ref, []
    if node.op == "PadV2":
        fill = static_value(g, node.input[2], limit=16)
        if fill is None or float(np.asarray(fill[0]).ravel()[0]) != 0.0:
            return ref, []
    return node.input[0], [node]


def _exclusive(g: GraphIndex, m: Match, path: tuple[NodeDef, ...]) -> list[NodeDef]:
    """The framing nodes the match may replace: bottom-up, while every reader is replaced too
    (a node also read elsewhere stays, with what it reads)."""
    inside = {n.name for n in m.nodes}
    taken = []
    for node in path:  # (the window's Mul first, then the framing bottom-up)
        if any(c.name not in inside for c in g.consumers(node.name)):
            break
        inside.add(node.name)
        taken.append(node)
    return taken


RULES = (StftAsConv(),)
