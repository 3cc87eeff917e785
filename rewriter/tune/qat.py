"""``--qat``: quantization-aware fine-tuning with tensorflow-model-optimization (TFMOT).

TFMOT 0.8 works with tf_keras (Keras 2) models only. For a tf_keras ``.h5``, the model is wrapped
with ``tfmot.quantization.keras.quantize_model`` (fake quantisation of weights and activations,
TFMOT's default 8-bit scheme) and fine-tuned by distillation: the original model's outputs on
the calibration inputs are the targets (mean squared error, no labels); batch norms keep their
statistics (frozen, inference mode). The fine-tuned float weights are then copied back into the
original layers by variable name
and the model is saved and loaded again through the front end, so the job rewrites and exports
it like any model. Anything TFMOT cannot do (a Keras 3 model, a layer its scheme does not
support, the package missing) raises :class:`QatUnavailable` with the reason; the job then says
so and fine-tunes with ``--recover`` instead.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewriter.ir.model import Model

LEARNING_RATE = 1e-4
BATCH = 4


class QatUnavailable(Exception):
    """TFMOT cannot fine-tune this model; the message says why."""


@dataclass
class QatResult:
    model: Model  # the fine-tuned model, loaded through the front end (not yet rewritten)
    layers: int  # layers whose weights were copied back
    losses: list[float]
    seconds: float


def is_tf_keras(model: Model) -> bool:
    return model.source.format == "h5" and any("tf_keras" in n for n in model.source.notes)


def qat_finetune(model: Model, train: Sequence[Mapping[str, np.ndarray]], epochs: int,
                 seed: int = 0, on_epoch: Callable[[int, float], None] | None = None
                 ) -> QatResult:
    """Fine-tune ``model`` (a tf_keras ``.h5``) with TFMOT (see the module docstring)."""
    if not is_tf_keras(model):
        raise QatUnavailable("TFMOT's quantization-aware training works with tf_keras (Keras 2) "
                             f"models only; {model.source.path} is a {_kind(model)}")
    ints = [o.name for o in model.outputs if not o.dtype.startswith(("float", "bfloat", "half"))]
    if ints:  # --recover distils the logits their arg-max reads (rewriter.tune.distil_targets)
        raise QatUnavailable(f"TFMOT fits the outputs by mean squared error and the integer "
                             f"output(s) {', '.join(ints)} have no gradient")
    try:
        import tensorflow_model_optimization as tfmot
    except ImportError:
        raise QatUnavailable("tensorflow-model-optimization is not installed "
                             "(pip install 'rewriter[qat]')") from None
    import tensorflow as tf
    import tf_keras

    start = time.perf_counter()
    tf.random.set_seed(seed)
    keras_model = tf_keras.models.load_model(model.source.path, compile=False)
    for layer in keras_model.layers:  # distillation of a trained model: the batch norms keep
        if isinstance(layer, tf_keras.layers.BatchNormalization):  # their statistics
            layer.trainable = False
    try:
        quantised = tfmot.quantization.keras.quantize_model(keras_model)
    except Exception as exc:  # TFMOT raises RuntimeError/ValueError for unsupported layers
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise QatUnavailable(f"TFMOT cannot quantise this model: {first[:200]}") from None
    names = [s.name for s in model.inputs]
    xs = [np.concatenate([np.asarray(s[n]) for s in train]) for n in names]
    teacher = keras_model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
    quantised.compile(optimizer=tf_keras.optimizers.Adam(LEARNING_RATE), loss="mse")
    losses: list[float] = []

    class _Epoch(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            losses.append(float((logs or {}).get("loss", np.nan)))
            if on_epoch is not None:
                on_epoch(epoch + 1, losses[-1])

    quantised.fit(xs if len(xs) > 1 else xs[0], teacher, epochs=epochs, batch_size=BATCH,
                  shuffle=True, verbose=0, callbacks=[_Epoch()])
    copied = _copy_back(quantised, keras_model)
    return QatResult(_reload(keras_model, model), copied, losses,
                     time.perf_counter() - start)


def _kind(model: Model) -> str:
    return {"keras": "Keras 3 model", "h5": "Keras 3 .h5 model"}.get(
        model.source.format, f"{model.source.format} model (no Keras layers)")


def _copy_back(quantised: Any, original: Any) -> int:
    """The fine-tuned float weights into the original layers, matched by variable name (a
    wrapper holds its layer's variables under their own names; TFMOT's kernels are not among
    the inner layer's ``get_weights()``); the number of layers updated."""
    tuned = {w.name: w for w in quantised.weights}
    copied = 0
    for layer in original.layers:
        hits = [(w, tuned[w.name]) for w in layer.weights
                if w.name in tuned and tuple(tuned[w.name].shape) == tuple(w.shape)]
        for mine, theirs in hits:
            mine.assign(theirs.numpy())
        copied += bool(hits)
    return copied


def _reload(keras_model: Any, model: Model) -> Model:
    """The fine-tuned tf_keras model through the front end (an .h5 in a temporary directory)."""
    from rewriter.frontends import LoadOptions, load_model
    from rewriter.verify.data import static

    shapes = {s.name: static(s.shape) for s in model.inputs}
    with tempfile.TemporaryDirectory(prefix="rewriter-qat-") as tmp:
        path = os.path.join(tmp, "qat.h5")
        keras_model.save(path)
        tuned = load_model(path, LoadOptions(input_shapes=shapes))
    tuned.source.path = model.source.path
    tuned.source.notes.append("--qat: weights fine-tuned with TFMOT quantization-aware training")
    return tuned
