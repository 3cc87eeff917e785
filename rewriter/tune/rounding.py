"""Weight rounding that minimises each layer's output error (GPTQ), written into a quantised
``.tflite`` in place.

Ethos-U (Vela) and TensorFlow Lite Micro run int8 weights only, per output channel, symmetric:
a 16x8 file's int16 activations leave the weights' rounding as its floor (MobileNetV2 64x64:
the float file with only its weights rounded to nearest reaches cosine 0.9889,
``benchmarks/results/precision_bounds.md``). Round-to-nearest minimises each weight's own error;
what matters is the layer's output error on real inputs. For a layer with float weights ``W``
(output channel ``c``, scale ``s_c`` kept) and inputs ``X`` (the float file's activations at the
layer's input on calibration samples, one row per output position, ``im2col`` for a
convolution), the int8 values ``Q`` are chosen to make ``sum_c (W_c - s_c Q_c) H (W_c -
s_c Q_c)^T`` small, ``H = X^T X``: GPTQ (Frantar et al. 2022, "OPTQ"): the input columns are
rounded in order (largest ``H`` diagonal first, GPTQ's "act order") and each column's rounding
error is spread over the columns not yet rounded through the Cholesky factor of ``H^-1`` (``H``
damped by :data:`DAMP` of its mean diagonal), the values clamped to [-127, 127]; then
coordinate descent (:func:`descend`) moves single values a step where that lowers the error. A depthwise convolution's channel has its own ``H`` (its
kh*kw window of one input channel). ``bias=True`` also moves each output channel's integer bias
by the mean output shift the rounding left on the calibration inputs, ``(W_c - s_c Q_c)
mean(X)``, in the bias's own scale.

Engine-agnostic: the file comes from the TFLite converter or the AI Edge Quantizer, int8 or
16x8. Each CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED whose weights are int8 is matched to
the float file's op (by output tensor name, or by position when both files have the same
sequence of such ops: the converter's quantised names differ), and used only when its int8
values are the float weights rounded to nearest at its own scales (so the match is the right
layer). Only the weight (and with ``bias``, bias) bytes change; scales, zero points, every
other byte of the file stay as they were.

Bound: on the calibration inputs, the layer's output error after rounding is what
:class:`LayerRounding` reports (``before`` and ``after``, relative to the output's energy);
GPTQ does not guarantee ``after <= before`` (a layer where it is not is kept at round-to-
nearest), nor anything on other inputs: the plan search keeps a rounded file only when it is
better on held-back data (:func:`rewriter.tune.plan_search.search`'s ``refine``).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.tune.flatbuffer_index import op_name

#: Damping added to ``H``'s diagonal, as a share of its mean (GPTQ's default).
DAMP = 0.01
#: Columns per lazy-update block of GPTQ.
BLOCK = 128
_LAYER_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED")


@dataclass
class LayerRounding:
    """One layer rounded: its output error on the calibration inputs, relative to the float
    output's energy (``||(W - sQ) X|| / ||W X||``), at round-to-nearest and after."""

    op: str
    name: str
    weights: int
    changed: int          # weights whose int8 value differs from round-to-nearest
    before: float
    after: float
    kept: bool            # False: after >= before, the layer keeps round-to-nearest

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "name": self.name, "weights": self.weights,
                "changed": self.changed, "before": self.before, "after": self.after,
                "kept": self.kept}


@dataclass
class _Layer:
    op: str
    name: str
    q_op: Any            # the quantised file's OperatorT
    f_op: Any            # the float file's OperatorT
    w_float: np.ndarray  # float weights, the quantised tensor's shape
    q: np.ndarray        # int8 values as the file has them
    scale: np.ndarray    # per output channel (broadcast from one when per-tensor)
    axis: int            # the channel axis of the weight tensor


def _model(data: bytes) -> Any:
    from tensorflow.lite.tools import flatbuffer_utils

    return flatbuffer_utils.convert_bytearray_to_object(bytearray(data))


def _op_names(model: Any) -> list[str]:
    return [op_name(model, op) for op in model.subgraphs[0].operators]


