"""Keras front end: ``.keras`` (Keras 3) and ``.h5`` (Keras 3 or tf_keras / Keras 2) files.

Before anything loads the file, its model config is parsed and a model with code in it (a Lambda
layer, ...: see :mod:`rewriter.frontends.safety`) is refused unless the user passes ``--unsafe``;
Keras 3 files then load with ``safe_mode=True`` too, and tf_keras files (which have no safe mode)
only after that check. The traced graph is scanned for file-system and Python ops before it
runs. The model's inference call
(``training=False``) is traced at a static input shape and frozen to a GraphDef. ``.h5`` files
written by Keras 2 / tf_keras are loaded with tf_keras, so the graph is the one that Keras
version emits (e.g. ``FusedBatchNormV3``); Keras 3 files with Keras 3.
"""

from __future__ import annotations

import re
from typing import Any

from rewriter.errors import UserError
from rewriter.frontends._common import (
    check_shape_overrides,
    freeze_concrete_function,
    static_shape,
)
from rewriter.frontends.cut import apply_cut
from rewriter.frontends.limits import check_memory
from rewriter.frontends.options import LoadOptions
from rewriter.frontends.safety import (
    H5_ERRORS,
    UNSAFE_HINT,
    graph_findings,
    keras_file_findings,
    refuse,
)
from rewriter.ir.model import Model, Source, TensorSpec


def h5_keras_version(path: str) -> str | None:
    """The ``keras_version`` attribute of a Keras .h5 file, if any."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            v = f.attrs.get("keras_version")
            cfg = f.attrs.get("model_config")
    except H5_ERRORS as exc:
        raise UserError(f"{path}: cannot read HDF5 file ({exc}); is it truncated or damaged?"
                        ) from None
    if cfg is None:
        raise UserError(f"{path}: HDF5 file holds no Keras model (no model_config); "
                        "is it a weights-only file (.weights.h5)? Give the full model")
    if isinstance(v, bytes):
        v = v.decode()
    return str(v) if v is not None else None


def load_keras(path: str, fmt: str, options: LoadOptions) -> Model:
    legacy = False
    if fmt == "h5":
        version = h5_keras_version(path)
        legacy = version is not None and not version.startswith("3")
    refuse(path, keras_file_findings(path, fmt), options.unsafe)
    model = _load_legacy(path, options) if legacy else _load_keras3(path, options)
    frozen = _freeze_keras_model(model, path, fmt, options, legacy)
    refuse(path, graph_findings(frozen.graph_def), options.unsafe)
    return frozen


def _load_keras3(path: str, options: LoadOptions) -> Any:
    import keras

    try:
        return keras.saving.load_model(path, compile=False, safe_mode=not options.unsafe)
    except Exception as exc:  # Keras raises many types; all mean "cannot load this file"
        raise _load_error(path, exc) from None


def _load_legacy(path: str, options: LoadOptions) -> Any:
    import tf_keras

    try:
        return tf_keras.models.load_model(path, compile=False)
    except Exception as exc:
        raise _load_error(path, exc) from None


def _load_error(path: str, exc: Exception) -> UserError:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "Lambda" in msg and "safe_mode" in str(exc):
        return UserError(f"{path}: model has a Lambda layer, refused in safe mode; "
                         + UNSAFE_HINT)
    if "Unknown layer" in msg or "Could not locate class" in msg or "custom_objects" in msg:
        return UserError(f"{path}: model uses a custom layer or object that is not registered "
                         f"({msg[:160]}); rewriter can load only built-in Keras layers, so "
                         "freeze the model to a SavedModel or .pb where its code is available")
    return UserError(f"{path}: cannot load Keras model: {msg[:200]}")


def _freeze_keras_model(model: Any, path: str, fmt: str, options: LoadOptions,
                        legacy: bool) -> Model:
    import tensorflow as tf

    if not getattr(model, "inputs", None):
        raise UserError(f"{path}: model has no defined inputs (a Sequential model saved before "
                        "it was built); build it with an Input layer and save it again")
    notes: list[str] = [f"loaded with {'tf_keras (Keras 2)' if legacy else 'Keras 3'}"]
    names = [_tensor_name(t, i) for i, t in enumerate(model.inputs)]
    check_shape_overrides(options, names)
    specs = []
    for name, t in zip(names, model.inputs):
        shape = static_shape(name, _shape_list(t.shape), options, notes, t.dtype)
        specs.append(tf.TensorSpec(shape, tf.as_dtype(t.dtype), name=name))

    single = len(specs) == 1
    n_out = len(model.outputs)
    out_names = _output_names(model, n_out)
    layers = _cut_layers(model, options, path)
    if layers:  # trace the cut layers' outputs too, to find their tensors in the frozen graph
        model = _with_extra_outputs(model, list(layers.values()), legacy)

    def call(*args: Any) -> Any:
        return model(args[0] if single else list(args), training=False)

    try:
        fn = tf.function(call, input_signature=specs).get_concrete_function()
    except Exception as exc:  # a layer of the user's model fails when Keras calls it
        error = _call_error(path, exc)
        if error is None:
            raise
        raise error from None
    check_memory(fn.graph, path)  # before Grappler sees the shapes while freezing
    graph_def, frozen, norm_notes = freeze_concrete_function(fn)
    notes.extend(norm_notes)
    inputs = [TensorSpec(n, t.name, tuple(s.shape), s.dtype.name)
              for n, t, s in zip(names, frozen.inputs, specs)]
    outputs = [TensorSpec(n, t.name, tuple(_shape_list(t.shape) or ()), t.dtype.name)
               for n, t in zip(out_names, frozen.outputs[:n_out])]
    aliases = {name: t.name for name, t in zip(layers, frozen.outputs[n_out:])}
    return apply_cut(Model(graph_def, inputs, outputs, Source(path, fmt, notes)), options,
                     aliases)


def _failing_layer(exc: BaseException) -> Any:
    """The innermost Keras layer whose code the exception passed through, or None."""
    layer = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        module = type(owner).__module__ if owner is not None else ""
        if module.startswith(("keras.", "tf_keras.")) and hasattr(owner, "name") \
                and hasattr(owner, "call") and not hasattr(owner, "layers"):
            layer = owner
        tb = tb.tb_next
    return layer


def _call_error(path: str, exc: BaseException) -> UserError | None:
    """Bad input when a layer of the model (not this tool) fails as Keras calls it."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    layer = _failing_layer(exc)
    if layer is None and "Exception encountered when calling" not in text:
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    marks = [i for i, ln in enumerate(lines) if "Exception encountered when calling" in ln]
    after = lines[marks[-1] + 1:] if marks else lines
    core = next((ln for ln in after if not ln.startswith(("Arguments received", "•"))),
                type(exc).__name__)
    called = re.search(r"when calling (\w+)\.call", lines[marks[-1]]) if marks else None
    if layer is not None:
        where = f"layer '{layer.name}' ({type(layer).__name__})"
    else:
        where = f"a layer of class {called.group(1)}" if called else "one of its layers"
    return UserError(f"{path}: Keras cannot call the model: {where} fails: {core[:200]} "
                     "(the model is broken as saved: fix that layer and save it again)")


