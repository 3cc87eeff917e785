"""A Keras 3 layer that runs a frozen graph with its weights as trainable Keras variables.

``rewrite unfreeze --to-keras`` writes a ``.keras`` model made of one :class:`FrozenGraphLayer`.
The layer's config carries the graph (weight consts replaced by Placeholders, base64) and the
list of weights; Keras stores the weight values like any layer's. ``call`` imports the graph
inside a ``tf.function`` with an ``input_map`` that feeds each weight from its variable, so the
layer computes the frozen graph op for op and gradients reach every trainable weight.

Loading the ``.keras`` file needs this module imported first (``import
rewriter.surgery.keras_layer``), which registers the class as ``rewriter>FrozenGraphLayer``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf
from tensorflow.core.framework import graph_pb2


@keras.saving.register_keras_serializable(package="rewriter")
class FrozenGraphLayer(keras.layers.Layer):
    """Runs ``graph`` (a lifted GraphDef) mapping inputs and weights onto its placeholders."""

    def __init__(self, graph: str, input_tensors: Sequence[str], output_tensors: Sequence[str],
                 weight_specs: Sequence[dict[str, Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.graph = graph
        self.input_tensors = list(input_tensors)
        self.output_tensors = list(output_tensors)
        self.weight_specs = [dict(w) for w in weight_specs]
        self._graph_def = graph_pb2.GraphDef.FromString(base64.b64decode(graph))
        self.graph_weights = [
            self.add_weight(shape=tuple(w["shape"]), dtype=w["dtype"], trainable=w["trainable"],
                            initializer="zeros", name=_safe(w["name"]))
            for w in self.weight_specs]
        self._fn = tf.function(self._run, reduce_retracing=True, autograph=False)

    def _run(self, inputs: list[Any], weights: list[Any]) -> Any:
        input_map = {t: tf.convert_to_tensor(x)
                     for t, x in zip(self.input_tensors, inputs, strict=True)}
        for spec, value in zip(self.weight_specs, weights, strict=True):
            input_map[f"{spec['name']}:0"] = tf.convert_to_tensor(value)
        outs = tf.compat.v1.import_graph_def(self._graph_def, input_map=input_map,
                                             return_elements=self.output_tensors, name="")
        return outs[0] if len(outs) == 1 else list(outs)

    def call(self, inputs: Any) -> Any:
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return self._fn(inputs, [v.value for v in self.graph_weights])

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "graph": self.graph, "input_tensors": self.input_tensors,
                "output_tensors": self.output_tensors, "weight_specs": self.weight_specs}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def build_keras_model(lifted_graph: Any, weights: Sequence[Any], values: Sequence[Any],
                      input_specs: Sequence[Any], output_tensors: Sequence[str]) -> Any:
    """A Keras model of one FrozenGraphLayer holding ``values`` for the lifted ``weights``."""
    specs = [{"name": w.name, "shape": list(w.shape), "dtype": w.dtype,
              "trainable": w.trainable} for w in weights]
    layer = FrozenGraphLayer(base64.b64encode(lifted_graph.SerializeToString()).decode("ascii"),
                             [s.tensor for s in input_specs], list(output_tensors), specs,
                             name="frozen_graph")
    for var, value in zip(layer.graph_weights, values, strict=True):
        var.assign(value)
    inputs = [keras.Input(shape=tuple(s.shape[1:]), batch_size=s.shape[0], dtype=s.dtype,
                          name=_safe(s.name)) for s in input_specs]
    model_inputs = inputs if len(inputs) > 1 else inputs[0]
    return keras.Model(model_inputs, layer(model_inputs), name="unfrozen")