def _name(sub: Any, i: int) -> str:
    n = sub.tensors[i].name
    return n.decode() if isinstance(n, bytes) else str(n)


def _const(model: Any, data: bytes, t: Any, dtype: Any) -> np.ndarray | None:
    buf = model.buffers[t.buffer] if t.buffer < len(model.buffers) else None
    if buf is None:
        return None
    if buf.data is not None and len(buf.data):
        raw = np.asarray(buf.data, np.uint8).tobytes()
    elif getattr(buf, "offset", 0) > 1:
        raw = data[buf.offset:buf.offset + buf.size]
    else:
        return None
    return np.frombuffer(raw, dtype).reshape(tuple(t.shape)).copy()


def _layers(quant: bytes, fm: Any, flt: bytes) -> list[_Layer]:
    """The quantised file's int8-weight layers, each with its float twin (module docstring);
    ``fm``: the float file ``flt`` parsed."""
    from tensorflow.lite.python import schema_py_generated as fb

    qm = _model(quant)
    qs, fs = qm.subgraphs[0], fm.subgraphs[0]
    qnames, fnames = _op_names(qm), _op_names(fm)
    q_ops = [(k, op) for k, op in enumerate(qs.operators) if qnames[k] in _LAYER_OPS]
    f_ops = [(k, op) for k, op in enumerate(fs.operators) if fnames[k] in _LAYER_OPS]
    f_by_out = {_name(fs, op.outputs[0]): op for _, op in f_ops}
    same_order = [qnames[k] for k, _ in q_ops] == [fnames[k] for k, _ in f_ops]
    out = []
    for pos, (k, op) in enumerate(q_ops):
        twin = f_by_out.get(_name(qs, op.outputs[0]))
        if twin is None and same_order:
            twin = f_ops[pos][1]
        if twin is None or len(op.inputs) < 2 or len(twin.inputs) < 2:
            continue
        wt, ft = qs.tensors[op.inputs[1]], fs.tensors[twin.inputs[1]]
        if wt.type != fb.TensorType.INT8 or ft.type != fb.TensorType.FLOAT32 or \
                list(wt.shape) != list(ft.shape) or wt.quantization is None:
            continue
        q = _const(qm, quant, wt, np.int8)
        w = _const(fm, flt, ft, np.float32)
        if q is None or w is None:
            continue
        axis = int(wt.quantization.quantizedDimension or 0)
        scale = np.asarray(wt.quantization.scale, np.float64)
        n = w.shape[axis]
        if scale.size == 1:
            scale = np.full(n, float(scale[0]))
        if scale.size != n or np.any(scale <= 0) or \
                axis != (3 if qnames[k] == "DEPTHWISE_CONV_2D" else 0):
            continue
        shape = [1] * w.ndim
        shape[axis] = n
        ratio = w / scale.reshape(shape)
        if np.max(np.abs(ratio - q)) > 0.5 + 1e-3 or np.max(np.abs(ratio)) > 128:
            continue  # not these float weights rounded at these scales: another layer
        out.append(_Layer(qnames[k], _name(qs, op.outputs[0]), op, twin,
                          w.astype(np.float64), q, scale, axis))
    return out


def _geometry(layer: _Layer, sub: Any) -> dict[str, Any]:
    o = layer.f_op.builtinOptions
    return {"stride": (int(getattr(o, "strideH", 1) or 1), int(getattr(o, "strideW", 1) or 1)),
            "dilation": (int(getattr(o, "dilationHFactor", 1) or 1),
                         int(getattr(o, "dilationWFactor", 1) or 1)),
            "same": int(getattr(o, "padding", 1)) == 0,
            "out": tuple(sub.tensors[layer.f_op.outputs[0]].shape)}