def _cut_layers(model: Any, options: LoadOptions, path: str) -> dict[str, Any]:
    """The Keras layers that ``--inputs``/``--outputs`` name, with their output tensors."""
    found: dict[str, Any] = {}
    inputs = {_tensor_name(t, i) for i, t in enumerate(model.inputs)}
    for name in (options.inputs or []) + (options.outputs or []):
        if name in found or name in inputs:
            continue
        try:
            layer = model.get_layer(name)
        except ValueError:
            continue  # not a layer: a graph tensor or node name, resolved after freezing
        try:
            out = layer.output
        except (AttributeError, ValueError, RuntimeError) as exc:
            raise UserError(f"{path}: layer {name!r} has no single output to cut at "
                            f"({str(exc)[:120]}); name a graph tensor instead") from None
        if isinstance(out, (list, tuple)):
            raise UserError(f"{path}: layer {name!r} has {len(out)} outputs; name a graph "
                            "tensor (node:i) instead")
        found[name] = out
    return found


def _with_extra_outputs(model: Any, extra: list[Any], legacy: bool) -> Any:
    """A functional model over the same layers whose outputs are the model's plus ``extra``."""
    if legacy:
        import tf_keras as k
    else:
        import keras as k
    return k.Model(model.inputs, list(model.outputs) + extra)


def _tensor_name(t: Any, i: int) -> str:
    name = getattr(t, "name", None) or f"input_{i}"
    return name.split(":")[0]


def _shape_list(shape: Any) -> list[int | None] | None:
    try:
        return [None if d is None else int(d) for d in shape]
    except (TypeError, ValueError):  # unknown rank: filled in from the frozen graph later
        return None


def _output_names(model: Any, n: int) -> list[str]:
    names = list(getattr(model, "output_names", None) or [])
    if len(names) != n or len(set(names)) != n:
        names = [f"output_{i}" for i in range(n)]
    return names

