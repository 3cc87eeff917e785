"""TFLite export: float32, full-integer int8 and float16, with LiteRT builtin ops only.

Route (measured on TF 2.21): the named serving function of :mod:`rewriter.export.saved_model`
is written as a SavedModel with the weights as variables
(:func:`~rewriter.export.saved_model.serving_function`), every TF function over the graph is
dropped, and ``tf.lite.TFLiteConverter.from_saved_model`` converts the directory, so the
``.tflite`` carries a ``serving_default`` signature whose input/output keys are the model's
``TensorSpec`` names. ``from_concrete_functions`` with the module as ``trackable_obj`` takes the
same SavedModel path inside the converter and gives the same file, but converts while the
functions (each holding the weights again) are alive: ResNet50 at 64x64 peaked at 4.8 GB that
way, 2.6 GB this way with the weights as constants; as variables, the converter itself needs
1.0 GB above TensorFlow's own instead of 2.2 GB (``python`` converting the job's SavedModel
alone, full int8, calibration data of ``benchmarks/zoo_build.py``). If it
fails for a reason other than an op, the TF1 frozen-graph converter (``tf.compat.v1.lite``
``TFLiteConverter(graph_def, ...)``) is tried once.

Full int8: ``optimizations=[DEFAULT]``, a representative dataset (the calibration samples, or
seeded synthetic inputs with the warning ``calibration synthetic: accuracy unmeasured``),
``supported_ops=[TFLITE_BUILTINS_INT8]`` and int8 input/output when ``int8_io``. Select TF ops
(Flex) are never enabled: an op the converter cannot lower raises :class:`ExportError` naming it.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
import warnings as pywarnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rewriter.defaults import (
    CALIBRATION_SAMPLES,
    CALIBRATION_SEED,
    INTEGER_MODES,
    QUANTIZE_MODES,
)
from rewriter.export.request import (
    export_error_json,
    model_request,
    raise_export_error,
    read_request,
)
from rewriter.export.result import ExportError, ExportResult
from rewriter.export.validate import check_samples, check_weights
from rewriter.host.fs import atomic_write_bytes
from rewriter.ir.model import Model

SYNTHETIC_WARNING = "calibration synthetic: accuracy unmeasured"
_OP_RE = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")
_CUSTOM_RE = re.compile(r"Custom ops: ([\w, ]+)")
_QUANT_PLUMBING = {"QUANTIZE", "DEQUANTIZE"}


def export_tflite(model: Model, path: str | os.PathLike, quantize: str = "none",
                  calibration: Sequence[dict[str, np.ndarray]] | None = None,
                  int8_io: bool = False,
                  calibration_ranges: Mapping[str, tuple[float, float]] | None = None
                  ) -> ExportResult:
    """Convert ``model`` to a ``.tflite`` at ``path`` (written atomically).

    ``calibration`` is a list of feed dicts keyed by input name; without it, int8 calibrates on
    :data:`~rewriter.defaults.CALIBRATION_SAMPLES` seeded samples uniform in ``calibration_ranges`` (default [-1, 1];
    Keras applications with built-in preprocessing expect 0..255) and warns.
    """
    if quantize not in QUANTIZE_MODES:
        raise ExportError(f"unknown quantization {quantize!r}; choose one of "
                          f"{', '.join(QUANTIZE_MODES)}", format="tflite")
    warnings: list[str] = []
    if quantize in INTEGER_MODES:
        _refuse_loops(model)
        calibration = _calibration_samples(model, calibration, warnings, calibration_ranges)
        check_weights(model)
        check_samples(calibration, "calibration data")
    elif int8_io:
        warnings.append("integer input/output needs --quantize int8 or 16x8; kept float "
                        "input/output")
    start = time.perf_counter()
    data, route = _convert(model, quantize, calibration, int8_io and quantize in INTEGER_MODES)
    seconds = time.perf_counter() - start
    repairs = []
    if quantize == "int8" and int8_io:
        from rewriter.export.tflite_fixups import int8_output_moves

        data, moved = int8_output_moves(data)
        repairs = [f"output {name}: the converter left its RESHAPE in float behind a DEQUANTIZE; "
                   "made int8 with the scale of the int8 tensor it moves (exact)"
                   for name in moved]
    if route != "from_saved_model":
        warnings.append(f"converted by the {route} route: the file has no signature, so runners "
                        "match its inputs/outputs to the model's by order")
    ops, float_ops, io = tflite_ops(data)
    float_ops = float_ops if quantize in INTEGER_MODES else []
    if quantize in INTEGER_MODES and float_ops:
        warnings.append(f"{quantize} conversion left ops in float (DEQUANTIZE -> op -> QUANTIZE): "
                        + ", ".join(sorted(set(float_ops))))
    out = str(atomic_write_bytes(path, data))
    return ExportResult(path=out, format="tflite", quantize=quantize, size=len(data), ops=ops,
                        warnings=warnings, seconds=seconds, route=route, float_ops=float_ops,
                        io=io, repairs=repairs)


def _refuse_loops(model: Model) -> None:
    """ExportError naming the while loops of a graph to convert to int8: TF 2.21's int8
    calibration crashes (SIGSEGV) on a WHILE, measured on a Keras LSTM; rule while_unroll
    unrolls loops with a static trip count first."""
    loops = [n.name for n in model.graph_def.node
             if n.op in ("LoopCond", "While", "StatelessWhile")]
    if loops:
        raise ExportError(f"int8 conversion of a model with {len(loops)} while loop(s) crashes "
                          "the TFLite converter (TF 2.21); unroll them first (rule while_unroll; "
                          "a loop whose trip count depends on the data cannot be unrolled: give "
                          "static input shapes with --input-shape)", format="tflite",
                          ops=["WHILE"], nodes=loops, refused=True)


def _calibration_samples(model: Model, calibration: Sequence[dict[str, np.ndarray]] | None,
                         warnings: list[str],
                         ranges: Mapping[str, tuple[float, float]] | None
                         ) -> list[dict[str, np.ndarray]]:
    if calibration:
        names = [i.name for i in model.inputs]
        for k, sample in enumerate(calibration):
            missing = [n for n in names if n not in sample]
            if missing:
                raise ExportError(f"calibration sample {k} lacks input(s) {', '.join(missing)}; "
                                  f"the model's inputs are {', '.join(names)}", format="tflite")
        return list(calibration)
    from rewriter.verify.data import synthetic_inputs

    warnings.append(SYNTHETIC_WARNING)
    return synthetic_inputs(model.inputs, samples=CALIBRATION_SAMPLES,
                            seed=CALIBRATION_SEED, ranges=ranges)


def _convert(model: Model, quantize: str, calibration: list[dict[str, np.ndarray]] | None,
             int8_io: bool) -> tuple[bytes, str]:
    """The flatbuffer bytes and the route that produced them, converted through
    :mod:`rewriter.host.isolate` (in the worker process, or in this one when it is a supervised
    child): a converter crash becomes exit 3 naming the stage either way."""
    from rewriter.host import isolate

    payload, files = model_request(model, {"quantize": quantize, "int8_io": int8_io},
                                   calibration)
    result, out = isolate.call(f"TFLite conversion ({quantize})",
                               "rewriter.export.tflite:convert_request", payload, files)
    raise_export_error(result)
    return out["model.tflite"], result["route"]


def convert_request(directory: Path) -> dict[str, Any]:
    """Worker side of :func:`_convert` (run by :func:`rewriter.host.isolate.call`): convert the
    request's model into ``out/model.tflite``."""
    model, options, samples = read_request(directory)
    try:
        data, route = _convert_here(model, options["quantize"], samples, options["int8_io"],
                                    directory)
    except ExportError as exc:
        return export_error_json(exc)
    (directory / "out" / "model.tflite").write_bytes(data)
    return {"route": route}