def patches(x: np.ndarray, kh: int, kw: int, stride: tuple[int, int],
            dilation: tuple[int, int], same: bool, out_hw: tuple[int, int]) -> np.ndarray:
    """``x`` (H, W, C) as the convolution's windows: (out positions, kh*kw, C), zero padded as
    TFLite pads (SAME: ``pad_before = total // 2``)."""
    h, w, _ = x.shape
    oh, ow = out_hw
    sh, sw = stride
    dh, dw = dilation
    if same:
        ph = max((oh - 1) * sh + (kh - 1) * dh + 1 - h, 0)
        pw = max((ow - 1) * sw + (kw - 1) * dw + 1 - w, 0)
        x = np.pad(x, ((ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)))
    cols = [x[i * dh:i * dh + (oh - 1) * sh + 1:sh, j * dw:j * dw + (ow - 1) * sw + 1:sw]
            for i in range(kh) for j in range(kw)]
    return np.stack(cols, axis=2).reshape(oh * ow, kh * kw, x.shape[2])


def gptq(w: np.ndarray, h: np.ndarray, damp: float = DAMP, order: bool = True) -> np.ndarray:
    """GPTQ's integers for weights ``w`` (rows: output channels, already divided by their
    scales; columns: inputs) against the inputs' second moment ``h``; values in [-127, 127].
    ``h`` (d, d) is shared by every row, or (rows, d, d) one per row (depthwise). ``order``:
    the columns with the largest ``H`` diagonal first (GPTQ's "act order")."""
    w = np.array(w, np.float64)
    rows, d = w.shape
    hb = np.array(h, np.float64)
    shared = hb.ndim == 2
    hb = hb[None] if shared else hb
    n = len(hb)
    diag = np.einsum("nii->ni", hb)
    perm = np.argsort(-diag, axis=1, kind="stable") if order else \
        np.broadcast_to(np.arange(d), (n, d))
    batch = np.arange(n)[:, None, None]
    hb = hb[batch, perm[:, :, None], perm[:, None, :]]
    w = np.take_along_axis(w, perm, axis=1) if not shared else w[:, perm[0]]
    diag = np.take_along_axis(diag, perm, axis=1)
    dead = diag <= 0
    mean = np.where(dead, 0, diag).sum(1) / np.maximum((~dead).sum(1), 1)
    eye = np.eye(d)
    hb = hb + eye * (damp * np.maximum(mean, 1e-30))[:, None, None] + eye * dead[:, None, :]
    # the upper Cholesky factor of H^-1 (GPTQ's Hinv): inv(H) = U^T U
    u = np.linalg.cholesky(np.linalg.inv(hb)).transpose(0, 2, 1)
    q = np.zeros_like(w)
    if shared:
        u0 = u[0]
        for i1 in range(0, d, BLOCK):
            i2 = min(i1 + BLOCK, d)
            err = np.zeros((rows, i2 - i1))
            for i in range(i1, i2):
                q[:, i] = np.clip(np.rint(w[:, i]), -127, 127)
                e = (w[:, i] - q[:, i]) / u0[i, i]
                w[:, i:i2] -= np.outer(e, u0[i, i:i2])
                err[:, i - i1] = e
            w[:, i2:] -= err @ u0[i1:i2, i2:]
        out = np.empty_like(q)
        out[:, perm[0]] = q
        return out
    for i in range(d):
        q[:, i] = np.clip(np.rint(w[:, i]), -127, 127)
        e = (w[:, i] - q[:, i]) / u[:, i, i]
        w[:, i:] -= e[:, None] * u[:, i, i:]
    out = np.empty_like(q)
    np.put_along_axis(out, perm, q, axis=1)
    return out


def descend(w: np.ndarray, q: np.ndarray, h: np.ndarray, sweeps: int = 2) -> np.ndarray:
    """``q`` improved by coordinate descent on each row's ``(q - w) H (q - w)^T``: each
    integer moved one step up or down when that lowers it (within [-127, 127]); never raises
    it. ``h`` shared (d, d) or one per row."""
    q = np.array(q, np.float64)
    hb = h if h.ndim == 3 else None
    g = (q - w) @ h if hb is None else np.matmul((q - w)[:, None, :], hb)[:, 0, :]
    for _ in range(sweeps):
        moved = 0
        for j in range(q.shape[1]):
            hjj = h[j, j] if hb is None else hb[:, j, j]
            step = -np.sign(g[:, j])
            step[(2 * np.abs(g[:, j]) <= hjj) | (np.abs(q[:, j] + step) > 127)] = 0
            if not step.any():
                continue
            rows = np.flatnonzero(step)
            moved += len(rows)
            q[rows, j] += step[rows]
            g[rows] += step[rows, None] * (h[j] if hb is None else hb[rows, j, :])
        if not moved:
            break
    return q


