"""A Python function of TF tensors, or a live Keras model, frozen into a :class:`Model`.

For models built in code (the activation table, tests, benchmarks) rather than read from a file
(:func:`rewriter.frontends.load_model`). Imports TensorFlow lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rewriter.ir.model import Model, Source, TensorSpec


def model_from_function(fn: Callable[..., Any], shapes: Sequence[Sequence[int]],
                        names: Sequence[str] | None = None, dtype: str = "float32") -> Model:
    """Freeze ``fn`` (a Python function of TF tensors, may close over ``tf.Variable``s) for
    inputs of ``shapes`` into a :class:`Model` with inputs ``x0, x1, ...`` (or ``names``)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    names = list(names or [f"x{i}" for i in range(len(shapes))])
    sig = [tf.TensorSpec(list(s), dtype, name=n) for s, n in zip(shapes, names, strict=True)]
    concrete = tf.function(fn, input_signature=sig).get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)
    gd = frozen.graph.as_graph_def()
    ins = [TensorSpec(n, t.name, tuple(t.shape.as_list()), dtype)
           for n, t in zip(names, frozen.inputs, strict=True)]
    outs = [TensorSpec(f"output_{i}", t.name, tuple(t.shape.as_list()), t.dtype.name)
            for i, t in enumerate(frozen.outputs)]
    return Model(gd, ins, outs, Source("<test>", "memory"))


def model_from_keras(model: Any) -> Model:
    """Freeze a built Keras model (Keras 3 or tf_keras) into a :class:`Model`."""
    shapes = [tuple(1 if d is None else d for d in t.shape) for t in model.inputs]
    return model_from_function(lambda *xs: model(list(xs) if len(xs) > 1 else xs[0],
                                                 training=False), shapes)
