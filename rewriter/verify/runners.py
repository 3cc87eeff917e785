"""Runners: one interface to run a model in TF, LiteRT, ONNX Runtime or TFLite Micro.

A :class:`Runner` has ``inputs`` (``TensorSpec``: the name a caller feeds, the runtime's tensor
name, shape, and the dtype a caller feeds: float32 for a quantised input) and ``outputs``
(names), and ``run(feeds) -> {output name: array}``. Quantised (int8/uint8/int16) inputs are
quantised with the tensor's scale and zero point; quantised outputs are dequantised, so every
runner takes and returns the same float values.

Name matching (how feeds and outputs of one model meet another's): names are compared exactly,
then normalised (lower case; ``serving_default_`` prefix, ``:0`` suffix and non-alphanumerics
dropped). Names that are not valid signature keys were exported by position (``output_i``, see
:func:`rewriter.ir.model.signature_names`): name ``i`` maps to key ``i`` whatever order the file
lists its tensors in. When some name still differs and the counts agree, inputs/outputs are
matched *by order*; :func:`match_names` says which rule it used. Files this project exports
carry the Model's names (or their positional keys) in their signature (``.tflite``) or graph
inputs/outputs (``.onnx``), so they never match by order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rewriter.errors import UserError
from rewriter.ir.model import Model, TensorSpec, signature_names

_QUANT_KINDS = (np.int8, np.uint8, np.int16)


class RunnerError(UserError):
    """A runtime could not load or run a model (bad file, unsupported op, crash).

    ``ops`` names the operators the runtime has no kernel for, when it said so.
    """

    def __init__(self, message: str, ops: list[str] | None = None) -> None:
        super().__init__(message)
        self.ops = list(ops or [])


class Runner:
    """Runs one model; subclasses set ``kind``, ``path``, ``inputs``, ``outputs``."""

    kind = "runner"

    def __init__(self, path: str, inputs: list[TensorSpec], outputs: list[str]) -> None:
        self.path = path
        self.inputs = inputs
        self.outputs = outputs

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Outputs keyed by this runner's output names; feeds matched by name or order."""
        return self._run(self.bind_feeds(feeds))

    def run_many(self, samples: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        return [self.run(s) for s in samples]

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def bind_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The feeds re-keyed by this runner's input names."""
        mapping, _ = match_names(list(feeds), [i.name for i in self.inputs], "input")
        return {mapping[k]: np.asarray(v) for k, v in feeds.items()}

    def describe(self) -> str:
        return f"{self.kind}:{self.path}"


def _normalise(name: str) -> str:
    name = name.split(":")[0].lower()
    name = name.removeprefix("serving_default_")
    return re.sub(r"[^a-z0-9]", "", name)


def match_names(ref: Sequence[str], test: Sequence[str], what: str) -> tuple[dict[str, str], str]:
    """``({ref name: test name}, how)``, how being "by name", "by normalised name", "by
    signature position" or "by order".

    Raises :class:`RunnerError` when neither names nor counts line up.
    """
    if set(ref) <= set(test) and len(ref) == len(test):
        return {n: n for n in ref}, "by name"
    norm = {_normalise(t): t for t in test}
    if len(norm) == len(test) and all(_normalise(r) in norm for r in ref) \
            and len(ref) == len(test):
        return {r: norm[_normalise(r)] for r in ref}, "by normalised name"
    keys = signature_names(ref, what)
    if keys != list(ref) and sorted(keys) == sorted(test):
        # the exporter keyed the signature by position (``output_i``): key i is ref[i], in
        # whatever order the file lists its tensors
        return dict(zip(ref, keys, strict=True)), "by signature position"
    if len(ref) == len(test):
        return dict(zip(ref, test, strict=True)), "by order"
    raise RunnerError(f"the models have different {what}s: {', '.join(ref)} vs {', '.join(test)}")


# ---------------------------------------------------------------------------- TF
class TFRunner(Runner):
    """A :class:`Model` (frozen graph) run in TensorFlow."""

    kind = "tf"

    def __init__(self, model: Model) -> None:
        super().__init__(model.source.path, list(model.inputs), [o.name for o in model.outputs])
        self.model = model

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.model.run(feeds)


def run_tf(model: Model, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return TFRunner(model).run(feeds)


# ---------------------------------------------------------------------------- LiteRT
def quantize(x: np.ndarray, dtype: Any, scale: float, zero_point: int) -> np.ndarray:
    """Float values to a quantised integer type (round half away from zero, saturating)."""
    info = np.iinfo(dtype)
    q = np.round(np.asarray(x, dtype=np.float64) / scale) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((np.asarray(q, dtype=np.float32) - zero_point) * np.float32(scale)).astype(np.float32)


def _quant(detail: Mapping[str, Any]) -> tuple[float, int] | None:
    """The per-tensor (scale, zero point) of a quantised tensor, else None."""
    if np.dtype(detail["dtype"]).type not in _QUANT_KINDS:
        return None
    params = detail.get("quantization_parameters") or {}
    scales = np.asarray(params.get("scales", []))
    zps = np.asarray(params.get("zero_points", []))
    if scales.size == 0:
        scale, zp = detail.get("quantization", (0.0, 0))
        return (float(scale), int(zp)) if scale else None
    return float(scales[0]), int(zps[0]) if zps.size else 0


class TFLiteIO:
    """Inputs/outputs of a ``.tflite``: signature names, tensor indices, quantisation."""

    def __init__(self, interp: Any) -> None:
        ins, outs = interp.get_input_details(), interp.get_output_details()
        sigs = interp._get_full_signature_list() or {}  # {key: {"inputs": {name: index}}}
        sig = sigs.get("serving_default") or (next(iter(sigs.values())) if len(sigs) == 1
                                                else None)
        in_names = _signature_names(sig, "inputs", ins)
        out_names = _signature_names(sig, "outputs", outs)
        self.in_details, self.out_details = ins, outs
        self.in_quant = [_quant(d) for d in ins]
        self.out_quant = [_quant(d) for d in outs]
        self.inputs = [
            TensorSpec(n, d["name"], tuple(int(x) for x in d["shape"]),
                       "float32" if q else np.dtype(d["dtype"]).name)
            for n, d, q in zip(in_names, ins, self.in_quant, strict=True)]
        self.outputs = out_names

    def encode(self, k: int, x: np.ndarray) -> np.ndarray:
        d, q = self.in_details[k], self.in_quant[k]
        dt = np.dtype(d["dtype"])
        x = np.asarray(x)
        if q is not None and x.dtype.kind == "f":
            x = quantize(x, dt, *q)
        shape = tuple(int(s) for s in d["shape"])
        if x.shape != shape and x.size == int(np.prod(shape)):
            x = x.reshape(shape)
        return x.astype(dt, copy=False)

    def decode(self, k: int, y: np.ndarray) -> np.ndarray:
        q = self.out_quant[k]
        return dequantize(y, *q) if q is not None else np.asarray(y)


def _signature_names(sig: Mapping[str, Any] | None, key: str,
                     details: list[dict[str, Any]]) -> list[str]:
    """Signature keys for tensors in subgraph order; tensor names where there is none."""
    by_index = {int(v): k for k, v in ((sig or {}).get(key) or {}).items()}
    names = [by_index.get(int(d["index"]), d["name"]) for d in details]
    return names if len(set(names)) == len(names) else [d["name"] for d in details]


class LiteRTRunner(Runner):
    """A ``.tflite`` run with ``ai_edge_litert.interpreter`` (builtin kernels, no delegates)."""

    kind = "litert"

    def __init__(self, path: str | os.PathLike) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        path = os.fspath(path)
        try:
            # Builtin kernels without the default XNNPACK delegate: the kernels edge runtimes
            # run, and no delegate rewriting the graph under the comparison.
            self.interp = Interpreter(
                model_path=path,
                experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
            self.interp.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise RunnerError(f"{path}: LiteRT cannot load it ({_first_line(exc)})") from None
        self.io = TFLiteIO(self.interp)
        super().__init__(path, self.io.inputs, self.io.outputs)

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for k, spec in enumerate(self.inputs):
            index = self.io.in_details[k]["index"]
            self.interp.set_tensor(index, self.io.encode(k, feeds[spec.name]))
        try:
            self.interp.invoke()
        except RuntimeError as exc:
            raise RunnerError(f"{self.path}: LiteRT failed ({_first_line(exc)})") from None
        return {name: self.io.decode(k, self.interp.get_tensor(d["index"]))
                for k, (name, d) in enumerate(zip(self.outputs, self.io.out_details, strict=True))}


def run_tflite(path: str | os.PathLike, feeds: Mapping[str, np.ndarray],
               output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Run a ``.tflite`` in LiteRT; outputs renamed to ``output_names`` (by name or order)."""
    return rename_outputs(LiteRTRunner(path).run(feeds), output_names)


# ---------------------------------------------------------------------------- ONNX Runtime
_ORT_TYPES = {"tensor(float)": "float32", "tensor(double)": "float64", "tensor(int32)": "int32",
              "tensor(int64)": "int64", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
              "tensor(bool)": "bool", "tensor(float16)": "float16"}


class OnnxRunner(Runner):
    """An ``.onnx`` run with ONNX Runtime on the CPU execution provider."""

    kind = "onnxruntime"

    def __init__(self, path: str | os.PathLike) -> None:
        import onnxruntime as ort

        path = os.fspath(path)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # ORT raises its own exception types
            raise RunnerError(f"{path}: ONNX Runtime cannot load it ({_first_line(exc)})") from None
        inputs = [TensorSpec(i.name, i.name, tuple(d if isinstance(d, int) else None
                                                   for d in i.shape),
                             _ORT_TYPES.get(i.type, "float32"))
                  for i in self.session.get_inputs()]
        super().__init__(path, inputs, [o.name for o in self.session.get_outputs()])

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = {i.name: np.asarray(feeds[i.name], dtype=i.dtype) for i in self.inputs}
        try:
            results = self.session.run(self.outputs, arrays)
        except Exception as exc:  # ORT raises its own exception types
            raise RunnerError(f"{self.path}: ONNX Runtime failed ({_first_line(exc)})") from None
        return dict(zip(self.outputs, (np.asarray(r) for r in results), strict=True))


def run_onnx(path: str | os.PathLike, feeds: Mapping[str, np.ndarray],
             output_names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Run an ``.onnx`` in ONNX Runtime (CPU); outputs renamed to ``output_names``."""
    return rename_outputs(OnnxRunner(path).run(feeds), output_names)


def rename_outputs(outputs: dict[str, np.ndarray],
                   names: Sequence[str] | None) -> dict[str, np.ndarray]:
    """``outputs`` re-keyed by ``names`` (matched by name, normalised name, or order)."""
    if names is None:
        return outputs
    mapping, _ = match_names(list(names), list(outputs), "output")
    return {n: outputs[mapping[n]] for n in names}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]
