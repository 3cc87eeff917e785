"""The rewritten float model as a SavedModel, and the named serving function behind it.

:func:`serving_function` wraps ``Model.concrete_function()`` (the graph with its weights read
from variables, :meth:`rewriter.ir.model.Model.weights`) in a ``tf.function`` whose arguments are
named after the model's input ``TensorSpec`` names and which returns a dict keyed by the output
names. The SavedModel export and the TFLite converter both use it, so the ``serving_default``
signature of the SavedModel and the signature inside the ``.tflite`` carry the same names as
the :class:`Model`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rewriter.export.result import ExportResult
from rewriter.host.fs import make_temp_dir, replace_dir
from rewriter.ir.model import Model, signature_names


def serving_function(model: Model, variables: bool = True) -> tuple[Any, Any]:
    """``(module, concrete_function)``: a named-signature serving function over the graph.

    It calls ``Model.concrete_function()`` (a pruned ``wrap_function``, which TF1 control flow
    needs). With ``variables`` (the default) that function reads the weights from the model's
    variables (:meth:`rewriter.ir.model.Model.weights`), as a Keras model's SavedModel holds them:
    the TFLite converter reads such a SavedModel with much less memory (measured on TF 2.21,
    ResNet50 at 64x64, full int8: its peak 1.0 GB above TensorFlow's own from variables, 2.2 GB
    from the same graph with its weights as constants) and freezes them back itself. Without,
    the weights stay constants in the graph (the converter's fallback for a graph the
    variables' route cannot convert).

    The module holds the ``tf.function`` and the variables (the TFLite converter and
    ``tf.saved_model.save`` need a trackable object); the concrete function takes the inputs
    positionally, in model order.
    """
    import tensorflow as tf

    pruned = model.concrete_function(constants=not variables)
    module = tf.Module()
    module.weights = list(model.weights()[1].values()) if variables else []
    in_names = signature_names([i.name for i in model.inputs], "input")
    out_names = signature_names([o.name for o in model.outputs], "output")
    specs = [tf.TensorSpec([1 if d is None else d for d in i.shape], tf.as_dtype(i.dtype),
                           name=n) for i, n in zip(model.inputs, in_names, strict=True)]

    @tf.function(input_signature=specs, autograph=False)
    def serve(*args: Any) -> dict[str, Any]:
        outs = pruned(*args)
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        return {n: tf.identity(t, name=n) for n, t in zip(out_names, outs, strict=True)}

    module.serve = serve
    return module, serve.get_concrete_function()


def export_saved_model(model: Model, directory: str | os.PathLike,
                       variables: bool = True) -> ExportResult:
    """Write the model as a SavedModel with a ``serving_default`` signature, atomically; its
    weights as variables unless ``variables`` is false (:func:`serving_function`)."""
    import tensorflow as tf

    start = time.perf_counter()
    target = Path(directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    module, fn = serving_function(model, variables)
    tmp = make_temp_dir(target.parent, f".{target.name}.")
    try:
        # The front end drops tf.custom_gradient markers (IdentityN with a _gradient_op_type, as
        # Keras 3 swish leaves), but Models built elsewhere (model_from_function, merge) may
        # still carry them; their gradients cannot be traced from a frozen graph and an
        # inference SavedModel does not need them.
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
        tf.saved_model.save(module, tmp, signatures={"serving_default": fn}, options=options)
        replace_dir(tmp, target)
    except BaseException:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    warnings = []
    if signature_names([i.name for i in model.inputs], "input") != [i.name for i in model.inputs]:
        warnings.append("input names are not valid signature keys; signature uses input_<i>")
    return ExportResult(path=str(target), format="saved_model", quantize="none", size=size,
                        ops=[], warnings=warnings, seconds=time.perf_counter() - start,
                        route="tf.saved_model.save(serving_function(model))")