def _err(delta: np.ndarray, ref: np.ndarray, h: np.ndarray) -> float:
    """sqrt(sum over rows of delta H delta^T / ref H ref^T) (``h`` shared or one per row)."""
    def quad(v: np.ndarray) -> float:
        hv = v @ h if h.ndim == 2 else np.matmul(v[:, None, :], h)[:, 0, :]
        return float(np.sum(hv * v))

    num, den = quad(delta), quad(ref)
    return float(np.sqrt(max(num, 0.0) / den)) if den > 0 else 0.0


def _statistics(layer: _Layer, sub: Any, xs: Sequence[np.ndarray]) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """(H, mean input row) of the layer over its float inputs ``xs`` (one array per sample)."""
    g = _geometry(layer, sub)
    if layer.op == "FULLY_CONNECTED":
        d = layer.w_float.shape[1]
        rows = [x.reshape(-1, d) for x in xs]
        h = sum(r.T @ r for r in rows)
        count = sum(len(r) for r in rows)
        return h, sum(r.sum(0) for r in rows) / count
    _, kh, kw, _ = layer.w_float.shape
    h = None
    total = None
    count = 0
    for x in xs:
        x = x.reshape(x.shape[-3:]) if x.ndim == 4 and x.shape[0] == 1 else x
        for img in (x if x.ndim == 4 else x[None]):
            p = patches(img, kh, kw, g["stride"], g["dilation"], g["same"],
                        (int(g["out"][1]), int(g["out"][2])))
            if layer.op == "CONV_2D":
                rows = p.reshape(len(p), -1)
                hh = rows.T @ rows
                s = rows.sum(0)
            else:  # depthwise: per input channel, (C, kh*kw, kh*kw)
                pc = p.transpose(2, 1, 0)
                hh = np.matmul(pc, pc.transpose(0, 2, 1))
                s = p.sum(0).T  # (C, kh*kw)
            h = hh if h is None else h + hh
            total = s if total is None else total + s
            count += len(p)
    return h, total / max(count, 1)