def _convert_here(model: Model, quantize: str,
                  calibration: list[dict[str, np.ndarray]] | None, int8_io: bool,
                  log_dir: Path | None = None) -> tuple[bytes, str]:
    """The converter, in this process (run by :func:`convert_request`): from a SavedModel with
    the weights as variables, else with them as constants (a graph the variables' route cannot
    import or convert), else the frozen-graph route."""
    first: ExportError | None = None
    for route, variables in (("from_saved_model", True), ("from_saved_model", False),
                             ("v1_frozen_graph", False)):
        try:
            data = _convert_once(model, route, quantize, calibration, int8_io, log_dir,
                                 variables)
            return data, route
        except ExportError as err:
            if err.ops:
                raise
            first = first or err
    assert first is not None
    raise first


def _convert_once(model: Model, route: str, quantize: str,
                  calibration: list[dict[str, np.ndarray]] | None, int8_io: bool,
                  log_dir: Path | None = None, variables: bool = False) -> bytes:
    log = ""
    try:
        with tempfile.TemporaryDirectory(prefix="rewriter-convert-", dir=log_dir) as tmp:
            converter = _converter(model, route, Path(tmp), variables)
            _configure(converter, model, quantize, calibration, int8_io, route)
            with _captured_stderr(log_dir) as path, pywarnings.catch_warnings():
                pywarnings.simplefilter("ignore")  # the calibrator's Interpreter deprecation
                try:
                    return bytes(converter.convert())
                finally:
                    log = _read(path)
    except ExportError:
        raise
    except Exception as exc:  # the converter raises many types; classify them
        raise _classify(exc, log) from None


def _converter(model: Model, route: str, tmp: Path, variables: bool = False) -> Any:
    import tensorflow as tf

    if route == "from_saved_model":
        from rewriter.export.saved_model import export_saved_model
        from rewriter.host.procmem import release

        export_saved_model(model, tmp / "saved_model", variables=variables)
        model.forget_functions()  # the converter reads the directory: hold no graph copy
        release()
        return tf.lite.TFLiteConverter.from_saved_model(str(tmp / "saved_model"))
    import tensorflow.compat.v1 as tf1

    graph = tf.Graph()
    with graph.as_default():
        tf1.import_graph_def(model.graph_def, name="")
    ins = [graph.get_tensor_by_name(i.tensor) for i in model.inputs]
    outs = [graph.get_tensor_by_name(o.tensor) for o in model.outputs]
    return tf1.lite.TFLiteConverter(model.graph_def, ins, outs)


def _configure(converter: Any, model: Model, quantize: str,
               calibration: list[dict[str, np.ndarray]] | None, int8_io: bool,
               route: str) -> None:
    import tensorflow as tf

    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = _representative(model, calibration or [], route)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if int8_io:
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
    elif quantize == "16x8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = _representative(model, calibration or [], route)
        converter.target_spec.supported_ops = [
            tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        if int8_io:  # integer I/O: int16 in 16x8
            converter.inference_input_type = tf.int16
            converter.inference_output_type = tf.int16


def _representative(model: Model, samples: list[dict[str, np.ndarray]], route: str) -> Any:
    """A representative dataset: dicts keyed by signature name, or lists in input order (v1)."""
    from rewriter.export.saved_model import signature_names

    keys = signature_names([i.name for i in model.inputs], "input")

    def gen() -> Iterator[Any]:
        for sample in samples:
            arrays = [np.asarray(sample[i.name], dtype=i.dtype) for i in model.inputs]
            if route == "from_saved_model":
                yield dict(zip(keys, arrays, strict=True))
            else:
                yield arrays

    return gen


def _classify(exc: Exception, log: str) -> ExportError:
    """An ExportError naming the unsupported TF ops (and their nodes) when the message has them."""
    ops: list[str] = []
    nodes: list[str] = []
    for err in getattr(exc, "errors", None) or []:
        name = getattr(getattr(err, "operator", None), "name", "")
        if name.startswith("tf.") and name[3:] not in ops:
            ops.append(name[3:])
        nodes.extend(_error_nodes(err))
    text = f"{exc}\n{log}"
    for op in _OP_RE.findall(text):
        if op not in ops:
            ops.append(op)
    for group in _CUSTOM_RE.findall(text):
        ops.extend(o.strip() for o in group.split(",") if o.strip() and o.strip() not in ops)
    if ops:
        where = f" (node {', '.join(dict.fromkeys(nodes))})" if nodes else ""
        msg = (f"TFLite conversion failed: op {', '.join(ops)}{where} is not a TFLite builtin "
               "and Flex (select TF ops) is never used; rewrite it for the target first")
        return ExportError(msg, format="tflite", ops=ops, nodes=list(dict.fromkeys(nodes)),
                           detail=text)
    first_line = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    return ExportError(f"TFLite conversion failed: {first_line[:300]}", format="tflite",
                       detail=text)


def _error_nodes(err: Any) -> list[str]:
    """Graph node names from a converter error's location (``Erfc@__inference_...``)."""
    found: list[str] = []
    loc = getattr(err, "location", None)
    for call in getattr(loc, "call", []) or []:
        name = getattr(call, "name", "")
        if "@" in name:
            found.append(name.split("@", 1)[0])
    return found[:1]


@contextlib.contextmanager
def _captured_stderr(folder: Path | None = None) -> Iterator[Path]:
    """Send file descriptor 2 to a temporary file (the converter's MLIR diagnostics); in
    ``folder`` (the worker's request directory) so a crash's last words are kept with it."""
    fd, tmp = tempfile.mkstemp(prefix="rewriter-tflite-", suffix=".log", dir=folder)
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        yield Path(tmp)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _read(log: Path) -> str:
    try:
        text = log.read_text(errors="replace")
        log.unlink(missing_ok=True)
        return text
    except OSError:
        return ""


def tflite_ops(data: bytes) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """``(ops, float_ops, io)``: operator names in order, non-plumbing ops computing in float,
    and the inputs/outputs (name, dtype, shape, scale, zero point).

    ``float_ops`` is only meaningful for int8 files: ops other than QUANTIZE/DEQUANTIZE whose
    inputs or outputs are float32 tensors (what the converter left in float).
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    interp = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    tensors = {t["index"]: t for t in interp.get_tensor_details()}
    ops: list[str] = []
    float_ops: list[str] = []
    for op in interp._get_ops_details():  # the only op listing LiteRT offers
        name = op["op_name"]
        ops.append(name)
        io = [*op.get("inputs", []), *op.get("outputs", [])]
        if name not in _QUANT_PLUMBING and any(
                i >= 0 and i in tensors and tensors[i]["dtype"] == np.float32 for i in io):
            float_ops.append(name)
    return ops, float_ops, _io(interp)


def _io(interp: Any) -> list[dict[str, Any]]:
    from rewriter.verify.runners import TFLiteIO

    info = TFLiteIO(interp)
    rows = []
    for kind, names, details, quant in (("input", [i.name for i in info.inputs],
                                         info.in_details, info.in_quant),
                                        ("output", info.outputs, info.out_details,
                                         info.out_quant)):
        for name, d, q in zip(names, details, quant, strict=True):
            rows.append({"kind": kind, "name": name, "dtype": np.dtype(d["dtype"]).name,
                         "shape": [int(s) for s in d["shape"]],
                         "scale": q[0] if q else None, "zero_point": q[1] if q else None})
    return rows