def _solve(layer: _Layer, h: np.ndarray, damp: float) -> tuple[np.ndarray, np.ndarray,
                                                              np.ndarray, np.ndarray]:
    """(float rows, integer rows at round-to-nearest, GPTQ's, per-row H): each in the
    (output channel, inputs) layout."""
    w, s = layer.w_float, layer.scale
    if layer.op == "DEPTHWISE_CONV_2D":
        _, kh, kw, cout = w.shape
        rows = w.reshape(kh * kw, cout).T / s[:, None]
        cin = h.shape[0]
        hr = h[np.arange(cout) // (cout // cin)]
        h = hr
    else:
        rows = w.reshape(w.shape[0], -1) / s[:, None]
    return rows, np.clip(np.rint(rows), -127, 127), descend(rows, gptq(rows, h, damp), h), h


class Rounder:
    """GPTQ for every quantised file of one float file (module docstring): the float file's
    activations are read once (one LiteRT pass over ``calibration``, samples keyed by its
    signature input names), and each layer's solution is kept by its float op and weight
    scales, so rounding many plans of one model solves each layer once. ``last``: what the
    latest call did, per layer."""

    def __init__(self, float_tflite: bytes, calibration: Sequence[Mapping[str, np.ndarray]],
                 bias: bool = True, damp: float = DAMP) -> None:
        self.float_tflite = float_tflite
        self.calibration = list(calibration)
        self.bias, self.damp = bias, damp
        self._fm = _model(float_tflite)
        self._acts: dict[str, list[np.ndarray]] | None = None
        self._solved: dict[tuple[int, bytes], tuple[np.ndarray, np.ndarray,
                                                     LayerRounding]] = {}
        self.last: list[LayerRounding] = []

    def _activations(self) -> dict[str, list[np.ndarray]]:
        """Float input tensor name -> its value per calibration sample, for every layer op."""
        if self._acts is not None:
            return self._acts
        from rewriter.verify.int8_layers import _Tensors

        sub = self._fm.subgraphs[0]
        names = _op_names(self._fm)
        inputs = {_name(sub, op.inputs[0]) for k, op in enumerate(sub.operators)
                  if names[k] in _LAYER_OPS}
        with tempfile.TemporaryDirectory(prefix="rewriter-round-") as tmp:
            path = Path(tmp) / "float.tflite"
            path.write_bytes(self.float_tflite)
            tensors = _Tensors(path)
            index = {d["name"]: i for i, d in tensors.details.items() if d["name"] in inputs}
            self._acts = {n: [] for n in index}
            for feeds in self.calibration:
                got = tensors.run(feeds, list(index.values()))
                for n, i in index.items():
                    self._acts[n].append(got[i].astype(np.float32))
        return self._acts

    def _solve(self, lay: _Layer) -> tuple[np.ndarray, np.ndarray, LayerRounding] | None:
        """(integer rows, bias shift per output channel in real units, report), cached."""
        key = (int(lay.f_op.outputs[0]), lay.scale.tobytes())
        if key not in self._solved:
            sub = self._fm.subgraphs[0]
            xs = self._activations().get(_name(sub, lay.f_op.inputs[0]))
            if xs is None:
                return None
            h, mean = _statistics(lay, sub, [x.astype(np.float64) for x in xs])
            rows, nearest, rounded, hr = _solve(lay, h, self.damp)
            before = _err(rows - nearest, rows, hr)
            after = _err(rows - rounded, rows, hr)
            kept = after < before
            if not kept:
                rounded = nearest
            delta = (rows - rounded) * lay.scale[:, None]   # real units, (channels, inputs)
            if lay.op == "DEPTHWISE_CONV_2D":
                cout = rows.shape[0]
                shift = np.einsum("ck,ck->c", delta,
                                  mean[np.arange(cout) // (cout // mean.shape[0])])
            else:
                shift = delta @ mean
            self._solved[key] = (rounded, shift, LayerRounding(
                lay.op, lay.name, int(rows.size), int(np.sum(rounded != nearest)), before,
                after if kept else before, kept))
        return self._solved[key]

    def __call__(self, quant: bytes) -> bytes:
        """``quant`` with every matched layer's weights rounded (and with ``bias``, its bias
        moved); ``quant`` itself when no layer matched."""
        out = bytearray(quant)
        self.last = []
        for lay in _layers(quant, self._fm, self.float_tflite):
            got = self._solve(lay)
            if got is None:
                continue
            rounded, shift, report = got
            self.last.append(report)
            if not report.kept:
                continue
            _write(out, lay, rounded)
            if self.bias:
                _correct_bias(out, lay, shift)
        return bytes(out) if self.last else quant


#: The int16 headroom factors :func:`moves` tries (:func:`rewriter.tune.headroom.widen_int16`).
FACTORS = (2.0, 4.0, 8.0)


def headroom(factor: float) -> str:
    """The name :func:`moves` gives the int16 ranges widened ``factor`` times."""
    return f"int16 ranges {factor:g}x wider"


#: The names :func:`moves` gives its alternatives (the report says which was kept).
HEADROOM = headroom(FACTORS[0])
GPTQ = "weights rounded by GPTQ on the calibration data"


def moves(rounder: Rounder, factors: Sequence[float] = FACTORS
          ) -> Callable[[bytes], dict[str, bytes]]:
    """The plan search's ``refine``: for a quantised file, its alternatives by name: the int16
    activation ranges ``factor`` times wider for each of ``factors``
    (:func:`rewriter.tune.headroom.widen_int16`; none without an int16 activation), and each of
    those with its weights rounded by ``rounder`` (the weights are rounded once, then widened:
    rounding reads no activation scale, so that is widening then rounding but for the bias's
    own rounding, half a step of it). Measured on the
    held-back data, each wins somewhere: ResNet50's 16x8 file 0.7229 -> 0.9630 2x wider ->
    0.9911 rounded too; a MobileNetV3Large plan with int8 HARD_SWISH 0.3194 -> 0.5921 2x wider,
    0.4572 rounded too; MobileNetV3Large all in 16x8 (hard swish unfused, the AI Edge
    Quantizer's file) 0.3590 -> 0.7681 2x, 0.9973 4x, 0.9968 8x wider (one held-back image,
    its softmax peaked at 0.69, goes up to 3.4x past the calibrated ranges of the last blocks;
    int16 has bits to spare: 4x costs two of 15)."""
    from rewriter.tune.headroom import widen_int16

    def refine(data: bytes) -> dict[str, bytes]:
        if widen_int16(data, factors[0]) == data:
            return {GPTQ: rounder(data)}
        rounded = rounder(data)
        out = {headroom(f): widen_int16(data, f) for f in factors}
        out.update({f"{headroom(f)}, {GPTQ}": widen_int16(rounded, f) for f in factors})
        return out

    return refine


def round_weights(quant: bytes, float_tflite: bytes,
                  calibration: Sequence[Mapping[str, np.ndarray]], bias: bool = True,
                  damp: float = DAMP) -> tuple[bytes, list[LayerRounding]]:
    """``quant`` with each matched layer's int8 weights chosen by GPTQ on the float file's
    activations over ``calibration``, and per layer what it did (:class:`Rounder`)."""
    rounder = Rounder(float_tflite, calibration, bias, damp)
    return rounder(quant), rounder.last


def _buffer_view(data: bytearray, tensor_index: int, dtype: Any) -> np.ndarray | None:
    """A writable view of a constant tensor's bytes inside ``data`` (in ``Buffer.data`` or
    stored by offset after the flatbuffer)."""
    from tensorflow.lite.python import schema_py_generated as fb

    model = fb.Model.GetRootAs(data, 0)
    t = model.Subgraphs(0).Tensors(tensor_index)
    buf = model.Buffers(t.Buffer())
    if buf.Offset() > 1:
        return np.frombuffer(data, dtype, buf.Size() // np.dtype(dtype).itemsize, buf.Offset())
    if buf.DataLength():
        off = buf._tab.Vector(buf._tab.Offset(4))  # Buffer.data's first byte
        return np.frombuffer(data, dtype, buf.DataLength() // np.dtype(dtype).itemsize, off)
    return None


def _write(data: bytearray, lay: _Layer, rows: np.ndarray) -> None:
    view = _buffer_view(data, lay.q_op.inputs[1], np.int8)
    if view is None or view.size != rows.size:
        raise ValueError(f"{lay.name}: weight buffer not found")
    if lay.op == "DEPTHWISE_CONV_2D":
        values = rows.T.reshape(lay.w_float.shape)
    else:
        values = rows.reshape(lay.w_float.shape)
    view[:] = values.astype(np.int8).ravel()


def _correct_bias(data: bytearray, lay: _Layer, shift: np.ndarray) -> None:
    """Move the integer bias by ``shift`` (the mean output shift ``(W - sQ) mean(X)`` per
    output channel, real units) in the bias's own scale."""
    from tensorflow.lite.python import schema_py_generated as fb

    if len(lay.q_op.inputs) < 3 or lay.q_op.inputs[2] < 0:
        return
    model = fb.Model.GetRootAs(data, 0)
    t = model.Subgraphs(0).Tensors(lay.q_op.inputs[2])
    dtype = {fb.TensorType.INT32: np.int32, fb.TensorType.INT64: np.int64}.get(t.Type())
    q = t.Quantization()
    if dtype is None or q is None or q.ScaleLength() == 0:
        return
    bscale = q.ScaleAsNumpy().astype(np.float64)
    view = _buffer_view(data, lay.q_op.inputs[2], dtype)
    if view is None or view.size != shift.size:
        return
    info = np.iinfo(dtype)
    view[:] = np.clip(view.astype(np.float64) + np.rint(shift / bscale), info.min,
                      info.max).astype(dtype)
